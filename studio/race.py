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
from .inputs import INPUTS, MAX_PROMPT_CHARS, check, check_inputs, slider, typed_js, warn
from .lanes import QUICK, Lane, Throttle, Turns, count_class, guarded

LANES = ("ar", "mars", "verified")
LANE_NAMES = {"ar": "AR", "mars": "MARS τ", "verified": "MARS verified"}
LANE_COLOURS = {"ar": AR_COLOUR, "mars": MARS_COLOUR, "verified": VERIFIED_COLOUR}
# (prompt, what it shows): the first, a held-out prompt, is what the page opens on (its recorded race): the embedded
# model there is typical of held-out prompts (tokens per forward near its held-out means, the same answer in every
# lane); the last is the case where threshold mode goes wrong, labelled so: it teaches what τ trades away
EXAMPLES = [
    ("Put this in a table with columns Fruit and Price: lemon costs $8, peach costs $6, mango costs $4.",
     "typical: a table (the race the page opens on)"),
    ("Name 7 countries, as a numbered list.", "a list: MARS gains much"),
    ("What is 26 + 40? Show your work step by step.", "step by step: long, MARS τ departs late"),
    ("Explain in two sentences what a volcano is.", "open explanation: MARS τ gains little"),
    ("List the numbers from 1 to 15, separated by commas.",
     "where threshold mode goes wrong: a confident mask-slot guess changes the answer at its 2nd token"),
]
DEFAULT_PROMPT = EXAMPLES[0][0]
# The race's sliders (inputs.INPUTS): field -> (minimum, maximum, step, default)
SLIDERS = {name: (i.low, i.high, i.step, i.value) for name, i in (
    ("threshold", INPUTS["race-threshold"]), ("block size", INPUTS["race-block"]),
    ("temperature", INPUTS["race-temperature"]), ("max new tokens", INPUTS["race-max-new"]))}
RECENT_SECONDS = 2.0  # a /set_threshold this close before a race starts was sent with it (clients send concurrently)
BODY_HEIGHT = 230  # px: every lane's text box the same height; it scrolls (to the end, or to a departure: page_js)
EXAMPLE_FILE = Path(__file__).resolve().parents[1] / "assets" / "race_example.json"  # python app.py --record-example


def new_session() -> dict:
    """Per-session race state: the slider's threshold (and when it was last set), the adapt switch, the controls."""
    return {"threshold": 0.9, "threshold_at": -math.inf, "adapt": False, "ar": None, "mars": None, "verified": None}


def threshold_in_force(session: dict) -> float:
    """The session's threshold, lowered by the serving policy when "adapt to load" is on."""
    base = session["threshold"]
    return adaptive_threshold(base, models.TRACKER.active) if session["adapt"] else base


def set_threshold(threshold: float | None, session: dict) -> str:
    """Slider change (or /set_threshold): the running MARS generation uses it from its next forward; sent with a
    race or after it, the newest value wins. Returns the race's message line: a value out of range gets its one
    message there (no toast, no traceback, nothing else touched), a good one clears it; None (the page's word for a
    value still being typed, see typed_js) changes nothing and says nothing."""
    if threshold is None:
        return gr.skip()
    try:
        tau = check("race-threshold", threshold)
    except ValueError as err:
        return warn(str(err))
    session["threshold"], session["threshold_at"] = tau, time.monotonic()
    if session.get("mars") is not None:
        session["mars"].threshold = threshold_in_force(session)
    return ""


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


def verified_guarantee(exact: bool) -> str:
    """What the verified lane promises, said in one place (its title, the page's words): identical to one-token
    decoding where the served model's runtime passed its width check on this machine (mars_core.prepare: a row's
    numbers do not depend on how many rows share its forward), else identical up to rounding."""
    return "identical to one-token decoding" if exact else "identical up to rounding"


def lane_title(key: str, exact: bool = False) -> str:
    """A lane's title: its name and what it does (the verified lane: what it promises, verified_guarantee)."""
    what = {"ar": "one token per forward", "mars": "keeps mask predictions while confidence ≥ τ",
            "verified": f"drafts checked by the model: {verified_guarantee(exact)}"}[key]
    return f"<b>{LANE_NAMES[key]}</b><small>{html.escape(what)}</small>"


def drafts_account(run: Run) -> dict:
    """The verified lane's drafts, counted so they add up: fed = compared + not compared (a forward stops comparing
    at its first mismatch, or at the end of the text), compared = matched + the first mismatches."""
    compared = sum(min(k, m + 1) for k, m in run.checks)
    return {"fed": run.drafted, "compared": compared, "matched": run.matched,
            "missed": compared - run.matched, "unread": run.drafted - compared}


def tau_changes(run: Run) -> list[tuple[int, float, float]]:
    """(forward, τ before, τ from then on) for each forward whose threshold differs from the forward before it."""
    t = run.thresholds
    return [(k, t[k - 1], t[k]) for k in range(1, len(t)) if t[k] != t[k - 1]]


def counters_html(run: Run | None) -> str:
    """A lane's big counters: tokens, forwards, tokens per forward (bold: counts) and tokens/s (a measurement)."""
    s = run.summary() if run and run.counts else None
    cells = (("tokens", s["tokens"] if s else "–"), ("forwards", s["forwards"] if s else "–"),
             ("tokens per forward", f"{s['tokens_per_forward']:.2f}" if s else "–"),
             ("tokens/s", f"{s['tokens_per_second']:.1f}" if s else "–"))
    return '<div class="mars-counters">' + "".join(
        f"<div><b>{value}</b><span>{label}</span></div>" for label, value in cells) + "</div>"


def lane_note(key: str, run: Run | None, depart: int | None, tau: float | None, token: str = "") -> str:
    """The line under a lane's counters: where a MARS answer departs from AR's (the token, in red), the τ in force on
    the MARS τ lane and each change of it, the verified lane's drafts (counted so they add up)."""
    parts = []
    if depart is not None and run is not None:
        token = f" “{html.escape(token)}”" if token else ""
        parts.append(f'<span style="color:#dc2626">departs from AR\'s answer at token {depart + 1}{token}</span>')
    if key == "mars" and tau is not None:
        changes = tau_changes(run) if run else []
        parts.append(f"τ in force {tau:.2f}" + "".join(
            f" · τ {old:.2f} → {new:.2f} from forward {k + 1}" for k, old, new in changes))
    if key == "verified" and run is not None and run.drafted:
        d = drafts_account(run)
        parts.append(f"{d['fed']} drafts fed: {d['matched']} matched, {d['missed']} mismatched"
                     + (f", {d['unread']} not compared (after a mismatch)" if d["unread"] else ""))
    if key == "ar":
        parts.append("the reference: greedy, one token per forward")
    return f'<div class="mars-note">{" · ".join(parts) or "&nbsp;"}</div>'


def pane_html(run: Run | None, status: str = "", depart: int | None = None, key: str | None = None,
              exact: bool = False, tau: float | None = None) -> str:
    """A lane: its title and big counters (with `key`), a note (departure, τ, drafts), then its text, each forward's
    tokens on a background coloured by how many it committed; token `depart` (the first that differs from AR's)
    outlined in red; on the MARS τ lane a chip where τ changed."""
    spans, index, dep_text = [], 0, ""
    changed = {k: new for k, _, new in tau_changes(run)} if run and key == "mars" else {}
    by_forward = len(run.chunks) == len(run.thresholds) if run else False  # MARS τ: every forward commits
    for n_chunk, (forward, pieces, conf, note) in enumerate(run.chunks if run else []):
        if by_forward and n_chunk in changed:
            spans.append(f'<span class="tau-mark" title="τ changed here: forward {n_chunk + 1} on used τ = '
                         f'{changed[n_chunk]:.2f}">τ→{changed[n_chunk]:.2f}</span>')
        n = len(conf)
        for k, piece in enumerate(pieces):
            c = conf[k] if len(pieces) == n else min(conf)
            tip = f"forward {forward} · {n} token{'s' * (n > 1)} · confidence {c:.2f}{note}"
            span = index if len(pieces) == n else None  # a merged multi-byte piece spans several tokens
            first = depart is not None and (span == depart or (span is None and index <= depart < index + n))
            if first:
                tip = f"first token where this answer departs from AR's · {tip}"
                dep_text = piece
            classes = ["tk", count_class(n), "fs" * (k == 0), "ls" * (k == len(pieces) - 1), "dep" * first,
                       "low" * (c < 0.5)]
            spans.append(f'<span class="{" ".join(c for c in classes if c)}" title="{html.escape(tip)}">'
                         f"{html.escape(piece)}</span>")
            index += 1 if len(pieces) == n else n
    body = "".join(spans) or '<span style="color:#94a3b8">(the text streams here)</span>'
    foot = f'<div style="margin-top:8px;color:#64748b;font-size:0.85em">{html.escape(status)}</div>' if status else ""
    head = (f'<div class="mars-title">{lane_title(key, exact)}</div>{counters_html(run)}'
            f"{lane_note(key, run, depart, tau, dep_text)}" if key else "")
    return (
        f'<div class="mars-lane">{head}<div class="mars-pane mars-body" style="white-space:pre-wrap;line-height:2;'
        f"font-size:15px;height:{BODY_HEIGHT}px;overflow-y:auto;position:relative;padding:8px 12px;"
        'border:1px solid #e2e8f0;border-radius:8px;background:#fff;color:#0f172a">'
        f"{body}{foot}</div></div>"
    )


LANE_CSS = (  # the lanes' title, counters and note (the token styles are lanes.PANE_CSS)
    ".mars-title{margin:0 0 4px;line-height:1.3}.mars-title b{display:block;font-size:16px}"
    ".mars-title small{display:block;font-size:12.5px;color:#475569;min-height:34px;line-height:17px}"
    ".mars-counters{display:flex;gap:6px;margin-bottom:4px}"
    ".mars-counters div{flex:1;text-align:center;background:#f1f5f9;border-radius:6px;padding:2px 0;min-width:0}"
    ".mars-counters b{display:block;font-size:24px;line-height:1.2;color:#0f172a}"
    ".mars-counters span{display:block;font-size:11px;color:#64748b;line-height:1.2}"
    ".mars-note{font-size:12px;color:#475569;min-height:34px;margin-bottom:4px;line-height:17px}"
    ".tau-mark{background:#f59e0b;color:#fff;font-size:11px;border-radius:3px;padding:0 3px;margin:0 2px}"
    "#race-message p{color:#b91c1c;margin:0}"
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


def headline(key: str, run: Run, ar: Run, depart: int | None, done: bool, exact: bool = False,
             tau: str = "") -> str:
    """What is deterministic about a MARS lane: forwards, tokens per forward, and how its answer compares to AR's
    (`tau`: the MARS τ lane's threshold in force, as said after its name)."""
    s, a = run.summary(), ar.summary()
    fewer = a["forwards"] / s["forwards"] if s["forwards"] and done else None
    facts = f"{s['forwards']} forwards for {s['tokens']} tokens · **{s['tokens_per_forward']:.2f} tokens/forward**"
    if depart is not None:
        verdict = f"departs from AR's answer at token {depart + 1}"
        if key == "verified" and not exact:
            verdict += " (rounding: on this machine a wide forward rounds differently from a one-token one)"
        elif key == "verified":
            verdict += " (this machine passed the width check, so this is a bug: please report it)"
    elif done:
        verdict = f"**same answer as AR, {fewer:.2f}× fewer forwards**" if fewer else "same answer as AR"
    else:
        verdict = f"same as AR so far ({min(len(ar.ids), len(run.ids))} tokens)"
    extra = ""
    if key == "verified" and run.drafted:
        d = drafts_account(run)
        looked = f"{run.looked_up} forward{'' if run.looked_up == 1 else 's'} drafted by prompt lookup"
        unread = (f"; {d['unread']} not compared: a forward stops comparing at its first mismatch" if d["unread"]
                  else "")
        extra = (f" · {d['fed']} drafts fed, {d['compared']} compared, {d['matched']} matched ({looked}{unread})")
    return f"**{LANE_NAMES[key]}**{tau} {facts} · {verdict}{extra}"


def stats_markdown(runs: dict[str, Run], session: dict, block_size: int, status: str, done: bool,
                   exact: bool = False) -> str:
    """The stats block: each MARS lane's facts against AR, then wall-clock, labelled as a measurement."""
    ar = runs["ar"]
    tau = runs["mars"].thresholds[-1] if runs["mars"].thresholds else threshold_in_force(session)
    load_note = (f" (adapting to load: {models.TRACKER.active} generation(s) running, base τ "
                 f"{session['threshold']:.2f})" if session["adapt"] else "")
    lines = [f"**AR** {len(ar.counts)} forwards for {sum(ar.counts)} tokens (one per forward) · B = {block_size} · "
             f"{status}"]
    for key in ("mars", "verified"):
        said = f" (τ in force {tau:.2f}{load_note})" if key == "mars" else ""
        lines.append(headline(key, runs[key], ar, departure(ar.ids, runs[key].ids, done), done, exact, said))
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
          exact: bool = False, charts: bool = True, message: str = "") -> tuple:
    """One update of every output: the three lanes, the three charts (or gr.skip(): left as they are), stats, the
    message line (cleared) and the trace."""
    ar = runs["ar"]
    mars = runs["mars"]
    tau = mars.thresholds[-1] if mars.thresholds else threshold_in_force(session)
    panes = []
    for key in LANES:
        run = runs[key]
        depart = departure(ar.ids, run.ids, done) if key != "ar" else None
        panes.append(pane_html(run, f"{status} · {sum(run.counts)} tokens in {len(run.counts)} forwards", depart, key,
                               exact, tau if key == "mars" else None))
    figures = ((plotly_data(forwards_figure(runs, block_size)), plotly_data(time_figure(runs)),
                plotly_data(acceptance_figure(runs["verified"]))) if charts else (gr.skip(),) * 3)
    return (*panes, *figures, stats_markdown(runs, session, block_size, status, done, exact), message,
            trace(runs, status))


def placeholder(status: str, message: str = "", exact: bool = False) -> tuple:
    """Outputs before anything was generated (the page's first content without a recording): empty lanes, the
    charts as empty axes, the message in the stats line."""
    note = message or status
    return (*(pane_html(None, note, key=key, exact=exact) for key in LANES),
            plotly_data(forwards_figure({}, 4)), plotly_data(time_figure({})), plotly_data(acceptance_figure(None)),
            note, "", trace({}, status, message))


def notice(status: str, message: str) -> tuple:
    """A message on the race's message line (waiting for a slot, preparing the model, a value refused, a failure),
    everything else left as it is: one message, nothing wiped; the trace says it too (for API clients)."""
    return (*(gr.skip(),) * 7, message, trace({}, status, message))


def failure(message: str) -> tuple:
    """One message, next to the controls, instead of a run (nothing runs, nothing on screen is wiped)."""
    return notice("error", warn(message))


def race(
    prompt: str, threshold: float, block_size: int, temperature: float, max_new_tokens: int, adapt: bool,
    session: dict,
) -> Iterator[tuple]:
    """Stream AR, MARS at τ and MARS verified side by side, one forward each in turn; yields every output."""
    try:
        prompt, tau, block, temp, new = check_inputs(prompt, threshold, block_size, temperature, max_new_tokens)
    except ValueError as err:
        yield failure(str(err))
        return
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
            lambda: notice("waiting", models.WAITING), lambda: controls["ar"].stopped,
            lambda: notice("stopped", "Stopped before the race began."))
    finally:
        if session.get("ar") is controls["ar"]:
            session.update(ar=None, mars=None, verified=None)


def _race(prompt: str, block: int, new: int, controls: dict, session: dict,
          keep: dict | None = None) -> Iterator[tuple]:
    """The race itself, inside a generation slot (`keep` receives the lanes, for recording). A ValueError is a
    message (mars_core's checks: prompt too long for the context, no mask token, …; a model that did not load)."""
    config = models.CONFIG
    for said in models.preparing(models.served(), lambda: controls["ar"].stopped):
        yield notice("preparing", said)
    if controls["ar"].stopped:
        yield notice("stopped", "Stopped before the race began.")
        return
    model, tokenizer = models.get_model(config.model)
    runtime = models.get_runtime(config.model)
    ar_model, ar_tokenizer = models.get_model(config.ar_model) if config.ar_model else (model, tokenizer)
    ar_runtime = models.get_runtime(config.ar_model) if config.ar_model else runtime
    runs = {
        "ar": Run("AR", stream(ar_model, ar_tokenizer, prompt, strategy="ar", max_new_tokens=new,
                               control=controls["ar"], runtime=ar_runtime), ar_tokenizer),
        "mars": Run("MARS τ", stream(model, tokenizer, prompt, strategy="sliding", block_size=block,
                                     max_new_tokens=new, control=controls["mars"], runtime=runtime), tokenizer),
        "verified": Run("MARS verified", stream(model, tokenizer, prompt, strategy="verified", block_size=block,
                                                max_new_tokens=new, control=controls["verified"], runtime=runtime),
                        tokenizer),
    }
    dtype, exact = str(model.dtype).removeprefix("torch."), runtime.invariant and not config.ar_model
    if keep is not None:
        keep.update(runs, dtype=dtype, exact=exact)
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
                yield frame(runs, session, block, status, finished and not stopped, exact, throttle.charts)
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
              "model": models.model_label(models.CONFIG.model), "dtype": keep["dtype"], "exact": keep["exact"],
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
    return frame(runs, session, record["block_size"], status, True, record.get("exact", False))


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


def build(demo: gr.Blocks) -> list[gr.Button]:
    """The Race tab, the race first: prompt, τ and Run/Stop, the message line, the three lanes with their counters,
    then the stats, examples, the other settings (folded), the charts and the trace; the page opens on the recorded
    race. Returns the buttons that run the model (enabled once it is ready)."""
    session = gr.State(new_session())
    with gr.Tab("Race"):
        with gr.Row(equal_height=True):
            with gr.Column(scale=4, min_width=300):  # columns, not one form: on a phone they wrap, one per line
                prompt = gr.Textbox(DEFAULT_PROMPT, label="Prompt", lines=2, placeholder="Ask something…",
                                    max_length=MAX_PROMPT_CHARS, elem_id="race-prompt")
            with gr.Column(scale=2, min_width=180):
                threshold = slider("race-threshold")
            run_button, stop_button = lanes.run_and_stop("race", "Run")
        message = gr.Markdown("", elem_id="race-message")
        with gr.Accordion("Settings: block size, temperature, max new tokens, adapt to load", open=False,
                          elem_id="race-settings"):
            with gr.Row():
                block, temperature, max_new = (slider(f"race-{name}") for name in ("block", "temperature", "max-new"))
                adapt = gr.Checkbox(value=False, label="Adapt to load",
                                    info="τ drops 0.05 per extra concurrent run, down to 0.5")
        panes = []
        with gr.Row(elem_id="race-lanes"):
            for key in LANES:
                with gr.Column(min_width=280):
                    panes.append(gr.HTML(pane_html(None, key=key), label=f"{key} text", elem_id=f"{key}-pane",
                                         padding=False))
        gr.HTML(legend_html())
        stats = gr.Markdown("Press **Run**: the three lanes stream at the same time.", label="stats",
                            elem_id="race-stats")
        gr.Examples([[p] for p, _ in EXAMPLES], inputs=prompt, label="Examples (each finishes in under a minute)",
                    example_labels=[f"{label} · {p}" for p, label in EXAMPLES], examples_per_page=len(EXAMPLES))
        with gr.Row():
            forwards_plot = gr.Plot(plotly_data(forwards_figure({}, 4)), label="tokens per forward", show_label=False,
                                    elem_id="forwards-plot")
            time_plot = gr.Plot(plotly_data(time_figure({})), label="tokens against time", show_label=False,
                                elem_id="time-plot")
        acceptance_plot = acceptance_chart()
        with gr.Accordion("How the race is run and timed", open=False):
            gr.Markdown(
                "The lanes share this machine's CPU: the app advances them in turn, one forward each, a "
                "different lane first each round, and times each by its own forwards only, so none is charged for "
                "another's work; the forward right after each update of this page is charged its lane's typical "
                "forward instead, since drawing the page (in a browser on the same machine) slows whatever runs "
                "then. MARS verified checks the mask slots' drafts (and, where the text repeats itself, "
                "prompt-lookup drafts) with the model's own next-token predictions in the same forward that "
                "proposes the next drafts: every token is the one one-token decoding picks ("
                + verified_guarantee(True) + " where this machine's forwards passed the width check: a row's "
                "numbers do not depend on how many rows share its forward; the lane's title says which holds here), "
                "several per forward when the drafts are right.")
        data = lanes.trace_json()
    outputs = [*panes, forwards_plot, time_plot, acceptance_plot, stats, message, data]
    demo.load(example_outputs, None, outputs, api_visibility="undocumented", show_progress="hidden")
    lanes.wire(run_button, stop_button, race, stop, [prompt, threshold, block, temperature, max_new, adapt, session],
               outputs, "race", "stop")
    threshold.change(set_threshold, [threshold, session], message, api_name="set_threshold",
                     js=typed_js([threshold], False), **QUICK)
    adapt.change(set_adapt, [adapt, session], None, api_name="set_adapt", **QUICK)
    return [run_button]
