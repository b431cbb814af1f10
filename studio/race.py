"""The Race tab: AR, MARS at a threshold and MARS verified stream side by side, one forward each in turn.

What the race says in bold is deterministic and true of the answers on screen: forwards, tokens per forward, and
whether each MARS answer is AR's (the first token where it departs is marked). Wall-clock is a measurement on a
shared CPU and is labelled so: each lane is timed by its own forwards only, the lanes taking turns (a different
lane first each round; the forward right after a frame, slowed by the page drawing it, counts as the lane's typical
one: lanes.Turns).
"""

from __future__ import annotations

import dataclasses
import html
import itertools
import json
import math
import platform
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr

from mars_core import DecodeControl, stream
from mars_core.generate import DEFAULT_THRESHOLDS
from mars_core.serving import adaptive_threshold

from . import lanes, models
from .charts import AR_COLOUR, MARS_COLOUR, TAU_COLOUR, VERIFIED_COLOUR, chart_layout, plotly_data
from .inputs import INPUTS, MAX_PROMPT_CHARS, cap, check_field, check_inputs, slider, typed_js, warn
from .lanes import QUICK, Lane, Throttle, Turns, count_class, guarded

LANES = ("ar", "mars", "verified")
LANE_NAMES = {"ar": "AR", "mars": "MARS τ", "verified": "MARS verified"}
LANE_COLOURS = {"ar": AR_COLOUR, "mars": MARS_COLOUR, "verified": VERIFIED_COLOUR}
# (prompt, what it shows): each finishes in well under 20 s on a 2-core CPU with the embedded model
EXAMPLES = [
    ("List the numbers from 1 to 15, separated by commas.", "counting: MARS gains much"),
    ("Name 4 colours, as a numbered list.", "a list: MARS gains much"),
    ("Make a markdown table with columns Name and Age: Ana is 31, Ben is 45, Chloe is 27.",
     "a table: gains much (the small model repeats its rows)"),
    ("Write a Python function that returns the squares of a list of numbers.", "code: gains"),
    ("Explain in two sentences what a volcano is.", "open explanation: MARS gains little"),
]
DEFAULT_PROMPT = EXAMPLES[0][0]
# The race's sliders (inputs.INPUTS): field -> (minimum, maximum, step, default)
SLIDERS = {i.field: (i.low, i.high, i.step, i.value) for elem, i in INPUTS.items() if elem.startswith("race-")}
RECENT_SECONDS = 2.0  # a /set_threshold this close before a race starts was sent with it (clients send concurrently)
PANE = dict(min_height=300, max_height=300, autoscroll=True)  # every pane the same fixed height, following the text
EXAMPLE_FILE = Path(__file__).resolve().parents[1] / "assets" / "race_example.json"  # python app.py --record-example


def new_session() -> dict:
    """Per-session race state: the slider's threshold (and when it was last set), the adapt switch, the controls."""
    return {"threshold": 0.9, "threshold_at": -math.inf, "adapt": False, "ar": None, "mars": None, "verified": None}


def threshold_in_force(session: dict) -> float:
    """The session's threshold, lowered by the serving policy when "adapt to load" is on."""
    base = session["threshold"]
    return adaptive_threshold(base, models.TRACKER.active) if session["adapt"] else base


def set_threshold(threshold: float | None, session: dict) -> None:
    """Slider change (or /set_threshold): the running MARS generation uses it from its next forward; sent with a
    race or after it, the newest value wins. A value out of range is refused with one message (no traceback); None
    (the page's word for a value still being typed, see typed_js) changes nothing and says nothing."""
    if threshold is None:
        return
    try:
        tau = check_field("threshold", threshold)
    except ValueError as err:
        session["told"] = str(err)  # a Run that follows with the same value need not say it twice
        raise gr.Error(str(err), print_exception=False) from None
    session["threshold"], session["threshold_at"] = tau, time.monotonic()
    if session.get("mars") is not None:
        session["mars"].threshold = threshold_in_force(session)


def set_adapt(adapt: bool, session: dict) -> None:
    """"Adapt to load" switch: on or off for the running generation too."""
    session["adapt"] = bool(adapt)
    if session.get("mars") is not None:
        session["mars"].threshold = threshold_in_force(session)


def stop(session: dict) -> None:
    """Stop button: every lane ends before its next forward; the race then shows what it has, status "stopped"."""
    for key in LANES:
        if session.get(key) is not None:
            session[key].stop()


@dataclass
class Run(Lane):
    """One lane's generation: what each forward committed (the stream and its timing: lanes.Lane)."""

    chunks: list[tuple[int, list[str], list[float], str]] = field(default_factory=list)  # forward, pieces, conf, note
    counts: list[int] = field(default_factory=list)  # tokens committed by each forward
    thresholds: list[float] = field(default_factory=list)  # threshold each forward used
    totals: list[int] = field(default_factory=list)  # tokens committed after each forward
    ids: list[int] = field(default_factory=list)  # every committed token id
    drafted: int = 0  # verified: drafts checked
    matched: int = 0  # verified: drafts that matched (each a token committed without a forward of its own)
    looked_up: int = 0  # verified: forwards whose drafts came from prompt lookup
    checks: list[tuple[int, int]] = field(default_factory=list)  # verified: (drafts checked, matched) per forward
    text: str = ""

    def advance(self, timed: bool = True) -> None:
        """Run one forward (timing only this call, when `timed`: lanes.Turns) and record what it committed."""
        event = self.next_event(timed)
        if event is None:
            return
        ids, conf, text = event.token_ids[0], event.confidences[0], event.texts[0]
        self.counts.append(len(ids))
        self.thresholds.append(event.threshold)
        self.totals.append((self.totals[-1] if self.totals else 0) + len(ids))
        self.text += text
        self.ids += ids
        note = ""
        if event.drafts:
            drafts, matched = len(event.drafts[0]), event.matched[0]
            self.drafted, self.matched = self.drafted + drafts, self.matched + matched
            self.looked_up += event.draft_source[0] == "lookup"
            if drafts:
                note = f" · {matched} of {drafts} drafts ({event.draft_source[0]}) matched"
                self.checks.append((drafts, matched))
        if ids:
            self.chunks.append((event.forward, self.pieces(ids, text), conf, note))
        self.finished = event.done[0]

    @property
    def times(self) -> list[float]:
        """The lane's own seconds after each forward (its clock: lanes.Lane.clocked)."""
        return list(itertools.accumulate(self.clocked()))

    def summary(self) -> dict:
        """Forwards, tokens, tokens per forward and tokens per second of this run."""
        forwards, tokens = len(self.counts), sum(self.counts)
        return {
            "forwards": forwards, "tokens": tokens, "tokens_per_forward": tokens / max(forwards, 1),
            "seconds": self.busy, "tokens_per_second": self.per_second(tokens),
        }


def departure(reference: list[int], ids: list[int], both_done: bool) -> int | None:
    """Index of the first token where ids departs from reference, as far as both have gone (None: not yet)."""
    for k, (a, b) in enumerate(zip(reference, ids)):
        if a != b:
            return k
    if both_done and len(reference) != len(ids):
        return min(len(reference), len(ids))
    return None


def legend_html() -> str:
    """The colour legend shown above the panes."""
    return lanes.legend_html(
        "Tokens committed by one forward", '<span style="outline:2px solid #dc2626;padding:0 2px">outlined</span> = '
        'the first token where a MARS answer departs from AR\'s &nbsp;·&nbsp; <span style="border-bottom:2px dotted '
        '#dc2626">dotted</span> = confidence below 0.5 &nbsp;·&nbsp; hover a token for its forward and confidence')


def pane_html(run: Run | None, status: str = "", depart: int | None = None) -> str:
    """A lane's text, each forward's tokens on a background coloured by how many it committed; token `depart` (the
    first that differs from AR's) outlined in red."""
    spans, index = [], 0
    for forward, pieces, conf, note in run.chunks if run else []:
        n = len(conf)
        for k, piece in enumerate(pieces):
            c = conf[k] if len(pieces) == n else min(conf)
            tip = f"forward {forward} · {n} token{'s' * (n > 1)} · confidence {c:.2f}{note}"
            span = index if len(pieces) == n else None  # a merged multi-byte piece spans several tokens
            first = depart is not None and (span == depart or (span is None and index <= depart < index + n))
            if first:
                tip = f"first token where this answer departs from AR's · {tip}"
            classes = ["tk", count_class(n), "fs" * (k == 0), "ls" * (k == len(pieces) - 1), "dep" * first,
                       "low" * (c < 0.5)]
            spans.append(f'<span class="{" ".join(c for c in classes if c)}" title="{html.escape(tip)}">'
                         f"{html.escape(piece)}</span>")
            index += 1 if len(pieces) == n else n
    body = "".join(spans) or '<span style="color:#94a3b8">(the text streams here)</span>'
    foot = f'<div style="margin-top:8px;color:#64748b;font-size:0.85em">{html.escape(status)}</div>' if status else ""
    return (
        '<div class="mars-pane" style="white-space:pre-wrap;line-height:2;font-size:15px;min-height:280px;'
        'padding:10px 12px;border:1px solid #e2e8f0;border-radius:8px;background:#fff;color:#0f172a">'
        f"{body}{foot}</div>"
    )


def forwards_figure(runs: dict[str, Run | None], block_size: int) -> dict:
    """Tokens committed by each forward, per lane; the threshold each MARS forward used in its own panel below."""
    data = []
    for key in ("mars", "verified"):
        run = runs.get(key)
        if run:
            data.append({"type": "bar", "x": list(range(len(run.counts))), "y": run.counts, "name": LANE_NAMES[key],
                         "marker": {"color": LANE_COLOURS[key]}, "opacity": 0.85})
    if runs.get("ar"):
        ar = runs["ar"]
        data.append({"type": "scatter", "mode": "lines", "x": list(range(len(ar.counts))), "y": ar.counts,
                     "name": "AR", "line": {"color": AR_COLOUR, "width": 3}})
    if runs.get("mars"):
        mars = runs["mars"]
        data.append({"type": "scatter", "mode": "lines", "x": list(range(len(mars.thresholds))), "y": mars.thresholds,
                     "name": "τ (MARS τ lane)", "yaxis": "y2", "line": {"color": TAU_COLOUR, "shape": "hv"}})
    most = max([block_size] + [max(r.counts, default=0) for r in runs.values() if r])
    layout = chart_layout("Tokens per forward", "forward", "tokens", bargap=0.15, barmode="group")
    layout["yaxis"].update(domain=[0.34, 1.0], range=[0, most + 0.5], dtick=1 if most <= 8 else None)
    layout["yaxis2"] = {"domain": [0.0, 0.2], "range": [0, 1.05], "title": {"text": "τ"}, "anchor": "x",
                        "tickvals": [0, 0.5, 1], "gridcolor": "#eef2f7"}
    layout["xaxis"]["anchor"] = "y2"  # the forward axis under the τ panel, below both
    return {"data": data, "layout": layout}


def time_figure(runs: dict[str, Run | None]) -> dict:
    """Tokens committed against each lane's own forward time."""
    data = [
        {"type": "scatter", "mode": "lines", "x": [0.0, *run.times], "y": [0, *run.totals], "name": LANE_NAMES[key],
         "line": {"color": LANE_COLOURS[key], "width": 3}}
        for key, run in runs.items() if run
    ]
    return {"data": data, "layout": chart_layout("Tokens against time (each lane's own forwards)", "seconds",
                                                  "tokens")}


def acceptance(run: Run | None) -> dict:
    """The verified lane's acceptance, from its forwards that checked drafts: mean accepted length (drafts matched
    per such forward; tokens per forward over all its forwards) and, by draft position a, how often d_a matched
    when it was checked and every draft before it had matched: P(d_a matched | d_1 .. d_{a-1} matched)."""
    checks = run.checks if run else []
    longest = max((k for k, _ in checks), default=0)
    positions = []
    for a in range(1, longest + 1):
        tried = sum(1 for k, m in checks if k >= a and m >= a - 1)
        matched = sum(1 for _, m in checks if m >= a)
        positions.append({"position": a, "checked": tried, "matched": matched,
                          "rate": matched / tried if tried else None})
    return {"forwards_checking": len(checks), "drafts_checked": sum(k for k, _ in checks),
            "mean_accepted": sum(m for _, m in checks) / len(checks) if checks else 0.0,
            "tokens_per_forward": run.summary()["tokens_per_forward"] if run else 0.0, "positions": positions}


def acceptance_figure(run: Run | None) -> dict:
    """Acceptance rate by draft position (bars labelled matched/checked), the mean accepted length in the title."""
    acc = acceptance(run)
    rows = [p for p in acc["positions"] if p["checked"]]
    title = (f"MARS verified: mean accepted length {acc['mean_accepted']:.2f} drafts<br>per forward that checked "
             f"drafts ({acc['forwards_checking']} forwards) · {acc['tokens_per_forward']:.2f} tokens per forward"
             if acc["forwards_checking"] else "MARS verified: acceptance by draft position<br>(no drafts checked yet)")
    data = [{"type": "bar", "x": [f"d{p['position']}" for p in rows], "y": [p["rate"] for p in rows],
             "text": [f"{p['matched']}/{p['checked']}" for p in rows], "textposition": "outside",
             "marker": {"color": VERIFIED_COLOUR}, "name": "P(d_a matched | d_1..d_(a-1) matched)",
             "hovertemplate": "%{x}: %{text} matched (%{y:.0%})<extra></extra>"}]
    layout = chart_layout(title, "draft position", "acceptance rate", height=300, showlegend=False, bargap=0.35)
    layout["yaxis"].update(range=[0, 1.15], tickformat=".0%")
    layout["margin"].update(t=60, b=50)
    return {"data": data, "layout": layout}


def headline(key: str, run: Run, ar: Run, depart: int | None, done: bool, dtype: str = "bfloat16") -> str:
    """What is deterministic about a MARS lane: forwards, tokens per forward, and how its answer compares to AR's."""
    s, a = run.summary(), ar.summary()
    fewer = a["forwards"] / s["forwards"] if s["forwards"] and done else None
    facts = f"{s['forwards']} forwards for {s['tokens']} tokens · **{s['tokens_per_forward']:.2f} tokens/forward**"
    if depart is not None:
        verdict = f"departs from AR's answer at token {depart + 1}"
        if key == "verified" and dtype != "float32":
            verdict += f" ({dtype} rounding: a wide forward rounds differently from a one-token one)"
        elif key == "verified":
            verdict += " (in float32 this is a bug: please report it)"
    elif done:
        verdict = f"**same answer as AR, {fewer:.2f}× fewer forwards**" if fewer else "same answer as AR"
    else:
        verdict = f"same as AR so far ({min(len(ar.ids), len(run.ids))} tokens)"
    extra = ""
    if key == "verified" and run.drafted:
        looked = f"{run.looked_up} forward{'' if run.looked_up == 1 else 's'} drafted by prompt lookup"
        extra = f" · {run.matched} of {run.drafted} drafts matched ({looked})"
    return f"**{LANE_NAMES[key]}** {facts} · {verdict}{extra}"


def stats_markdown(runs: dict[str, Run], session: dict, block_size: int, status: str, done: bool,
                   dtype: str = "bfloat16") -> str:
    """The stats block: each MARS lane's facts against AR, then wall-clock, labelled as a measurement."""
    ar = runs["ar"]
    tau = runs["mars"].thresholds[-1] if runs["mars"].thresholds else threshold_in_force(session)
    load_note = (f" (adapting to load: {models.TRACKER.active} generation(s) running, base τ "
                 f"{session['threshold']:.2f})" if session["adapt"] else "")
    lines = [f"**AR** {len(ar.counts)} forwards for {sum(ar.counts)} tokens (one per forward) · B = {block_size} · "
             f"τ in force {tau:.2f}{load_note} · {status}"]
    for key in ("mars", "verified"):
        lines.append(headline(key, runs[key], ar, departure(ar.ids, runs[key].ids, done), done, dtype))
    lines.append(f"<small>Measured on this shared CPU, each lane timed by its own forwards: {speeds(runs)}. "
                 "A lane's tokens/s over AR's is its tokens per forward over what its forward costs against AR's "
                 "(a wider forward costs more). Forwards are the machine-independent count; seconds vary with "
                 "load.</small>")
    return "  \n".join(lines)


def speeds(runs: dict[str, Run]) -> str:
    """Each lane's tokens/s; for a MARS lane also its tokens per forward and its mean forward against AR's (the two
    numbers its tokens/s over AR's is the ratio of)."""
    ar = runs["ar"]
    ar_forward = ar.busy / len(ar.counts) if ar.counts else 0.0
    parts = []
    for key, run in runs.items():
        s = run.summary()
        part = f"{LANE_NAMES[key]} {s['tokens_per_second']:.1f} tokens/s"
        if key != "ar" and s["forwards"] and ar_forward > 0:
            part += (f" ({s['tokens_per_forward']:.2f} tokens/forward, a forward "
                     f"{s['seconds'] / s['forwards'] / ar_forward:.2f}× AR's)")
        parts.append(part)
    return " · ".join(parts)


def trace(runs: dict[str, Run | None], status: str, message: str = "") -> dict:
    """Per-forward data of every lane (the JSON output; clients and tests read it)."""

    def one(run: Run | None) -> dict:
        if run is None:
            return {}
        return {**run.summary(), "counts": run.counts, "thresholds": run.thresholds, "times": run.times,
                "timed": run.timed,
                "text": run.text, "ids": run.ids, "drafted": run.drafted, "matched": run.matched}

    out = {"status": status, "message": message, **{key: one(runs.get(key)) for key in LANES}}
    out["acceptance"] = acceptance(runs.get("verified"))
    ar = runs.get("ar")
    if ar is not None:
        done = status == "done"
        out["departs_at"] = {k: departure(ar.ids, runs[k].ids, done) for k in ("mars", "verified") if runs.get(k)}
    return out


def frame(runs: dict[str, Run | None], session: dict, block_size: int, status: str, done: bool = False,
          dtype: str = "bfloat16", charts: bool = True) -> tuple:
    """One update of every output: the three panes, the three charts (or gr.skip(): left as they are), stats,
    trace."""
    ar = runs["ar"]
    panes = []
    for key in LANES:
        run = runs[key]
        depart = departure(ar.ids, run.ids, done) if key != "ar" else None
        panes.append(pane_html(run, f"{status} · {sum(run.counts)} tokens in {len(run.counts)} forwards", depart))
    figures = ((plotly_data(forwards_figure(runs, block_size)), plotly_data(time_figure(runs)),
                plotly_data(acceptance_figure(runs["verified"]))) if charts else (gr.skip(),) * 3)
    return (*panes, *figures, stats_markdown(runs, session, block_size, status, done, dtype), trace(runs, status))


def placeholder(status: str, message: str = "") -> tuple:
    """Outputs before anything was generated (loading, waiting, or a message), the charts as empty axes."""
    note = message or status
    return (pane_html(None, note), pane_html(None, note), pane_html(None, note),
            plotly_data(forwards_figure({}, 4)), plotly_data(time_figure({})), plotly_data(acceptance_figure(None)),
            note, trace({}, status, message))


def failure(message: str, toast: bool = True) -> tuple:
    """Race outputs that show one message instead of results (nothing runs)."""
    return placeholder("error", warn(message) if toast else f"⚠ {message}")


def race(
    prompt: str, threshold: float, block_size: int, temperature: float, max_new_tokens: int, adapt: bool,
    session: dict,
) -> Iterator[tuple]:
    """Stream AR, MARS at τ and MARS verified side by side, one forward each in turn; yields every output."""
    try:
        prompt, tau, block, temp, new = check_inputs(prompt, threshold, block_size, temperature, max_new_tokens,
                                                     cap=cap("race-max-new"))
    except ValueError as err:
        yield failure(str(err), toast=session.pop("told", None) != str(err))
        return
    session.pop("told", None)
    if time.monotonic() - session.get("threshold_at", -math.inf) > RECENT_SECONDS:
        session["threshold"] = tau  # else a /set_threshold sent with this race (or after it) wins: the newest
    session["adapt"] = bool(adapt)
    controls = {"ar": DecodeControl(threshold=1.0, temperature=temp),
                "mars": DecodeControl(threshold=threshold_in_force(session), temperature=temp),
                "verified": DecodeControl(threshold=DEFAULT_THRESHOLDS["verified"], temperature=temp)}
    session.update(controls)
    try:
        yield from models.in_a_slot(
            guarded(_race(prompt, block, new, controls, session), failure, "Generation"),
            lambda: placeholder("waiting", models.WAITING), lambda: controls["ar"].stopped,
            lambda: placeholder("stopped"))
    finally:
        if session.get("ar") is controls["ar"]:
            session.update(ar=None, mars=None, verified=None)


def _race(prompt: str, block: int, new: int, controls: dict, session: dict,
          keep: dict | None = None) -> Iterator[tuple]:
    """The race itself, inside a generation slot (`keep` receives the lanes, for recording). A ValueError is a
    message (mars_core's checks: prompt too long for the context, no mask token, …; a model that did not load)."""
    config = models.CONFIG
    if not all((name or "default") in models.MODELS for name in (config.model, config.ar_model or config.model)):
        yield placeholder("loading", "Loading the model (the first load of the default model takes about 25 s)…")
    model, tokenizer = models.get_model(config.model)
    ar_model, ar_tokenizer = models.get_model(config.ar_model) if config.ar_model else (model, tokenizer)
    runs = {
        "ar": Run("AR", stream(ar_model, ar_tokenizer, prompt, strategy="ar", max_new_tokens=new,
                               control=controls["ar"]), ar_tokenizer),
        "mars": Run("MARS τ", stream(model, tokenizer, prompt, strategy="sliding", block_size=block,
                                     max_new_tokens=new, control=controls["mars"]), tokenizer),
        "verified": Run("MARS verified", stream(model, tokenizer, prompt, strategy="verified", block_size=block,
                                                max_new_tokens=new, control=controls["verified"]), tokenizer),
    }
    dtype = str(model.dtype).removeprefix("torch.")
    if keep is not None:
        keep.update(runs, dtype=dtype)
    throttle, turns = Throttle(), Turns()
    with models.TRACKER:
        while not all(r.finished for r in runs.values()):
            for key in turns.order(list(runs)):
                run = runs[key]
                if not run.finished:
                    if key == "mars":
                        controls["mars"].threshold = threshold_in_force(session)
                    run.advance(turns.timed())
            stopped = any(c.stopped for c in controls.values())
            finished = all(r.finished for r in runs.values())
            status = "stopped" if stopped else ("done" if finished else "running")
            if throttle.due(sum(len(r.ids) for r in runs.values()), finished):
                yield frame(runs, session, block, status, finished and not stopped, dtype, throttle.charts)
                turns.framed()


# ----------------------------------------------------------------------------- the recorded example


LANE_STATE = [f.name for f in dataclasses.fields(Run) if f.name not in ("name", "events", "tokenizer")]


def record_example(path: Path = EXAMPLE_FILE) -> Path:
    """Race the default prompt with the served model at the default settings and save every lane: what the page
    shows before a visitor presses Run (labelled as recorded, with when and where)."""
    session, keep = new_session(), {}
    tau, block, temperature, new = (SLIDERS[k][3] for k in ("threshold", "block size", "temperature",
                                                           "max new tokens"))
    session["threshold"] = tau
    controls = {"ar": DecodeControl(threshold=1.0), "mars": DecodeControl(threshold=tau),
                "verified": DecodeControl(threshold=DEFAULT_THRESHOLDS["verified"])}
    for _ in _race(DEFAULT_PROMPT, block, new, controls, session, keep):
        pass
    lanes = {key: {name: getattr(keep[key], name) for name in LANE_STATE} for key in LANES}
    record = {"prompt": DEFAULT_PROMPT, "threshold": tau, "block_size": block, "max_new_tokens": new,
              "model": models.model_label(models.CONFIG.model), "dtype": keep["dtype"],
              "machine": f"{platform.machine()} CPU" if keep["dtype"] else "", "recorded": time.strftime("%Y-%m-%d"),
              "lanes": lanes}
    path.write_text(json.dumps(record, ensure_ascii=False))
    return path


def recorded_lane(lane: dict) -> dict:
    """A recorded lane as Run's fields; a recording from before the clock kept each forward's seconds (it kept their
    running sum, `times`, and the total, `busy`) has them read back from that sum, every forward timed."""
    lane = {k: (v if k != "chunks" else [tuple(c) for c in v]) for k, v in lane.items()}
    if "spent" not in lane:
        times = lane.pop("times", [])
        lane.pop("busy", None)
        lane["spent"] = [b - a for a, b in zip([0.0, *times], times)]
        lane["timed"] = [True] * len(times)
    return lane


def example_outputs(path: Path = EXAMPLE_FILE) -> tuple:
    """The recorded race as the page's first content (the default model only: a recording of another model would
    not be true of the one served), else empty axes."""
    if models.CONFIG.model is not None or not path.is_file():
        return placeholder("ready", "Press Run: the three lanes stream at the same time.")
    record = json.loads(path.read_text())
    runs = {key: Run(LANE_NAMES[key], iter(()), None, **recorded_lane(lane)) for key, lane in record["lanes"].items()}
    session = {**new_session(), "threshold": record["threshold"]}
    status = (f"recorded on {record['recorded']} ({record['machine']}, {record['dtype']}): press Run to race live")
    return frame(runs, session, record["block_size"], status, True, record["dtype"])


# ----------------------------------------------------------------------------- the tab


ACCEPTANCE_NOTE = """**Acceptance, MARS verified lane.** *Mean accepted length*: drafts matched per forward that checked
drafts (each such forward also commits one token of its own, the bonus); tokens per forward counts every forward.
*Acceptance rate by draft position*: how often draft d<sub>a</sub> matched the model's own token, among the forwards
where it was checked, that is where d<sub>1</sub> … d<sub>a−1</sub> had all matched (verification stops at the first
mismatch): P(d<sub>a</sub> matched | d<sub>1</sub> … d<sub>a−1</sub> matched). Each bar says matched/checked.
Positions past B−1 come from prompt lookup, whose chains can be longer."""


def acceptance_chart() -> gr.Plot:
    """The verified lane's acceptance by draft position, under the race (updated with the other charts), beside a
    note on how to read it."""
    with gr.Row():
        plot = gr.Plot(plotly_data(acceptance_figure(None)), label="acceptance by draft position", show_label=False,
                       elem_id="acceptance-plot")
        gr.Markdown(ACCEPTANCE_NOTE, elem_id="acceptance-note")
    return plot


def build(demo: gr.Blocks) -> None:
    """The Race tab: prompt, settings, the three lanes' panes, two charts and the trace, and their events; the page
    opens on the recorded race."""
    session = gr.State(new_session())
    with gr.Tab("Race"):
        with gr.Row(equal_height=True):
            prompt = gr.Textbox(DEFAULT_PROMPT, label="Prompt", lines=2, scale=5, placeholder="Ask something…",
                                max_length=MAX_PROMPT_CHARS, elem_id="race-prompt")
            run_button, stop_button = lanes.run_and_stop("race", "Run")
        gr.Examples([[p] for p, _ in EXAMPLES], inputs=prompt, label="Examples",
                    example_labels=[f"{label} · {p}" for p, label in EXAMPLES])
        with gr.Row():
            threshold, block, temperature, max_new = (slider(f"race-{name}") for name in
                                                      ("threshold", "block", "temperature", "max-new"))
            adapt = gr.Checkbox(value=False, label="Adapt to load",
                                info="τ drops 0.05 per extra concurrent run, down to 0.5")
        gr.HTML(legend_html())
        panes = []
        with gr.Row():
            for key, title in (("ar", "**AR** · one token per forward"),
                               ("mars", "**MARS τ** · mask predictions accepted while confidence ≥ τ"),
                               ("verified", "**MARS verified** · drafts checked by the model: AR's answer")):
                with gr.Column(min_width=260):
                    gr.Markdown(title)
                    panes.append(gr.HTML(pane_html(None), label=f"{key} text", elem_id=f"{key}-pane", **PANE))
        stats = gr.Markdown("Press **Run**: the three lanes stream at the same time.", label="stats",
                            elem_id="race-stats")
        with gr.Row():
            forwards_plot = gr.Plot(plotly_data(forwards_figure({}, 4)), label="tokens per forward", show_label=False,
                                    elem_id="forwards-plot")
            time_plot = gr.Plot(plotly_data(time_figure({})), label="tokens against time", show_label=False,
                                elem_id="time-plot")
        acceptance_plot = acceptance_chart()
        gr.Markdown(
            "<small>The lanes share this machine's CPU: the app advances them in turn, one forward each, a "
            "different lane first each round, and times each by its own forwards only, so none is charged for "
            "another's work; the forward right after each update of this page is charged its lane's typical "
            "forward instead, since drawing the page (in a browser on the same machine) slows whatever runs "
            "then. MARS verified checks "
            "the mask slots' drafts (and, where the text repeats itself, prompt-lookup drafts) with the model's "
            "own next-token predictions in the same forward that proposes the next drafts: every token is the "
            "one AR picks, several per forward when the drafts are right.</small>"
        )
        data = lanes.trace_json()
    outputs = [*panes, forwards_plot, time_plot, acceptance_plot, stats, data]
    demo.load(example_outputs, None, outputs, api_visibility="undocumented", show_progress="hidden")
    lanes.wire(run_button, stop_button, race, stop, [prompt, threshold, block, temperature, max_new, adapt, session],
               outputs, "race", "stop")
    threshold.change(set_threshold, [threshold, session], None, api_name="set_threshold",
                     js=typed_js([threshold], False), **QUICK)
    adapt.change(set_adapt, [adapt, session], None, api_name="set_adapt", **QUICK)
