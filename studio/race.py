"""The Race tab: AR and MARS stream side by side, one forward each in turn, with live charts and a stats line."""

from __future__ import annotations

import html
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from mars_core import DecodeControl, stream
from mars_core.evaluation.metrics import agreement
from mars_core.serving import adaptive_threshold

from . import models
from .charts import AR_COLOUR, MARS_COLOUR, TAU_COLOUR, chart_layout, plotly_data
from .inputs import check_inputs, number, warn

log = logging.getLogger("mars_studio")

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
PANE = dict(min_height=320, max_height=320, autoscroll=True)  # both panes the same fixed height, following the text


def new_session() -> dict:
    """Per-session race state: the slider's threshold, the adapt switch, and the running controls."""
    return {"threshold": 0.9, "adapt": False, "mars": None, "ar": None}


def threshold_in_force(session: dict) -> float:
    """The session's threshold, lowered by the serving policy when "adapt to load" is on."""
    base = session["threshold"]
    return adaptive_threshold(base, models.TRACKER.active) if session["adapt"] else base


def set_threshold(threshold: float, session: dict) -> None:
    """Slider change: the running MARS generation uses the new threshold from its next forward."""
    try:
        tau = number(threshold, "threshold")
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
    layout = chart_layout("Tokens per forward", "forward", "tokens committed", bargap=0.15)
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
    return {"data": data, "layout": chart_layout("Tokens against time (each run's own forwards)", "seconds", "tokens")}


def stats_markdown(ar: Run, mars: Run, session: dict, block_size: int, status: str) -> str:
    """The stats line: forwards, tokens, tokens per forward, tokens/s for both, and the speedup."""
    a, m = ar.summary(), mars.summary()
    speedup = m["tokens_per_second"] / a["tokens_per_second"] if a["tokens_per_second"] > 0 else 0.0
    tau = mars.thresholds[-1] if mars.thresholds else threshold_in_force(session)
    shared = round(agreement(ar.ids, mars.ids) * max(len(ar.ids), len(mars.ids)))
    agree = f" · MARS agrees with AR on its first {shared} of {max(len(ar.ids), len(mars.ids))} tokens"
    load_note = (
        f" (adapting to load: {models.TRACKER.active} generation(s) running, base τ {session['threshold']:.2f})"
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
    config = models.CONFIG
    if not all((name or "default") in models.MODELS for name in (config.model, config.ar_model or config.model)):
        yield pane_html(None, "loading the model…"), pane_html(None, "loading the model…"), None, None, \
            "Loading the model (the first load of the default model takes about 25 s)…", trace(None, None, "loading")
    try:
        model, tokenizer = models.get_model(config.model)
        ar_model, ar_tokenizer = models.get_model(config.ar_model) if config.ar_model else (model, tokenizer)
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
        with models.TRACKER:
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
