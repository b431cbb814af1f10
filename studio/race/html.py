"""The race's words and panes: each lane's title, big counters, note and streaming text (tokens coloured by how
many their forward committed), the legend, and the stats block (what is deterministic in bold, wall-clock labelled
as a measurement)."""

from __future__ import annotations

import html

from studio import engine, lanes, models
from studio.lanes import count_class
from studio.race.state import LANE_NAMES, RaceSession, Run, departure, drafts_account, tau_changes

BODY_HEIGHT = 230  # px: every lane's text box the same height; it scrolls (to the end, or to a departure: page_js)

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


def tokens_html(run: Run | None, depart: int | None, key: str | None) -> tuple[list[str], str]:
    """A lane's text as spans, each forward's tokens on a background coloured by how many it committed, token
    `depart` outlined in red, on the MARS τ lane a chip where τ changed; and the departing token's text."""
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
    return spans, dep_text


def pane_html(run: Run | None, status: str = "", depart: int | None = None, key: str | None = None,
              exact: bool = False, tau: float | None = None) -> str:
    """A lane: its title and big counters (with `key`), a note (departure, τ, drafts), then its text (tokens_html)."""
    spans, dep_text = tokens_html(run, depart, key)
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


def verdict(key: str, run: Run, ar: Run, depart: int | None, done: bool, exact: bool) -> str:
    """How a MARS lane's answer compares to AR's: where it departs (and, on the verified lane, why that can be), the
    same answer in fewer forwards, or the same so far."""
    s, a = run.summary(), ar.summary()
    if depart is not None:
        said = f"departs from AR's answer at token {depart + 1}"
        if key == "verified" and not exact:
            said += " (rounding: on this machine a wide forward rounds differently from a one-token one)"
        elif key == "verified":
            said += " (this machine passed the width check, so this is a bug: please report it)"
        return said
    if done:
        fewer = a["forwards"] / s["forwards"] if s["forwards"] else None
        return f"**same answer as AR, {fewer:.2f}× fewer forwards**" if fewer else "same answer as AR"
    return f"same as AR so far ({min(len(ar.ids), len(run.ids))} tokens)"


def drafts_said(run: Run) -> str:
    """The verified lane's drafts in the stats: fed, compared, matched, how many forwards prompt lookup drafted."""
    d = drafts_account(run)
    looked = f"{run.looked_up} forward{'' if run.looked_up == 1 else 's'} drafted by prompt lookup"
    unread = f"; {d['unread']} not compared: a forward stops comparing at its first mismatch" if d["unread"] else ""
    return f" · {d['fed']} drafts fed, {d['compared']} compared, {d['matched']} matched ({looked}{unread})"


def headline(key: str, run: Run, ar: Run, *, done: bool, exact: bool = False, tau: str = "") -> str:
    """What is deterministic about a MARS lane: forwards, tokens per forward, and how its answer compares to AR's
    (`tau`: the MARS τ lane's threshold in force, as said after its name)."""
    s = run.summary()
    facts = f"{s['forwards']} forwards for {s['tokens']} tokens · **{s['tokens_per_forward']:.2f} tokens/forward**"
    said = verdict(key, run, ar, departure(ar.ids, run.ids, done), done, exact)
    extra = drafts_said(run) if key == "verified" and run.drafted else ""
    return f"**{LANE_NAMES[key]}**{tau} {facts} · {said}{extra}"


def stats_markdown(runs: dict[str, Run], session: RaceSession, block_size: int, status: str, done: bool,
                   exact: bool = False, *, recorded: str | None = None) -> str:
    """The stats block: each MARS lane's facts against AR, then wall-clock, labelled as a measurement: taken here
    now, or where `recorded` says (a recorded race: when, on what machine and forward)."""
    ar = runs["ar"]
    tau = runs["mars"].thresholds[-1] if runs["mars"].thresholds else session.threshold_in_force()
    load_note = (f" (adapting to load: {models.TRACKER.active} generation(s) running, base τ "
                 f"{session.threshold:.2f})" if session.adapt else "")
    lines = [f"**AR** {len(ar.counts)} forwards for {sum(ar.counts)} tokens (one per forward) · B = {block_size} · "
             f"{status}"]
    for key in ("mars", "verified"):
        said = f" (τ in force {tau:.2f}{load_note})" if key == "mars" else ""
        lines.append(headline(key, runs[key], ar, done=done, exact=exact, tau=said))
    said = f"Recorded {recorded}" if recorded is not None else f"Measured {measured_where()}"
    lines.append(f"<small>{said}, each lane timed by its own forwards: {speeds(runs)}. "
                 "A lane's tokens/s over AR's is its tokens per forward over what its forward costs against AR's "
                 f"(a wider forward costs more). {sharing(runs)}Forwards are the machine-independent count; "
                 "seconds vary with load.</small>")
    return "  \n".join(lines)


def measured_where() -> str:
    """Where a live race's lanes are timed: this machine and the engine, and (on torch) which forward serves:
    compiled, compiling, or uncompiled and why, and on which kernel."""
    on = f" on {engine.label()}" if engine.label() else ""  # the engine the lanes decode on, where not torch
    where = f"on {engine.label()}" if engine.gpu() else f"on this shared CPU{on}"
    if not engine.on_llamacpp():
        where += f" (forward {models.forward_note(models.CONFIG.model)})"
    return where


def sharing(runs: dict[str, Run]) -> str:
    """Which lanes' forwards also fed other visitors' lanes (the scheduler), and with how many: a shared forward
    costs more than one alone, so it is said ("" when none was shared)."""
    parts = [f"{LANE_NAMES[key]} {sum(n > 1 for n in run.shared)} of {len(run.shared)} (up to {max(run.shared)} "
             "lanes)" for key, run in runs.items() if run.shared and max(run.shared) > 1]
    if not parts:
        return ""
    return ("Forwards shared with other visitors' lanes (each answer is still its own, token for token): "
            + ", ".join(parts) + ". ")


def speeds(runs: dict[str, Run]) -> str:
    """Each lane's tokens/s; for a MARS lane also its tokens per forward and its mean forward against AR's (the two
    numbers its tokens/s over AR's is the ratio of)."""
    ar = runs["ar"]
    ar_forward = ar.own_seconds / len(ar.counts) if ar.counts else 0.0
    parts = []
    for key, run in runs.items():
        s = run.summary()
        part = f"{LANE_NAMES[key]} {s['tokens_per_second']:.1f} tokens/s"
        if key != "ar" and s["forwards"] and ar_forward > 0:
            part += (f" ({s['tokens_per_forward']:.2f} tokens/forward, a forward "
                     f"{s['seconds'] / s['forwards'] / ar_forward:.2f}× AR's)")
        parts.append(part)
    return " · ".join(parts)
