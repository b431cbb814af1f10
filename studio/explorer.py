"""The Threshold explorer tab: tokens per forward against agreement with τ = 1 over a prompt set."""

from __future__ import annotations

import csv
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import gradio as gr
import pandas as pd
import plotly.graph_objects as go

from mars_core.evaluation.prompts import prompt_categories, prompt_set, prompts_in
from mars_core.evaluation.sweep import SWEEP_COLUMNS, threshold_sweep
from studio import models
from studio.charts import MARS_COLOUR, TAU_COLOUR, VERIFIED_COLOUR, chart_layout
from studio.inputs import THRESHOLDS, check, check_inputs, slider, typed_js, unchecked, warn
from studio.lanes import guarded


def parse_thresholds(text: str) -> list[float]:
    """Thresholds typed as "1, 0.9, 0.8"; a ValueError says what is wrong."""
    parts = [p for p in str(text or "").replace(",", " ").split() if p]
    if not parts:
        raise ValueError("Type at least one threshold, e.g. 1, 0.9, 0.8.")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise ValueError(f"Thresholds must be numbers separated by commas, got {text!r}.") from None
    low, high = THRESHOLDS
    bad = [v for v in values if not low <= v <= high]
    if bad:
        raise ValueError(f"Thresholds must be between {low:g} and {high:g}, got {', '.join(f'{v:g}' for v in bad)}.")
    return values


def pareto_figure(rows: list[dict], mode: str = "threshold mode") -> go.Figure:
    """Tokens per forward against quality, one point per threshold, the Pareto front joined."""
    xs, ys = [r["tokens_per_forward"] for r in rows], [r["quality"] for r in rows]
    front = sorted((r for r in rows if not any(
        o["tokens_per_forward"] >= r["tokens_per_forward"] and o["quality"] >= r["quality"]
        and (o["tokens_per_forward"], o["quality"]) != (r["tokens_per_forward"], r["quality"]) for o in rows)),
        key=lambda r: r["tokens_per_forward"])
    fig = go.Figure()
    fig.add_scatter(x=[r["tokens_per_forward"] for r in front], y=[r["quality"] for r in front], mode="lines",
                    name="Pareto front", line=dict(color=MARS_COLOUR, width=2))
    fig.add_scatter(x=xs, y=ys, mode="markers+text", name="threshold", text=[f"τ={r['threshold']:g}" for r in rows],
                    textposition="top center", marker=dict(size=10, color=TAU_COLOUR))
    layout = chart_layout(f"{mode}: tokens per forward against quality (agreement with τ = 1)", "tokens per forward",
                          "quality")
    layout["yaxis"]["range"] = [min(ys) - 0.05, 1.08]
    fig.update_layout(**{**layout, "height": 380})
    return fig


def speed_figure(rows: list[dict], mode: str = "verified") -> go.Figure:
    """Verified mode, where every answer is AR's: tokens per forward and tokens per second against the draft
    threshold (τ = 1 checks no drafts: one-token decoding, the baseline both are read against)."""
    rows = sorted(rows, key=lambda r: r["threshold"])
    taus = [r["threshold"] for r in rows]
    fig = go.Figure()
    fig.add_scatter(x=taus, y=[r["tokens_per_forward"] for r in rows], mode="lines+markers+text",
                    name="tokens per forward", text=[f"{r['tokens_per_forward']:.2f}" for r in rows],
                    textposition="top center", line=dict(color=VERIFIED_COLOUR, width=3))
    fig.add_scatter(x=taus, y=[r["tokens_per_second"] for r in rows], mode="lines+markers", yaxis="y2",
                    name="tokens per second (this machine, now)", line=dict(color=TAU_COLOUR, width=2, dash="dot"))
    layout = chart_layout(f"{mode}: tokens per forward and per second by draft threshold (every answer is AR's)",
                          "draft threshold (1 = no drafts: one token per forward)", "tokens per forward")
    layout["yaxis"]["rangemode"] = "tozero"
    layout["yaxis2"] = {"title": {"text": "tokens per second"}, "overlaying": "y", "side": "right",
                        "rangemode": "tozero", "showgrid": False}
    fig.update_layout(**{**layout, "height": 380})
    return fig


NOISY = ("Seconds are this shared CPU's, now, and noisy (other work on the machine moves them by tens of "
         "percent); tokens per forward are the count that carries over to another machine.")


def speed_note(rows: list[dict]) -> str:
    """Verified mode's fastest threshold by tokens per second, against τ = 1 (when it was swept): said also when
    τ = 1, no drafts, was the fastest; and that the clock is noisy."""
    one = next((r for r in rows if r["threshold"] == 1.0), None)
    if one is None or not one["tokens_per_second"]:
        return f" {NOISY}"
    best = max(rows, key=lambda r: r["tokens_per_second"])
    if best is one:
        drafted = max((r for r in rows if r is not one), key=lambda r: r["tokens_per_second"], default=None)
        runner = (f"; the fastest draft threshold, {drafted['threshold']:g}, made {drafted['tokens_per_forward']:.2f} "
                  f"tokens per forward at {drafted['tokens_per_second'] / one['tokens_per_second']:.2f}× its tokens "
                  "per second" if drafted else "")
        return (f" Fastest here: τ = 1 (no drafts, one token per forward){runner}: on this run's clock the wider "
                f"forwards did not pay for their drafts. {NOISY}")
    return (f" Fastest here: draft threshold {best['threshold']:g}, {best['tokens_per_forward']:.2f} tokens per "
            f"forward and {best['tokens_per_second'] / one['tokens_per_second']:.2f}× the tokens per second of "
            f"τ = 1. {NOISY}")


MODES = {"threshold mode": "sliding", "verified": "verified"}  # what the explorer sweeps -> mars_core strategy


@dataclass(frozen=True)
class SweepSettings:
    """A sweep's settings, checked (checked_settings): what decode runs."""

    values: list[float]  # the thresholds swept (τ = 1 is decoded too: the reference answers)
    block: int  # block size B
    new: int  # max new tokens per answer
    prompts: list[dict]  # the prompts (each with its category)
    strategy: str  # mars_core's strategy: "sliding" (threshold mode) or "verified"
    mode: str  # the mode as the page names it (MODES)


def checked_settings(thresholds: str, block_size: Any, max_new_tokens: Any, categories: list[str] | None,
                     limit: Any, mode: str) -> SweepSettings:
    """The validated sweep settings: thresholds, B, max new tokens, the prompts, the strategy (a ValueError else)."""
    values = parse_thresholds(thresholds)
    _, _, block, _, new = check_inputs("sweep", 1.0, block_size, 0.0, max_new_tokens, tab="sweep")
    if mode not in MODES:
        raise ValueError(f"Mode must be one of {', '.join(MODES)}, got {mode!r}.")
    if not isinstance(categories, (list, tuple)) or not all(isinstance(c, str) for c in categories):
        raise ValueError(f"Prompt categories must be a list of names, got {categories!r}.")
    count = check("sweep-limit", limit, high=len(prompt_set()))
    prompts = prompts_in(list(categories), limit=count)
    if not prompts:
        raise ValueError("Pick at least one prompt category.")
    return SweepSettings(values, block, new, prompts, MODES[mode], mode)


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def plan(thresholds: str, block_size: Any, max_new_tokens: Any, categories: list[str] | None, limit: Any,
         mode: str = "threshold mode") -> str:
    """What a sweep with these settings will decode, before it starts: the answers and the most forwards they can
    take (the time is estimated while it runs, from this run's own answers: sweep)."""
    if any(v is None for v in (block_size, max_new_tokens, limit)):
        return gr.skip()  # a value still being typed (typed_js): nothing to say yet
    try:
        settings = checked_settings(thresholds, block_size, max_new_tokens, categories, limit, mode)
    except ValueError as err:
        return f"⚠ {err}"
    values, new, prompts = settings.values, settings.new, settings.prompts
    runs = len(set(values) | {1.0})  # the τ = 1 answers are decoded too: quality is agreement with them
    forwards = len(prompts) * runs * new  # at most: every answer to max new tokens, one token per forward
    listing = "\n".join(f"{i + 1}. *{p['category']}*: {p['prompt'][:90]}" for i, p in enumerate(prompts))
    return (f"**{plural(len(prompts), 'prompt')} × {plural(runs, 'decoding')} (τ = 1 included) = "
            f"{len(prompts) * runs} answers** of up to {new} tokens: at most {forwards:,} forwards. While it runs, "
            "the status gives the time elapsed and an estimate of the time left, from the answers this run has "
            "decoded so far (the τ = 1 answers come first and are the slowest).\n\n" + listing)


def sweep(
    thresholds: str, block_size: int, max_new_tokens: int, categories: list[str], limit: int = 9,
    mode: str = "threshold mode", progress: Any = gr.Progress(),
) -> Iterator[tuple[Any, pd.DataFrame | None, str | None, str]]:
    """The Run sweep button: the settings checked, then the sweep in a generation slot (until one is free, the status
    says so and the results on screen stay); while it runs, the status gives the time elapsed and left; its last
    frame is chart, table, CSV and status. (The Run sweep button's handler: Gradio passes its six inputs
    positionally and fills `progress`.)"""
    try:
        settings = checked_settings(thresholds, block_size, max_new_tokens, categories, limit, mode)
    except ValueError as err:
        yield failure(str(err))
        return
    yield from models.in_a_slot(guarded(decode(settings, progress), failure, "Sweep"),
                                lambda: (gr.skip(), gr.skip(), gr.skip(), models.WAITING))


def run_sweep(
    thresholds: str, block_size: int, max_new_tokens: int, categories: list[str], limit: int = 9,
    mode: str = "threshold mode", *, progress: Any = gr.Progress(),
) -> tuple[Any, pd.DataFrame | None, str | None, str]:
    """Sweep the thresholds over the first `limit` prompts of the chosen categories: chart, table, CSV, status (the
    last frame of sweep)."""
    *_, last = sweep(thresholds, block_size, max_new_tokens, categories, limit, mode, progress)
    return last


def failure(message: str) -> tuple[Any, Any, Any, str]:
    """The explorer's outputs for a message instead of a sweep: the chart, table and CSV on screen stay; the one
    message in the status line, under the Run button."""
    return gr.skip(), gr.skip(), gr.skip(), warn(message)


def estimate(elapsed: float, done: int, total: int) -> str:
    """The running status: time elapsed and, once an answer is done, the time left estimated from this run's answers
    so far (their mean time, for each answer left)."""
    if not done:
        return f"**{elapsed:.0f} s elapsed**, 0 of {total} answers decoded (the estimate comes with the first one)"
    left = elapsed / done * (total - done)
    return (f"**{elapsed:.0f} s elapsed, about {left:.0f} s left** (about {elapsed + left:.0f} s in all: "
            f"{done} of {total} answers decoded, {elapsed / done:.1f} s each so far in this run)")


class Stopped(Exception):
    """The page left while the sweep ran: its thread ends before the next answer."""


def decode(settings: SweepSettings, progress: Any) -> Iterator[tuple[Any, pd.DataFrame, str, str]]:
    """The sweep itself, inside a generation slot: decoded in a thread while this generator yields the status each
    second (time elapsed and left, from this run's answers), then one frame with the results."""
    values, block, new, prompts, strategy, mode = (settings.values, settings.block, settings.new, settings.prompts,
                                                   settings.strategy, settings.mode)
    for said in models.preparing([models.CONFIG.model]):
        yield gr.skip(), gr.skip(), gr.skip(), said
    model, tok = models.get_model(models.CONFIG.model)
    runs = len(set(values) | {1.0})
    total, state = len(prompts) * runs, {"done": 0, "left": False, "rows": None, "error": None}

    def step(fraction: float, description: str | None = None) -> None:
        if state["left"]:
            raise Stopped()
        state["done"] = round(fraction * total)
        progress(fraction, description)

    def work() -> None:
        try:
            with models.TRACKER:
                state["rows"] = threshold_sweep(model, tok, prompts, values, block_size=block, max_new_tokens=new,
                                                strategy=strategy, progress=step,
                                                runtime=models.get_runtime(models.CONFIG.model))
        except Exception as err:  # noqa: BLE001 - handed to the generator, which says it (guarded)
            state["error"] = err

    start = time.monotonic()
    thread = threading.Thread(target=work, name="sweep", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(timeout=1.0)
            if thread.is_alive():
                yield gr.skip(), gr.skip(), gr.skip(), estimate(time.monotonic() - start, state["done"], total)
    finally:
        state["left"] = True  # a page that leaves (Gradio closes this generator) ends the thread's sweep too
    if state["error"] is not None:
        raise state["error"]
    seconds = time.monotonic() - start
    rows = state["rows"]
    path = os.path.join(tempfile.mkdtemp(prefix="mars_sweep_"), "threshold_sweep.csv")
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(SWEEP_COLUMNS))
        writer.writeheader()
        writer.writerows(rows)
    table = pd.DataFrame(rows, columns=list(SWEEP_COLUMNS)).round(3)
    status = (f"Swept {plural(len(rows), 'threshold')} over {plural(len(prompts), 'prompt')} in {mode} (B = {block}, "
              f"up to {new} new tokens) in **{seconds:.0f} s**.")
    if strategy == "verified":
        yield speed_figure(rows, mode), table, path, status + speed_note(rows)
    else:
        yield pareto_figure(rows, mode), table, path, status


def build(demo: gr.Blocks) -> list[gr.Button]:
    """The Threshold explorer tab: the sweep's settings and plan, its chart, table and CSV, and their events; returns
    its Run button (enabled once the model is ready)."""
    with gr.Tab("Explorer", elem_id="explorer-tab"):  # short: four tab names fit a phone
        gr.Markdown(
            "Decode the held-out prompts (never trained on; the built-in set when the data is absent) at "
            "several thresholds, greedy, one prompt at a time. Quality is agreement with the τ = 1 answer: "
            "the shared-prefix fraction of tokens (1 = the same answer). In verified mode the threshold only "
            "chooses which drafts are checked: quality stays 1, so the chart shows what moves, tokens per forward "
            "and tokens per second (measured on this machine, now) against the draft threshold."
        )
        with gr.Row():
            mode = unchecked(gr.Radio(list(MODES), value="threshold mode", label="Mode", scale=1))  # checked_settings
            taus = gr.Textbox("1, 0.9, 0.7, 0.5", label="Thresholds", scale=2)
            block, new = slider("sweep-block"), slider("sweep-max-new")
        cats, pool = prompt_categories(), len(prompt_set())
        with gr.Row():
            categories = unchecked(gr.CheckboxGroup(cats, value=cats, label="Prompt categories", scale=3))
            limit = slider("sweep-limit", maximum=pool, value=min(9, pool), scale=1)
        plan_view = gr.Markdown(elem_id="sweep-plan")
        run_button = gr.Button("Run sweep", variant="primary", elem_id="sweep-run")
        status = gr.Markdown(label="status", elem_id="sweep-status")
        pareto = gr.Plot(label="pareto", show_label=False)
        table = gr.Dataframe(pd.DataFrame(columns=list(SWEEP_COLUMNS)), label="Results", interactive=False,
                             elem_id="sweep-table")
        csv_file = gr.File(label="CSV")
    inputs = [taus, block, new, categories, limit, mode]
    run_button.click(models.gpu(sweep), inputs, [pareto, table, csv_file, status], api_name="sweep",
                     show_progress_on=pareto, js=typed_js(inputs, True))
    gr.on([c.change for c in inputs] + [demo.load], plan, inputs, plan_view, api_visibility="undocumented",
          show_progress="hidden", queue=False, js=typed_js(inputs, False))
    return [run_button]
