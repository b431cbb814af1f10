"""MARS Studio's Gradio app: race MARS against one-token decoding, walk through the method, sweep the threshold.

The UI only: every token comes from mars_core. Run `python app.py [--model PATH_OR_ID] [--ar-model ...] [--port N]`.
"""

from __future__ import annotations

import argparse
import csv
import html
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import gradio as gr
import pandas as pd
import plotly.graph_objects as go
import torch
from gradio.components.plot import PlotData

from mars_core import DecodeControl, stream, training_attention_mask
from mars_core.generate import encode_prompt
from mars_core.load import load
from mars_core.prompts import prompt_categories, prompt_set, prompts_in
from mars_core.serving import LoadTracker, adaptive_threshold
from mars_core.sweep import DEFAULT_THRESHOLDS, SWEEP_COLUMNS, agreement, threshold_sweep

log = logging.getLogger("mars_studio")

try:  # Hugging Face ZeroGPU: a GPU per call when the `spaces` package is there; a no-op everywhere else
    import spaces

    gpu: Callable = getattr(spaces, "GPU", None) or (lambda fn: fn)
except ImportError:
    gpu = lambda fn: fn  # noqa: E731

MAX_NEW_TOKENS = 512  # hard cap per run, whatever the client sends
MAX_PROMPT_CHARS = 4000
MAX_BLOCK_SIZE = 16
MAX_TEMPERATURE = 2.0
WALK_MAX_NEW_TOKENS = 64
SWEEP_MAX_NEW_TOKENS = 256
# On a Hugging Face Space (SPACE_ID set) the models come from this list only, never an arbitrary path.
SPACE_MODELS = (
    "default",
    "smollm2-135m-instruct",
    "HuggingFaceTB/SmolLM2-135M-Instruct",
    "Xalphinions/MARS-Qwen2.5-0.5B-AR-SFT",
    "Xalphinions/MARS-Qwen2.5-0.5B-blk4",
    "Xalphinions/MARS-Qwen2.5-0.5B-blk8",
    "Xalphinions/MARS-Qwen2.5-0.5B-blk16",
)
EXAMPLES = [
    "List the days of the week.",
    "Count from 1 to 20, separated by commas.",
    "Explain in two sentences why the sky is blue.",
    "Write a haiku about the sea.",
]
# Background of a forward's tokens by how many tokens that forward committed: (most tokens, colour, legend).
COUNT_COLOURS = (
    (1, "#e8ebf0", "1"), (2, "#c9e2ff", "2"), (3, "#93c5fd", "3"), (4, "#60a5fa", "4"),
    (8, "#c4b5fd", "5–8"), (10**9, "#f9a8d4", "9+"),
)
AR_COLOUR, MARS_COLOUR, TAU_COLOUR = "#94a3b8", "#2563eb", "#f59e0b"
CATEGORY_NAMES = ("hidden", "clean → clean (causal)", "noisy → noisy (same block, causal)",
                  "noisy → clean (earlier blocks)")
CATEGORY_COLOURS = ("#f1f5f9", "#64748b", "#2563eb", "#f59e0b")
CSS = ".gradio-container {max-width: 1400px !important; margin: 0 auto}"
THEME = gr.themes.Soft(primary_hue="blue")
PANE = dict(min_height=320, max_height=320, autoscroll=True)  # both panes the same fixed height, following the text


@dataclass(frozen=True)
class AppConfig:
    """What the app serves: set once by main(), the same for every user."""

    model: str | None = None  # MARS checkpoint: a local path, hub id, or None for the embedded default
    ar_model: str | None = None  # separate AR baseline; None = the MARS checkpoint in one-token mode
    concurrency: int = 4  # generations the queue runs at once


CONFIG = AppConfig()
MODELS: dict[str, tuple[Any, Any]] = {}  # loaded (model, tokenizer) by name: read-only once loaded
_LOAD_LOCK = threading.Lock()
TRACKER = LoadTracker()  # the one shared counter: generations running now, for "adapt to load"


# ----------------------------------------------------------------------------- models and inputs


def check_model_choice(name: str | None) -> None:
    """On a Space (SPACE_ID set) only the fixed SPACE_MODELS list may be served."""
    if os.environ.get("SPACE_ID") and (name or "default") not in SPACE_MODELS:
        raise ValueError(f"On a Space the model must be one of {', '.join(SPACE_MODELS)}; got {name!r}")


def get_model(name: str | None) -> tuple[Any, Any]:
    """The (model, tokenizer) for name, loaded on first use and cached; a ValueError says why loading failed."""
    key = name or "default"
    if key not in MODELS:
        with _LOAD_LOCK:
            if key not in MODELS:
                check_model_choice(name)
                try:
                    MODELS[key] = load(name)
                except Exception as err:  # any failure becomes a message in the UI
                    log.exception("loading %s failed", key)
                    raise ValueError(f"Could not load model {key!r}: {err}") from err
    return MODELS[key]


def model_label(name: str | None) -> str:
    """How the UI names a model."""
    return f"`{name}`" if name else "the embedded default (SmolLM2-135M-Instruct)"


def _number(value: Any, name: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None


def _integer(value: Any, name: str) -> int:
    number = _number(value, name)
    if not number.is_integer():
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    return int(number)


def check_inputs(
    prompt: Any, threshold: Any, block_size: Any, temperature: Any, max_new_tokens: Any, cap: int = MAX_NEW_TOKENS
) -> tuple[str, float, int, float, int]:
    """Validated (prompt, threshold, block size, temperature, max new tokens); a ValueError says what is wrong."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("Empty prompt: type something (or pick an example) first.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"Prompt too long: {len(prompt)} characters, the limit is {MAX_PROMPT_CHARS}.")
    tau = _number(threshold, "threshold")
    if not 0.0 < tau <= 1.0:
        raise ValueError(f"Threshold must be in (0, 1] (1 = one token per forward), got {tau:g}.")
    block = _integer(block_size, "block size")
    if not 1 <= block <= MAX_BLOCK_SIZE:
        raise ValueError(f"Block size must be between 1 and {MAX_BLOCK_SIZE}, got {block}.")
    temp = _number(temperature, "temperature")
    if not 0.0 <= temp <= MAX_TEMPERATURE:
        raise ValueError(f"Temperature must be between 0 and {MAX_TEMPERATURE:g}, got {temp:g}.")
    new = _integer(max_new_tokens, "max new tokens")
    if not 1 <= new <= cap:
        raise ValueError(f"Max new tokens must be between 1 and {cap}, got {new}.")
    return prompt, tau, block, temp, new


def warn(message: str) -> str:
    """Show message as a toast in the UI and return it as a status line."""
    gr.Warning(message)
    return f"⚠ {message}"


# ----------------------------------------------------------------------------- Race: per-session state and runs


def new_session() -> dict:
    """Per-session race state: the slider's threshold, the adapt switch, and the running controls."""
    return {"threshold": 0.9, "adapt": False, "mars": None, "ar": None}


def threshold_in_force(session: dict) -> float:
    """The session's threshold, lowered by the serving policy when "adapt to load" is on."""
    base = session["threshold"]
    return adaptive_threshold(base, TRACKER.active) if session["adapt"] else base


def set_threshold(threshold: float, session: dict) -> None:
    """Slider change: the running MARS generation uses the new threshold from its next forward."""
    try:
        tau = _number(threshold, "threshold")
        if not 0.0 < tau <= 1.0:
            raise ValueError(f"Threshold must be in (0, 1], got {tau:g}.")
    except ValueError as err:
        warn(str(err))
        return
    session["threshold"] = tau
    control = session.get("mars")
    if control is not None:
        control.threshold = threshold_in_force(session)


def set_adapt(adapt: bool, session: dict) -> None:
    """"Adapt to load" switch: on or off for the running generation too."""
    session["adapt"] = bool(adapt)
    control = session.get("mars")
    if control is not None:
        control.threshold = threshold_in_force(session)


def stop(session: dict) -> None:
    """Stop button: both generations end before their next forward."""
    for key in ("mars", "ar"):
        if session.get(key) is not None:
            session[key].stop()


@dataclass
class Run:
    """One pane's generation: its event stream and what it has committed, timed by its own forwards only."""

    name: str
    events: Iterator
    tokenizer: Any
    chunks: list[tuple[int, list[str], list[float]]] = field(default_factory=list)  # per forward: index, pieces, conf
    counts: list[int] = field(default_factory=list)  # tokens committed by each forward
    thresholds: list[float] = field(default_factory=list)  # threshold each forward used
    times: list[float] = field(default_factory=list)  # own busy seconds after each forward
    totals: list[int] = field(default_factory=list)  # tokens committed after each forward
    ids: list[int] = field(default_factory=list)  # every committed token id
    text: str = ""
    busy: float = 0.0
    finished: bool = False

    def advance(self) -> None:
        """Run one forward (timing only this call) and record what it committed."""
        start = time.perf_counter()
        try:
            event = next(self.events)
        except StopIteration:
            self.finished = True
            return
        self.busy += time.perf_counter() - start
        ids, conf, text = event.token_ids[0], event.confidences[0], event.texts[0]
        self.counts.append(len(ids))
        self.thresholds.append(event.threshold)
        self.times.append(self.busy)
        self.totals.append((self.totals[-1] if self.totals else 0) + len(ids))
        self.text += text
        self.ids += ids
        if ids:
            pieces = [self.tokenizer.decode([i], skip_special_tokens=True) for i in ids]
            if "".join(pieces) != text:  # a character split over tokens: show the forward's text as one piece
                pieces = [text]
            self.chunks.append((event.forward, pieces, conf))
        self.finished = event.done[0]

    def summary(self) -> dict:
        """Forwards, tokens, tokens per forward and tokens per second of this run."""
        forwards, tokens = len(self.counts), sum(self.counts)
        return {
            "forwards": forwards, "tokens": tokens, "tokens_per_forward": tokens / max(forwards, 1),
            "seconds": self.busy, "tokens_per_second": tokens / self.busy if self.busy > 0 else 0.0,
        }


def count_colour(count: int) -> str:
    """Background colour for a forward that committed `count` tokens."""
    return next(colour for most, colour, _ in COUNT_COLOURS if count <= most)


def legend_html() -> str:
    """The colour legend shown above the panes."""
    chip = "display:inline-block;padding:1px 8px;margin:0 3px;border-radius:4px"
    chips = "".join(f'<span style="background:{c};{chip}">{label}</span>' for _, c, label in COUNT_COLOURS)
    return (
        f'<div style="font-size:0.9em">Tokens committed by one forward: {chips}'
        ' &nbsp;·&nbsp; <span style="border-bottom:2px dotted #dc2626">dotted</span> = confidence below 0.5'
        " &nbsp;·&nbsp; hover a token for its forward and confidence</div>"
    )


def pane_html(run: Run | None, status: str = "") -> str:
    """A pane's text, each forward's tokens on a background coloured by how many it committed."""
    spans = []
    for forward, pieces, conf in run.chunks if run else []:
        colour, n = count_colour(len(conf)), len(conf)
        for k, piece in enumerate(pieces):
            c = conf[k] if len(pieces) == n else min(conf)
            underline = "border-bottom:2px dotted #dc2626;" if c < 0.5 else ""
            tip = f"forward {forward} · {n} token{'s' * (n > 1)} · confidence {c:.2f}"
            left = "border-top-left-radius:4px;border-bottom-left-radius:4px;margin-left:2px;" if k == 0 else ""
            right = "border-top-right-radius:4px;border-bottom-right-radius:4px;" if k == len(pieces) - 1 else ""
            spans.append(
                f'<span title="{tip}" style="background:{colour};{left}{right}{underline}padding:2px 0;'
                f'box-decoration-break:clone">{html.escape(piece)}</span>'
            )
    body = "".join(spans) or '<span style="color:#94a3b8">(the text streams here)</span>'
    foot = f'<div style="margin-top:8px;color:#64748b;font-size:0.85em">{html.escape(status)}</div>' if status else ""
    return (
        '<div style="white-space:pre-wrap;line-height:2;font-size:15px;min-height:300px;padding:10px 12px;'
        f'border:1px solid #e2e8f0;border-radius:8px;background:#fff;color:#0f172a">{body}{foot}</div>'
    )


def plotly_data(fig: dict) -> PlotData:
    """A figure given as a plain plotly dict, ready for gr.Plot (no per-update plotly validation: fast)."""
    return PlotData(type="plotly", plot=json.dumps(fig))


def _layout(title: str, x: str, y: str, **extra: Any) -> dict:
    """The common chart layout: title, axes, horizontal legend, white background."""
    axis = dict(gridcolor="#eef2f7", zerolinecolor="#cbd5e1")
    return {
        "title": {"text": title, "x": 0.02, "font": {"size": 14}}, "height": 300,
        "margin": {"l": 50, "r": 50, "t": 40, "b": 40}, "plot_bgcolor": "#ffffff", "paper_bgcolor": "#ffffff",
        "legend": {"orientation": "h", "y": 1.02, "x": 1, "xanchor": "right", "yanchor": "bottom"},
        "xaxis": {**axis, "title": {"text": x}}, "yaxis": {**axis, "title": {"text": y}}, **extra,
    }


def forwards_figure(ar: Run | None, mars: Run | None, block_size: int) -> dict:
    """Tokens committed by each forward: MARS bars against AR's flat 1, with the threshold each MARS forward used."""
    data = []
    if mars:
        xs = list(range(len(mars.counts)))
        data.append({"type": "bar", "x": xs, "y": mars.counts, "name": "MARS", "marker": {"color": MARS_COLOUR}})
        data.append({"type": "scatter", "mode": "lines", "x": xs, "y": mars.thresholds, "name": "threshold τ",
                     "yaxis": "y2", "line": {"color": TAU_COLOUR, "dash": "dot", "shape": "hv"}})
    if ar:
        data.append({"type": "scatter", "mode": "lines", "x": list(range(len(ar.counts))), "y": ar.counts,
                     "name": "AR", "line": {"color": AR_COLOUR, "width": 3}})
    layout = _layout("Tokens per forward", "forward", "tokens committed", bargap=0.15)
    layout["yaxis"].update(range=[0, block_size + 0.5], dtick=1)
    layout["yaxis2"] = {"overlaying": "y", "side": "right", "range": [0, 1.05], "title": {"text": "τ"},
                        "showgrid": False}
    return {"data": data, "layout": layout}


def time_figure(ar: Run | None, mars: Run | None) -> dict:
    """Tokens committed against each run's own forward time."""
    data = [
        {"type": "scatter", "mode": "lines", "x": [0.0, *run.times], "y": [0, *run.totals], "name": run.name,
         "line": {"color": colour, "width": 3}}
        for run, colour in ((ar, AR_COLOUR), (mars, MARS_COLOUR)) if run
    ]
    return {"data": data, "layout": _layout("Tokens against time (each run's own forwards)", "seconds", "tokens")}


def stats_markdown(ar: Run, mars: Run, session: dict, block_size: int, status: str) -> str:
    """The stats line: forwards, tokens, tokens per forward, tokens/s for both, and the speedup."""
    a, m = ar.summary(), mars.summary()
    speedup = m["tokens_per_second"] / a["tokens_per_second"] if a["tokens_per_second"] > 0 else 0.0
    tau = mars.thresholds[-1] if mars.thresholds else threshold_in_force(session)
    shared = round(agreement(ar.ids, mars.ids) * max(len(ar.ids), len(mars.ids)))
    agree = f" · MARS agrees with AR on its first {shared} of {max(len(ar.ids), len(mars.ids))} tokens"
    load_note = (
        f" (adapting to load: {TRACKER.active} generation(s) running, base τ {session['threshold']:.2f})"
        if session["adapt"] else ""
    )

    def line(name: str, s: dict) -> str:
        return (f"**{name}** {s['forwards']} forwards · {s['tokens']} tokens · "
                f"**{s['tokens_per_forward']:.2f} tokens/forward** · {s['tokens_per_second']:.1f} tokens/s")

    return (
        f"{line('MARS', m)} · B = {block_size} · threshold in force **τ = {tau:.2f}**{load_note}  \n"
        f"{line('AR', a)}  \n"
        f"**Speedup {speedup:.2f}×** in tokens/s{agree} · {status}"
    )


def trace(ar: Run | None, mars: Run | None, status: str, message: str = "") -> dict:
    """Per-forward data of both runs (the JSON output; clients and tests read it)."""

    def one(run: Run | None) -> dict:
        if run is None:
            return {}
        return {**run.summary(), "counts": run.counts, "thresholds": run.thresholds, "times": run.times,
                "text": run.text}

    return {"status": status, "message": message, "ar": one(ar), "mars": one(mars)}


def failure(message: str) -> tuple:
    """Race outputs that show a message instead of results."""
    return pane_html(None), pane_html(None), None, None, warn(message), trace(None, None, "error", message)


def race(
    prompt: str, threshold: float, block_size: int, temperature: float, max_new_tokens: int, adapt: bool,
    session: dict,
) -> Iterator[tuple]:
    """Stream AR and MARS side by side, one forward each in turn; yields panes, charts, stats and per-forward data."""
    try:
        prompt, tau, block, temp, new = check_inputs(prompt, threshold, block_size, temperature, max_new_tokens)
    except ValueError as err:
        yield failure(str(err))
        return
    session.update(threshold=tau, adapt=bool(adapt))
    if not all((name or "default") in MODELS for name in (CONFIG.model, CONFIG.ar_model or CONFIG.model)):
        yield pane_html(None, "loading the model…"), pane_html(None, "loading the model…"), None, None, \
            "Loading the model (the first load of the default model takes about 25 s)…", trace(None, None, "loading")
    try:
        model, tokenizer = get_model(CONFIG.model)
        ar_model, ar_tokenizer = get_model(CONFIG.ar_model) if CONFIG.ar_model else (model, tokenizer)
    except ValueError as err:
        yield failure(str(err))
        return
    mars_ctl = DecodeControl(threshold=tau, temperature=temp)
    ar_ctl = DecodeControl(threshold=1.0, temperature=temp)
    session["mars"], session["ar"] = mars_ctl, ar_ctl
    ar = Run("AR", stream(ar_model, ar_tokenizer, prompt, strategy="ar", max_new_tokens=new, control=ar_ctl),
             ar_tokenizer)
    mars = Run("MARS", stream(model, tokenizer, prompt, strategy="sliding", block_size=block, max_new_tokens=new,
                              control=mars_ctl), tokenizer)
    status = "running"
    try:
        with TRACKER:
            while not (ar.finished and mars.finished):
                if not ar.finished:
                    ar.advance()
                if not mars.finished:
                    mars_ctl.threshold = threshold_in_force(session)
                    mars.advance()
                stopped = mars_ctl.stopped or ar_ctl.stopped
                status = "stopped" if stopped else ("done" if ar.finished and mars.finished else "running")
                yield (
                    pane_html(ar, f"{status} · {sum(ar.counts)} tokens in {len(ar.counts)} forwards"),
                    pane_html(mars, f"{status} · {sum(mars.counts)} tokens in {len(mars.counts)} forwards"),
                    plotly_data(forwards_figure(ar, mars, block)), plotly_data(time_figure(ar, mars)),
                    stats_markdown(ar, mars, session, block, status), trace(ar, mars, status),
                )
    except ValueError as err:  # mars_core's checks: prompt too long for the context, missing mask token, …
        yield failure(str(err))
    except Exception as err:  # never a traceback in the UI; the server log has it
        log.exception("race failed")
        yield failure(f"Generation failed: {type(err).__name__}: {err}")
    finally:
        if session.get("mars") is mars_ctl:
            session["mars"] = session["ar"] = None


# ----------------------------------------------------------------------------- Walkthrough


def mask_categories(n: int, block_size: int) -> torch.Tensor:
    """Per cell of the [noisy | clean] mask, which rule lets the query see the key (0 = none), from the rule text."""
    p = torch.arange(n)
    q, k = p[:, None], p[None, :]
    same_block = (q // block_size) == (k // block_size)
    cats = torch.zeros(2 * n, 2 * n, dtype=torch.long)
    cats[n:, n:] = torch.where(k <= q, 1, 0)  # clean -> clean: causal
    cats[:n, :n] = torch.where((k <= q) & same_block, 2, 0)  # noisy -> noisy: causal, same block
    cats[:n, n:] = torch.where((k // block_size) < (q // block_size), 3, 0)  # noisy -> clean: earlier blocks
    return cats  # clean -> noisy stays 0: never


def mask_figure(n: int, block_size: int) -> go.Figure:
    """The training attention mask as a heatmap, each visibility rule in its own colour."""
    n, block_size = int(n), int(block_size)
    mask = training_attention_mask(n, block_size)
    cats = mask_categories(n, block_size)
    assert torch.equal(mask, cats > 0), "the rule colours disagree with mars_core.training_attention_mask"
    labels = [f"x̃{i}" for i in range(n)] + [f"x{i}" for i in range(n)]
    scale = []
    for i, colour in enumerate(CATEGORY_COLOURS):
        scale += [[i / len(CATEGORY_COLOURS), colour], [(i + 1) / len(CATEGORY_COLOURS), colour]]
    hover = [[f"query {labels[r]} → key {labels[c]}: {CATEGORY_NAMES[int(cats[r, c])]}" for c in range(2 * n)]
             for r in range(2 * n)]
    fig = go.Figure(go.Heatmap(
        z=cats.tolist(), x=labels, y=labels, colorscale=scale, zmin=-0.5, zmax=len(CATEGORY_COLOURS) - 0.5,
        xgap=1, ygap=1, text=hover, hoverinfo="text",
        colorbar=dict(tickvals=list(range(4)), ticktext=list(CATEGORY_NAMES), thickness=14),
    ))
    for b in range(block_size, n, block_size):  # block boundaries inside each stream
        for offset in (0, n):
            fig.add_shape(type="line", x0=b + offset - 0.5, x1=b + offset - 0.5, y0=-0.5, y1=2 * n - 0.5,
                          line=dict(color="#cbd5e1", width=1, dash="dot"))
            fig.add_shape(type="line", y0=b + offset - 0.5, y1=b + offset - 0.5, x0=-0.5, x1=2 * n - 0.5,
                          line=dict(color="#cbd5e1", width=1, dash="dot"))
    edge = dict(color="#0f172a", width=2)  # the noisy | clean split
    fig.add_shape(type="line", x0=n - 0.5, x1=n - 0.5, y0=-0.5, y1=2 * n - 0.5, line=edge)
    fig.add_shape(type="line", y0=n - 0.5, y1=n - 0.5, x0=-0.5, x1=2 * n - 0.5, line=edge)
    fig.update_layout(
        title=dict(text=f"Training attention mask, n = {n}, B = {block_size}: rows = queries, columns = keys "
                        "[noisy x̃ | clean x]", font=dict(size=14)),
        height=520, margin=dict(l=50, r=20, t=50, b=40), yaxis=dict(autorange="reversed", scaleanchor="x"),
        plot_bgcolor="#ffffff", paper_bgcolor="#ffffff",
    )
    return fig


LOSS_MARKDOWN = r"""
**The loss.** The response tokens of the *noisy* copy $\tilde x$ are all replaced by the mask token; one forward runs
over $[\tilde x \mid x]$ with position ids $[0..n) \mathbin{+\!\!+} [0..n)$ under the mask above. Logits are
right-shifted per stream, so the prediction for token $i$ is read at position $i-1$:

$$\text{logits}'[i] = \text{logits}[i-1]$$

$$\mathcal{L} = \mathrm{CE}\big(\text{noisy logits}',\, y\big)
 + \alpha \cdot \mathrm{CE}\big(\text{clean logits}',\, y\big), \qquad \alpha = 1$$

$y$ holds the response tokens (the prompt is ignored). On the clean stream this is ordinary next-token prediction,
which keeps one-token (AR) quality; the noisy stream learns to predict several tokens of a block at once from
the clean tokens of earlier blocks.
"""


def token_chip(text: str, colour: str = "#e2e8f0") -> str:
    """A token as a small chip with visible whitespace."""
    shown = html.escape(text).replace("\n", "↵").replace(" ", "␣") or "∅"
    return (f'<code style="background:{colour};padding:1px 5px;margin:1px;border-radius:4px;'
            f'white-space:pre;display:inline-block">{shown}</code>')


def walk_decode(prompt: str, threshold: float, block_size: int, max_new_tokens: int) -> tuple[str, dict]:
    """Decode a prompt with the sliding strategy and keep, per forward, its input, proposals and verdicts."""
    empty = {"steps": [], "index": 0}
    try:
        prompt, tau, block, _, new = check_inputs(prompt, threshold, block_size, 0.0, max_new_tokens,
                                                  cap=WALK_MAX_NEW_TOKENS)
        model, tok = get_model(CONFIG.model)
        fed = encode_prompt(tok, prompt)
        steps, context = [], ""
        with TRACKER:
            for event in stream(model, tok, prompt, strategy="sliding", block_size=block, max_new_tokens=new,
                                threshold=tau):
                steps.append({
                    "forward": event.forward, "threshold": event.threshold, "context": context,
                    "fed": [tok.decode([i]) for i in fed[-16:]], "fed_count": len(fed),
                    "masks": len(event.proposed_ids[0]) - 1,  # τ = 1 feeds none: none could be accepted
                    "proposals": [tok.decode([i]) for i in event.proposed_ids[0]],
                    "confidences": event.proposed_confidences[0], "start": event.accepted_from[0],
                    "accepted": len(event.token_ids[0]), "added": event.texts[0], "done": event.done[0],
                })
                context += event.texts[0]
                fed = event.token_ids[0]
    except ValueError as err:
        return f"<p>{html.escape(warn(str(err)))}</p>", empty
    except Exception as err:
        log.exception("walkthrough failed")
        return f"<p>{html.escape(warn(f'Decoding failed: {type(err).__name__}: {err}'))}</p>", empty
    walk = {"steps": steps, "index": 0}
    return step_html(walk), walk


def verdict(step: dict, slot: int) -> str:
    """Why a proposal was or was not committed."""
    start, end, tau = step["start"], step["start"] + step["accepted"], step["threshold"]
    if start <= slot < end:
        return "✓ accepted (the AR token: always)" if slot == start else f"✓ accepted (≥ τ = {tau:.2f})"
    if tau >= 1.0:
        return "— τ = 1: one token per forward"
    conf = step["confidences"]
    if conf[slot] < tau and all(c >= tau for c in conf[start + 1:slot]):
        return f"✗ rejected (< τ = {tau:.2f})"
    if any(c < tau for c in conf[start + 1:slot]):
        return "· not used (after a rejection)"
    return "· cut (end of text or token limit)"


CELL = 'style="border:1px solid #e2e8f0;padding:4px 10px"'


def step_html(walk: dict) -> str:
    """One forward of the walkthrough: its input, each slot's proposal and confidence, and what was accepted."""
    steps = walk["steps"]
    if not steps:
        return "<p>Press <b>Decode</b> to step through a generation one forward at a time.</p>"
    s = steps[walk["index"]]
    more = "…" if s["fed_count"] > len(s["fed"]) else ""
    masks = (f"{s['masks']} mask token{'s' * (s['masks'] != 1)}" if s["masks"]
             else "no mask tokens (τ = 1: none could be accepted)")
    fed_label = f"the prompt ({s['fed_count']} tokens{', last 16 shown' if more else ''})" if s["forward"] == 0 \
        else "the tokens the previous forward accepted (fed as real tokens)"
    fed = more + "".join(token_chip(t) for t in s["fed"]) + "".join(
        token_chip("[MASK]", "#fde68a") for _ in range(s["masks"]))
    rows = []
    for j, (text, conf) in enumerate(zip(s["proposals"], s["confidences"])):
        source = "last real token" if j == 0 else f"mask {j}"
        colour = "#dcfce7" if s["start"] <= j < s["start"] + s["accepted"] else "#fff"
        bar = (f'<div style="background:#e2e8f0;width:120px;height:8px;border-radius:4px;display:inline-block">'
               f'<div style="background:{MARS_COLOUR};width:{conf * 120:.0f}px;height:8px;border-radius:4px"></div>'
               "</div>")
        cells = (j, source, token_chip(text), f"{bar} {conf:.3f}", verdict(s, j))
        rows.append(f'<tr style="background:{colour}">' + "".join(f"<td {CELL}>{c}</td>" for c in cells) + "</tr>")
    context = html.escape(s["context"]) or '<span style="color:#94a3b8">(nothing yet)</span>'
    return f"""
<div style="line-height:1.7">
<p><b>Forward {s['forward'] + 1} of {len(steps)}</b> · threshold τ = {s['threshold']:.2f} ·
committed {s['accepted']} token{'s' * (s['accepted'] != 1)}{' · <b>finished</b>' if s['done'] else ''}</p>
<p><b>Committed before this forward:</b> <span style="white-space:pre-wrap">{context}</span></p>
<p><b>Input:</b> {fed_label}, then {masks}:<br>{fed}</p>
<table style="border-collapse:collapse;width:100%"><thead><tr style="text-align:left">{''.join(
    f"<th {CELL}>{h}</th>" for h in ("slot", "read from the logits of", "prediction", "confidence", "verdict"))}
</tr></thead>
<tbody>{''.join(rows)}</tbody></table>
<p style="color:#64748b;font-size:0.9em">Slot 0 is the exact next token (what one-token decoding would pick).
Slot j reads the logits of mask j and is accepted left to right while its confidence ≥ τ. The masks'
keys/values are dropped from the cache; the accepted tokens are fed as real tokens at the start of the next
forward.</p>
</div>"""


def walk_move(walk: dict, delta: int) -> tuple[str, dict]:
    """Previous/next: show another forward of the walkthrough."""
    steps = walk.get("steps", [])
    walk = {"steps": steps, "index": min(max(walk.get("index", 0) + int(delta), 0), max(len(steps) - 1, 0))}
    return step_html(walk), walk


# ----------------------------------------------------------------------------- Threshold explorer


def parse_thresholds(text: str) -> list[float]:
    """Thresholds typed as "1, 0.9, 0.8"; a ValueError says what is wrong."""
    parts = [p for p in str(text or "").replace(",", " ").split() if p]
    if not parts:
        raise ValueError("Type at least one threshold, e.g. 1, 0.9, 0.8.")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise ValueError(f"Thresholds must be numbers separated by commas, got {text!r}.") from None
    bad = [v for v in values if not 0.0 < v <= 1.0]
    if bad:
        raise ValueError(f"Thresholds must be in (0, 1], got {bad}.")
    return values


def pareto_figure(rows: list[dict]) -> go.Figure:
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
    layout = _layout("Tokens per forward against quality (agreement with τ = 1)", "tokens per forward", "quality")
    layout["yaxis"]["range"] = [min(ys) - 0.05, 1.08]
    fig.update_layout(**{**layout, "height": 380})
    return fig


def run_sweep(
    thresholds: str, block_size: int, max_new_tokens: int, categories: list[str], limit: int = 18,
    progress: Any = gr.Progress(),
) -> tuple[Any, pd.DataFrame | None, str | None, str]:
    """Sweep the thresholds over the first `limit` prompts of the chosen categories: chart, table, CSV, status."""
    try:
        values = parse_thresholds(thresholds)
        _, _, block, _, new = check_inputs("sweep", 1.0, block_size, 0.0, max_new_tokens, cap=SWEEP_MAX_NEW_TOKENS)
        prompts = prompts_in(list(categories or []), limit=_integer(limit, "number of prompts"))
        if not prompts:
            raise ValueError("Pick at least one prompt category.")
        model, tok = get_model(CONFIG.model)
        with TRACKER:
            rows = threshold_sweep(model, tok, prompts, values, block_size=block, max_new_tokens=new,
                                   progress=progress)
    except ValueError as err:
        return None, None, None, warn(str(err))
    except Exception as err:
        log.exception("sweep failed")
        return None, None, None, warn(f"Sweep failed: {type(err).__name__}: {err}")
    path = os.path.join(tempfile.mkdtemp(prefix="mars_sweep_"), "threshold_sweep.csv")
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(SWEEP_COLUMNS))
        writer.writeheader()
        writer.writerows(rows)
    table = pd.DataFrame(rows, columns=list(SWEEP_COLUMNS)).round(3)
    status = f"Swept {len(rows)} thresholds over {len(prompts)} prompts (B = {block}, up to {new} new tokens)."
    return pareto_figure(rows), table, path, status


# ----------------------------------------------------------------------------- layout


def default_model_note(report: str = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets",
                                                   "eval_smollm2_mars_b4.json")) -> str:
    """One line on the embedded model, with its held-out tokens per forward at τ = 0.9 read from the shipped eval."""
    try:
        with open(report) as f:
            rows = {(r["threshold"], r["category"]): r for r in json.load(f)["rows"]}
        tpf = {c: rows[(0.9, c)]["tokens_per_forward"] for c in ("all", "predictable")}
    except (OSError, KeyError, ValueError):
        return ""
    return (f" The embedded default is SmolLM2-135M with a MARS LoRA fine-tune (B = 4): at τ = 0.9 it commits "
            f"{tpf['all']:.2f} tokens per forward on held-out prompts ({tpf['predictable']:.2f} on predictable ones "
            "such as lists and tables), more at lower τ.")


def intro_markdown() -> str:
    """The header: what the app shows and which models it serves."""
    ar = model_label(CONFIG.ar_model) if CONFIG.ar_model else "the same checkpoint, one token per forward"
    note = default_model_note() if not CONFIG.model else ""
    return (
        "# MARS Studio\n"
        "MARS lets an ordinary causal LM commit several tokens per forward: each forward reads the last real "
        "token plus B−1 mask tokens and keeps the predictions whose confidence reaches the threshold τ "
        "(τ = 1 is exactly one-token decoding).  \n"
        f"MARS model: {model_label(CONFIG.model)} · AR baseline: {ar}.{note}"
    )


def build_ui() -> gr.Blocks:
    """The whole app: Race, Walkthrough and Threshold explorer tabs, with a concurrency-limited queue."""
    with gr.Blocks(title="MARS Studio") as demo:
        gr.Markdown(intro_markdown())
        session = gr.State(new_session())
        with gr.Tab("Race"):
            with gr.Row(equal_height=True):
                prompt = gr.Textbox(label="Prompt", lines=2, scale=5, placeholder="Ask something…",
                                    max_length=MAX_PROMPT_CHARS, elem_id="race-prompt")
                with gr.Column(scale=1, min_width=140):
                    run_button = gr.Button("Run", variant="primary", elem_id="race-run")
                    stop_button = gr.Button("Stop", variant="stop", elem_id="race-stop")
            gr.Examples(EXAMPLES, inputs=prompt, label="Examples")
            with gr.Row():
                threshold = gr.Slider(0.05, 1.0, value=0.9, step=0.01, label="Threshold τ",
                                      info="applies from the next forward, even mid-run", elem_id="race-threshold")
                block = gr.Slider(1, MAX_BLOCK_SIZE, value=4, step=1, label="Block size B",
                                  info="most tokens per forward")
                temperature = gr.Slider(0.0, MAX_TEMPERATURE, value=0.0, step=0.05, label="Temperature",
                                        info="0 = greedy")
                max_new = gr.Slider(8, MAX_NEW_TOKENS, value=128, step=8, label="Max new tokens",
                                    elem_id="race-max-new")
                adapt = gr.Checkbox(value=False, label="Adapt to load",
                                    info="τ drops 0.05 per extra concurrent run, down to 0.5")
            gr.HTML(legend_html())
            with gr.Row():
                with gr.Column():
                    gr.Markdown("**AR** · one token per forward")
                    ar_pane = gr.HTML(pane_html(None), label="AR text", elem_id="ar-pane", **PANE)
                with gr.Column():
                    gr.Markdown("**MARS** · up to B tokens per forward")
                    mars_pane = gr.HTML(pane_html(None), label="MARS text", elem_id="mars-pane", **PANE)
            stats = gr.Markdown("Press **Run**: both panes stream at the same time.", label="stats",
                                elem_id="race-stats")
            with gr.Row():
                forwards_plot = gr.Plot(label="tokens per forward", show_label=False, elem_id="forwards-plot")
                time_plot = gr.Plot(label="tokens against time", show_label=False, elem_id="time-plot")
            gr.Markdown(
                "<small>Both runs share this machine's CPU: the app advances them in turn, one forward each, and "
                "times each run by its own forwards only, so neither is charged for the other's work.</small>"
            )
            with gr.Accordion("Per-forward data (JSON)", open=False):
                data = gr.JSON(label="trace", show_label=False)
        with gr.Tab("Walkthrough"):
            gr.Markdown("### Training: one forward over [noisy | clean]")
            with gr.Row():
                mask_n = gr.Slider(2, 16, value=8, step=1, label="Response tokens n")
                mask_b = gr.Slider(1, 8, value=4, step=1, label="Block size B")
            mask_plot = gr.Plot(mask_figure(8, 4), label="attention mask", show_label=False)
            gr.Markdown(LOSS_MARKDOWN, latex_delimiters=[
                {"left": "$$", "right": "$$", "display": True}, {"left": "$", "right": "$", "display": False}])
            gr.Markdown("### Decoding, one forward at a time")
            with gr.Row(equal_height=True):
                walk_prompt = gr.Textbox(EXAMPLES[0], label="Prompt", scale=3, max_length=MAX_PROMPT_CHARS)
                walk_tau = gr.Slider(0.05, 1.0, value=0.9, step=0.01, label="Threshold τ")
                walk_block = gr.Slider(1, 8, value=4, step=1, label="Block size B")
                walk_new = gr.Slider(4, WALK_MAX_NEW_TOKENS, value=24, step=1, label="Max new tokens")
            with gr.Row():
                decode_button = gr.Button("Decode", variant="primary")
                prev_button = gr.Button("◀ Previous forward")
                next_button = gr.Button("Next forward ▶")
            walk = gr.State({"steps": [], "index": 0})
            walk_view = gr.HTML(step_html({"steps": [], "index": 0}), label="forward")
        with gr.Tab("Threshold explorer"):
            gr.Markdown(
                "Decode the held-out prompts (never trained on; the built-in set when the data is absent) at "
                "several thresholds, greedy, one prompt at a time. Quality is agreement with the τ = 1 answer: "
                "the shared-prefix fraction of tokens (1 = the same answer)."
            )
            with gr.Row():
                sweep_taus = gr.Textbox(", ".join(f"{t:g}" for t in DEFAULT_THRESHOLDS), label="Thresholds")
                sweep_block = gr.Slider(1, MAX_BLOCK_SIZE, value=4, step=1, label="Block size B")
                sweep_new = gr.Slider(8, SWEEP_MAX_NEW_TOKENS, value=48, step=8, label="Max new tokens")
            cats, pool = prompt_categories(), len(prompt_set())
            with gr.Row():
                sweep_cats = gr.CheckboxGroup(cats, value=cats, label="Prompt categories", scale=3)
                sweep_limit = gr.Slider(1, pool, value=min(18, pool), step=1, scale=1,
                                        label="Prompts (taken round-robin over the categories)")
            sweep_button = gr.Button("Run sweep", variant="primary")
            sweep_status = gr.Markdown(label="status")
            pareto = gr.Plot(label="pareto", show_label=False)
            table = gr.Dataframe(pd.DataFrame(columns=list(SWEEP_COLUMNS)), label="Results", interactive=False)
            csv_file = gr.File(label="CSV")

        outputs = [ar_pane, mars_pane, forwards_plot, time_plot, stats, data]
        run_event = run_button.click(
            gpu(race), [prompt, threshold, block, temperature, max_new, adapt, session], outputs,
            api_name="race", show_progress="minimal",
        )
        quick = dict(concurrency_limit=None, show_progress="hidden", queue=True)
        stop_button.click(stop, session, None, cancels=[run_event], api_name="stop", **quick)
        threshold.change(set_threshold, [threshold, session], None, api_name="set_threshold", **quick)
        adapt.change(set_adapt, [adapt, session], None, api_name="set_adapt", **quick)
        gr.on([mask_n.change, mask_b.change], mask_figure, [mask_n, mask_b], mask_plot, api_name="mask",
              show_progress="hidden")
        decode_button.click(gpu(walk_decode), [walk_prompt, walk_tau, walk_block, walk_new], [walk_view, walk],
                            api_name="walkthrough")
        prev_button.click(lambda w: walk_move(w, -1), walk, [walk_view, walk], api_visibility="undocumented", **quick)
        next_button.click(lambda w: walk_move(w, 1), walk, [walk_view, walk], api_visibility="undocumented", **quick)
        sweep_button.click(gpu(run_sweep), [sweep_taus, sweep_block, sweep_new, sweep_cats, sweep_limit],
                           [pareto, table, csv_file, sweep_status], api_name="sweep", show_progress_on=pareto)
    demo.queue(default_concurrency_limit=CONFIG.concurrency, max_size=64)
    return demo


def preload() -> None:
    """Load the served models in the background so the first Run does not wait (failures show on Run)."""
    for name in {CONFIG.model, CONFIG.ar_model or CONFIG.model}:
        try:
            get_model(name)
        except ValueError as err:
            log.warning("%s", err)


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and serve the app."""
    parser = argparse.ArgumentParser(description="MARS Studio: race MARS against one-token decoding.")
    parser.add_argument("--model", default=os.environ.get("MARS_MODEL"),
                        help="MARS checkpoint: local folder, .gguf file or hub id (default: the embedded model)")
    parser.add_argument("--ar-model", default=os.environ.get("MARS_AR_MODEL"),
                        help="separate AR baseline (default: the MARS checkpoint decoding one token per forward)")
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    parser.add_argument("--concurrency", type=int, default=int(os.environ.get("MARS_CONCURRENCY", "4")),
                        help="generations served at once (the queue holds the rest)")
    parser.add_argument("--no-preload", action="store_true", help="load the models on the first request only")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    for name in (args.model, args.ar_model):
        try:
            check_model_choice(name)
        except ValueError as err:
            parser.error(str(err))
    if args.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    global CONFIG
    CONFIG = AppConfig(model=args.model or None, ar_model=args.ar_model or None, concurrency=args.concurrency)
    if not args.no_preload:
        threading.Thread(target=preload, name="preload", daemon=True).start()
    build_ui().launch(server_name=args.host, server_port=args.port, theme=THEME, css=CSS)


if __name__ == "__main__":
    main()
