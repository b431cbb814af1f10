"""The Walkthrough tab's verified section: a verified decode stepped forward by forward, from the decoder's own
record of each forward (what it fed, its tree mask, how each draft fared, what the next forward checks)."""

from __future__ import annotations

import html
from collections.abc import Iterator

import gradio as gr
import plotly.graph_objects as go
import torch

from mars_core import TreeLayout, stream
from studio import models
from studio.inputs import MAX_PROMPT_CHARS, slider, typed_js, warn
from studio.lanes import QUICK
from studio.walkthrough.walk import CELL, Walk, checked_in_a_slot, token_chip

VERIFIED_PROMPT = "List the numbers from 1 to 15, separated by commas."
TREE_NAMES = ("hidden", "the cache (committed before)", "pending → pending (causal)",
              "draft → pending (its committed prefix)", "draft → earlier drafts (the chain)",
              "G<sub>j</sub> mask → pending + d<sub>1</sub>…d<sub>j</sub> (its prefix)",
              "G<sub>j</sub> mask → earlier masks of G<sub>j</sub> (causal)",
              "itself only (a slot not fed for this sample)",
              "sibling e<sub>a</sub> or H<sub>a</sub> mask → pending + d<sub>1</sub>…d<sub>a−1</sub> (its prefix)",
              "H<sub>a</sub> mask → e<sub>a</sub> and earlier masks of H<sub>a</sub> (causal)")
TREE_COLOURS = ("#f1f5f9", "#94a3b8", "#475569", "#93c5fd", "#2563eb", "#fcd34d", "#f59e0b", "#e2e8f0", "#86efac",
                "#16a34a")
SLOT_COLOURS = {"pending": "#e2e8f0", "draft": "#bfdbfe", "mask": "#fde68a", "sibling": "#bbf7d0"}


def tree_categories(pending: int, drafts: int, groups: list[int], g: int, fed: list[bool],
                    siblings: list[int] = ()) -> torch.Tensor:
    """Per pair of fed slots [query, key], which rule of the tree lets the query see the key (0 = none), from the
    rule text (MARS_METHOD.md, "Verified decoding"): pending tokens see each other causally; d_a sees the pending
    tokens and d_1..d_a; a mask of G_j sees the pending tokens, d_1..d_j and the earlier masks of its own group; the
    sibling e_a and its group H_a see the pending tokens and d_1..d_{a-1}, then e_a and H_a causally. A slot that
    is not fed for the sample is seen by none but itself."""
    branched = pending + drafts + len(groups) * g
    width = branched + len(siblings) * (1 + g)
    cats = torch.zeros(width, width, dtype=torch.long)
    for q in range(width):
        if q < pending:
            cats[q, : q + 1] = 2
        elif q < pending + drafts:
            cats[q, :pending], cats[q, pending : q + 1] = 3, 4
        elif q >= branched:
            c = (q - branched) // (1 + g)
            start = branched + c * (1 + g)
            cats[q, : pending + siblings[c] - 1], cats[q, start : q + 1] = 8, 9
        else:
            c, t = divmod(q - pending - drafts, g)
            start = pending + drafts + c * g
            cats[q, : pending + groups[c]], cats[q, start : start + t + 1] = 5, 6
    hidden = ~torch.tensor(fed, dtype=torch.bool)
    cats[:, hidden] = 0
    cats[hidden, hidden.nonzero().flatten()] = 7
    return cats


def step_categories(step: dict) -> torch.Tensor:
    """tree_categories of one forward of the walkthrough (a verified_step)."""
    return tree_categories(step["pending"], step["drafts"], step["groups"], step["g"], step["fed"], step["siblings"])


def verified_step(tok, record, before, event, context: str, g: int) -> dict:
    """One verified forward as the walkthrough shows it, from the decoder's own record of it (and the record of the
    forward before, whose choices made this tree): plain lists, nothing redrawn by hand."""
    tree, width = record.tree, record.ids.shape[1]
    P, K, groups, siblings = tree.pending.shape[1], tree.drafts.shape[1], list(tree.groups), list(tree.siblings)
    cache = int(record.cached[0])
    beside = (tree.sibling_fed[0, [a - 1 for a in siblings]].repeat_interleave(1 + g) if siblings
              else tree.fed[0, :0])
    fed = torch.cat([tree.pending_valid[0], tree.fed[0], tree.group_fed[0, groups].repeat_interleave(g), beside])
    kinds = (["pending"] * P + ["draft"] * K + ["mask"] * (len(groups) * g)
             + [k for _ in siblings for k in ["sibling"] + ["mask"] * g])
    group_of = ([(None, 0)] * (P + K) + [(f"G{j}", t + 1) for j in groups for t in range(g)]
                + [(f"H{a}", t) for a in siblings for t in range(1 + g)])
    text = [tok.decode([i]) if kind != "mask" else "[MASK]" for i, kind in zip(record.ids[0].tolist(), kinds)]
    m, threshold = int(record.m[0]), event.threshold
    by_sibling = record.by_sibling is not None and bool(record.by_sibling[0])
    mask_count = int(record.mask_kept[0])
    next_siblings = ([a + 1 for a, f in enumerate(record.sibling_fed[0].tolist()) if f]
                     if record.sibling_fed is not None else [])
    next_odds = record.sibling_odds[0]
    return {
        "forward": event.forward, "threshold": threshold, "context": context, "done": event.done[0], "g": g,
        "pending": P, "drafts": K, "groups": groups, "siblings": siblings, "by_sibling": by_sibling,
        "chosen_sibling_odds": before_sibling_odds(before), "cache": cache,
        "slots": [{"kind": k, "text": t, "position": p, "group": j, "t": n}
                  for k, t, p, (j, n) in zip(kinds, text, record.positions[0].tolist(), group_of)],
        "fed": fed.tolist(), "mask": record.seen[0].tolist(), "cache_seen": [cache] * width, "width": width,
        "source": "lookup" if bool(tree.from_lookup[0]) else "mask",
        "draft_conf": before.chain.conf[0, :K].tolist() if before is not None else [],
        "chosen_odds": before.odds[0].tolist() if before is not None else None,
        "seconds": None if record.seconds is None else record.seconds.tolist(), "floors": record.floors,
        "m": m, "predicted": [tok.decode([i]) for i in record.tokens[0].tolist()],
        "predicted_conf": record.confidence[0].tolist(), "committed": [tok.decode([i]) for i in event.token_ids[0]],
        "proposed": [tok.decode([i]) for i in record.proposed.tokens[0, :g].tolist()],
        "proposed_conf": record.proposed.conf[0, :g].tolist(),
        # G_m (H_m where the sibling e_m matched) was fed: its masks propose the next drafts
        "proposed_fed": by_sibling or (m in groups and bool(tree.group_fed[0, m])),
        "mask_run": float(record.mask_run[0]),
        "next": [tok.decode([i]) for i in record.chain.tokens[0, : int(record.chain.count[0])].tolist()],
        "next_conf": record.chain.conf[0, : int(record.chain.count[0])].tolist(),
        "next_source": "lookup" if bool(record.chain.from_lookup[0]) else "mask", "mask_count": mask_count,
        "next_run": float(record.chain_run[0]),
        "next_odds": record.odds[0].tolist(), "next_groups": [j for j, f in enumerate(record.group_fed[0]) if f],
        "next_siblings": [(a, tok.decode([int(record.chain.second[0, a - 1])]), float(next_odds[a - 1]))
                          for a in next_siblings],
    }


def before_sibling_odds(before) -> list[float]:
    """P(e_a is used) for each draft of this forward, as the forward before computed it (sibling_odds)."""
    if before is None:
        return []
    return before.sibling_odds[0].tolist()


def verified_steps(prompt: str, threshold: float, block_size: int, max_new_tokens: int
                   ) -> Iterator[tuple[str, object, Walk]]:
    """The Decode verified button: the inputs checked, then the decode in a generation slot; its one frame is the
    first forward's view, its tree mask and the walk."""
    yield from checked_in_a_slot((prompt, threshold, block_size, max_new_tokens), "walkv", decode_verified,
                                 verified_failure, lambda said: (f"<p>{said}</p>", gr.skip(), gr.skip()))


def walk_verified(prompt: str, threshold: float, block_size: int, max_new_tokens: int) -> tuple[str, object, Walk]:
    """Decode a prompt in verified mode and keep every forward's record: the last frame of verified_steps."""
    *_, last = verified_steps(prompt, threshold, block_size, max_new_tokens)
    return last


def decode_verified(prompt: str, tau: float, block: int, new: int) -> Iterator[tuple[str, object, Walk]]:
    """The verified decode itself, inside a generation slot: every forward's record (DecodeOptions.record) beside
    its event, then one frame."""
    model, tok = models.get_model(models.CONFIG.model)
    records, steps, context = [], [], ""
    with models.TRACKER:
        for event in stream(model, tok, prompt, strategy="verified", block_size=block, max_new_tokens=new,
                            threshold=tau, record=records.append, runtime=models.get_runtime(models.CONFIG.model)):
            before = records[-2] if len(records) > 1 else None
            steps.append(verified_step(tok, records[-1], before, event, context, block - 1))
            context += event.texts[0]
    walk = Walk(steps)
    yield verified_html(walk), tree_figure(walk), walk


def verified_failure(message: str) -> tuple[str, object, Walk]:
    """The verified walkthrough's outputs for a message instead of a decode."""
    return f"<p>{html.escape(warn(message))}</p>", tree_figure(Walk()), Walk()


def axis_labels(step: dict) -> list[str]:
    """Every fed slot's label: pending tokens by text, drafts d_a, siblings e_a, masks G_j·t and H_a·t."""
    labels, P = [], step["pending"]
    for i, slot in enumerate(step["slots"]):
        shown = slot["text"].replace("\n", "↵").replace(" ", "␣")[:10] or "∅"
        if slot["kind"] == "pending":
            labels.append(f"{shown} @{slot['position']}")
        elif slot["kind"] == "draft":
            labels.append(f"d{i - P + 1} {shown}")
        elif slot["kind"] == "sibling":
            labels.append(f"e{slot['group'][1:]} {shown}")
        else:
            labels.append(f"{slot['group']}·m{slot['t']}")
    return labels


MAX_TICKS = 24  # labels an axis of the tree mask shows at most: more overlap at the figure's width


def readable_ticks(labels: list[str], cache: bool, pending: int) -> list[int]:
    """Which axis labels to show so that they do not overlap at any prompt length: every slot of the tree (drafts,
    masks, siblings) and the cache column always; the pending tokens (the whole prompt at the first forward) thinned
    to every k-th, the last one kept (the token the first prediction is read at)."""
    first = 1 if cache else 0
    room = max(MAX_TICKS - (len(labels) - first - pending), 4)
    step = max(1, -(-pending // room))
    shown = [first + i for i in range(pending) if i % step == 0 or i == pending - 1]
    return [*range(first), *shown, *range(first + pending, len(labels))]


def tree_figure(walk: Walk) -> go.Figure:
    """The mask the decoder fed in the shown forward, each rule in its colour (the cache's slots as one column): the
    colours are computed from the tree's rules and equal the recorded mask cell for cell (tests/studio/test_app.py
    checks every forward)."""
    steps = walk.steps
    if not steps:
        fig = go.Figure()
        fig.update_layout(title=dict(text="Press Decode verified: the tree mask of each forward appears here",
                                     font=dict(size=14)), height=200, plot_bgcolor="#ffffff", paper_bgcolor="#ffffff",
                          xaxis=dict(visible=False), yaxis=dict(visible=False))
        return fig
    s = steps[walk.index]
    cats = step_categories(s)
    labels = axis_labels(s)
    z = cats.tolist()
    x = labels
    if s["cache"]:  # one column for the cache: every fed slot sees all of its real slots
        z = [[1 if seen == s["cache"] else 0] + row for seen, row in zip(s["cache_seen"], z)]
        x = [f"cache ({s['cache']} tokens)"] + labels
    n = len(TREE_COLOURS)
    scale = [[k / n, c] for i, c in enumerate(TREE_COLOURS) for k in (i, i + 1)]
    hover = [[f"query {labels[r]} → key {x[c]}: {TREE_NAMES[v]}" for c, v in enumerate(row)] for r, row in enumerate(z)]
    fig = go.Figure(go.Heatmap(
        z=z, x=list(range(len(x))), y=list(range(len(labels))), colorscale=scale, zmin=-0.5, zmax=n - 0.5, xgap=1,
        ygap=1, text=hover, hoverinfo="text", showscale=False))
    for v in sorted({v for row in z for v in row} - {0}):  # a legend entry per rule the picture shows
        fig.add_scatter(x=[None], y=[None], mode="markers", name=TREE_NAMES[v], showlegend=True,
                        marker=dict(size=12, symbol="square", color=TREE_COLOURS[v]))
    offset = 1 if s["cache"] else 0
    branched = s["pending"] + s["drafts"] + len(s["groups"]) * s["g"]
    edges = ([s["pending"], s["pending"] + s["drafts"], branched]
             + [s["pending"] + s["drafts"] + c * s["g"] for c in range(1, len(s["groups"]))]
             + [branched + c * (1 + s["g"]) for c in range(1, len(s["siblings"]))])
    for e in sorted(set(edges)):
        if 0 < e < len(labels):
            fig.add_shape(type="line", x0=e + offset - 0.5, x1=e + offset - 0.5, y0=-0.5, y1=len(labels) - 0.5,
                          line=dict(color="#0f172a", width=1))
            fig.add_shape(type="line", y0=e - 0.5, y1=e - 0.5, x0=-0.5, x1=len(x) - 0.5,
                          line=dict(color="#0f172a", width=1))
    size = max(14, min(30, 640 // max(len(labels), 1)))
    xticks, yticks = readable_ticks(x, s["cache"] > 0, s["pending"]), readable_ticks(labels, False, s["pending"])
    font = dict(size=11 if len(labels) <= 24 else 9)
    fig.update_layout(
        title=dict(text=f"Forward {s['forward'] + 1}: the mask it fed", font=dict(size=14)),
        height=min(1000, 300 + size * len(labels)), margin=dict(l=110, r=20, t=50, b=180),
        legend=dict(orientation="h", x=0, y=0.01, xanchor="left", yanchor="bottom", yref="container",
                    font=dict(size=11)),
        xaxis=dict(tickvals=xticks, ticktext=[x[i] for i in xticks], tickangle=-60, tickfont=font,
                   title=dict(text="keys (seen)")),
        yaxis=dict(tickvals=yticks, ticktext=[labels[i] for i in yticks], autorange="reversed", tickfont=font,
                   title=dict(text="queries (fed slots)")),
        plot_bgcolor="#ffffff", paper_bgcolor="#ffffff")
    return fig


def chip_row(step: dict, kind: str, first: int = 0, last: int | None = None) -> str:
    """The fed slots of one kind as chips."""
    return "".join(token_chip(slot["text"], SLOT_COLOURS[kind]) for slot in step["slots"][first:last]
                   if slot["kind"] == kind)


def percent(p: float) -> str:
    return f"{100 * p:.0f}%" if p >= 0.005 else f"{100 * p:.1f}%"


def why_this_tree(s: dict) -> str:
    """Why this forward fed these drafts and groups: the odds the forward before computed, and its rule."""
    if s["chosen_odds"] is None:
        if not s["groups"]:
            return "<p>The prefill, with no group: at τ = 1 (or B = 1) no draft is worth checking.</p>"
        return ("<p>The prefill: the prompt is pending, there are no drafts yet, and G<sub>0</sub> hangs after the "
                "prompt to propose the first ones.</p>")
    K, odds = s["drafts"], s["chosen_odds"]
    if K == 0:
        hung = ("G<sub>0</sub> hangs after the pending token to propose new ones" if s["groups"] else
                "no group hangs: a plain one-token forward")
        cost = ", or, sized by this machine's cost curve, no draft paid for its width" if s["seconds"] else ""
        return (f"<p><b>Why this tree.</b> The forward before chose no draft to check (none was confident enough, "
                f"or the group that would have proposed them was not fed{cost}), so this forward checks none; "
                f"{hung}.</p>")
    g = s["g"]
    planned = s["seconds"] is not None

    def reason(j: int) -> str:
        """Why G_j was fed or not, in plain words."""
        if j in s["groups"]:
            return (f"✓ fed: if exactly {j} draft{'s' * (j != 1)} match, its {g} mask{'s' * (g != 1)} propose the "
                    "next drafts")
        if planned:
            return (f"✗ not fed: its {g} extra token{'s' * (g != 1)} of width would cost more time on this machine "
                    "than the drafts it might propose are expected to save")
        return f"✗ not fed: less likely than the floor {TreeLayout().group_floor:g}"

    rows = "".join(
        f"<tr><td {CELL}>G<sub>{j}</sub></td><td {CELL}>{percent(odds[j])}</td><td {CELL}>{reason(j)}</td></tr>"
        for j in range(K + 1))
    head = "".join(f"<th {CELL}>{h}</th>" for h in ("group", "P(exactly j drafts match)", "this forward"))
    if s["seconds"] is None:
        rule = (f"G<sub>j</sub> is fed when P(exactly j drafts match) ≥ the group floor "
                f"{TreeLayout().group_floor:g}: width goes where it is likely to pay.")
    else:
        t = s["seconds"]
        rule = ("This machine's forward cost was measured, so the decoder sized the tree by cost: among draft counts "
                f"and group floors ({', '.join(f'{f:g}' for f in s['floors'])}) it fed the tree with the most expected "
                f"committed tokens per second of forward. This forward fed {s['width']} tokens, which costs "
                f"{t[min(s['width'], len(t) - 1)] / t[1]:.2f}× a one-token forward here"
                + ("; it fed no group at all (see the table: each one's width cost more than it was expected to "
                   "save), so this forward checks its drafts but proposes no new ones." if not s["groups"] else
                   "; the groups left out were the least likely." if len(s["groups"]) < K + 1 else "."))
    if s["siblings"]:
        odds = s["chosen_sibling_odds"]
        rule += (" Beside d<sub>a</sub> it fed the sibling e<sub>a</sub>, the second choice of the same mask slot, "
                 "with a group H<sub>a</sub> after it; e<sub>a</sub> is used when d<sub>1</sub>…d<sub>a−1</sub> "
                 "match and it is the model's token, P ≈ c<sub>1</sub>⋯c<sub>a−1</sub>·q<sub>2</sub>: "
                 + ", ".join(f"e<sub>{a}</sub> {percent(odds[a - 1])}" for a in s["siblings"] if a <= len(odds))
                 + ".")
    return (f"<p><b>Why this tree.</b> The forward before proposed {K} draft{'s' * (K != 1)} (from "
            f"{'prompt lookup' if s['source'] == 'lookup' else 'its mask slots'}) and computed, reading their "
            f"confidences c<sub>1</sub>…c<sub>{K}</sub> as independent odds, P(exactly j match) = "
            f"c<sub>1</sub>⋯c<sub>j</sub>(1 − c<sub>j+1</sub>). G<sub>j</sub> is only useful when exactly j "
            f"match. {rule}</p>"
            f'<table style="border-collapse:collapse"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>')


def verify_rows(s: dict) -> str:
    """Each draft checked against the model's own prediction, left to right, and the bonus."""
    P, K, m = s["pending"], s["drafts"], s["m"]
    chained = m - s["by_sibling"]  # drafts matched on the chain; a matched sibling is the m-th token
    sibling = next((slot for slot in s["slots"] if slot["kind"] == "sibling" and slot["group"] == f"H{m}"), None)
    rows = []
    for a in range(K + 1):
        read = (f"last pending {token_chip(s['slots'][P - 1]['text'], SLOT_COLOURS['pending'])}" if a == 0 else
                f"d<sub>{a}</sub> {token_chip(s['slots'][P + a - 1]['text'], SLOT_COLOURS['draft'])}")
        draft = (f"d<sub>{a + 1}</sub> {token_chip(s['slots'][P + a]['text'], SLOT_COLOURS['draft'])} "
                 f"(c = {s['draft_conf'][a]:.2f})" if a < K else "—")
        if s["by_sibling"] and a == chained:
            verdict, colour = (f"✗ d<sub>{a + 1}</sub> differs, but its sibling e<sub>{a + 1}</sub> "
                               f"{token_chip(sibling['text'], SLOT_COLOURS['sibling'])} is the model's token: "
                               "committed", "#dcfce7")
        elif s["by_sibling"] and a == m:
            read = f"e<sub>{m}</sub> {token_chip(sibling['text'], SLOT_COLOURS['sibling'])}"
            draft, verdict, colour = "—", f"the bonus: the model's token after e<sub>{m}</sub>", "#fef9c3"
        elif a < m:
            verdict, colour = f"✓ d<sub>{a + 1}</sub> matches: committed", "#dcfce7"
        elif a == m:
            verdict = (f"✗ d<sub>{a + 1}</sub> differs: the model's token is committed instead (the bonus)" if a < K
                       else "the bonus: the model's token after the last draft" if K else
                       "no drafts: the model's token is committed (one token)")
            colour = "#fef9c3"
        else:
            verdict, colour = "· not read: after the first mismatch", "#fff"
        cells = (read, token_chip(s["predicted"][a]) + f" {s['predicted_conf'][a]:.2f}", draft, verdict)
        rows.append(f'<tr style="background:{colour}">' + "".join(f"<td {CELL}>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th {CELL}>{h}</th>" for h in ("read at", "the model's token (confidence)", "draft checked",
                                                     "verdict"))
    return f'<table style="border-collapse:collapse;width:100%"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}'\
           "</tbody></table>"


def next_drafts(s: dict) -> str:
    """Which chain the next forward checks, and why: G_m's predictions, or prompt lookup's."""
    m, tau = s["m"], s["threshold"]
    if s["done"]:
        return "<p><b>Finished</b>: a stop token or the token limit.</p>"
    chips = "".join(token_chip(t, SLOT_COLOURS["draft"]) + f"<small>{c:.2f}</small> "
                    for t, c in zip(s["next"], s["next_conf"]))
    others = [j for j in s["groups"] if j != m]
    dropped = (f" The other groups' predictions (G<sub>{'</sub>, G<sub>'.join(map(str, others))}</sub>) are dropped: "
               "they hang after drafts that did not all match." if others else "")
    if s["proposed_fed"]:
        proposed = "".join(token_chip(t, SLOT_COLOURS["mask"]) + f"<small>{c:.2f}</small> "
                           for t, c in zip(s["proposed"], s["proposed_conf"]))
        name = f"H<sub>{m}</sub>, hung after the sibling e<sub>{m}</sub>" if s["by_sibling"] else (
            f"G<sub>{m}</sub>, hung after exactly the drafts that matched")
        text = (f"<p><b>The next drafts.</b> m = {m}, so {name}, "
                f"proposes them (its mask t predicts the token after the bonus and onwards): {proposed}kept left to "
                f"right while confidence ≥ {tau:.2f}: {s['mask_count']}.{dropped}</p>")
    else:
        text = (f"<p><b>The next drafts.</b> m = {m}, and G<sub>{m}</sub> was not hung in this forward, so its "
                f"masks propose nothing.{dropped}</p>")
    if s["next_source"] == "lookup":
        text += (f"<p><b>Prompt lookup instead:</b> the tokens that followed the latest earlier occurrence of the "
                 f"text's last tokens, {chips}promise a longer run of matches (Σ c<sub>1</sub>⋯c<sub>i</sub> = "
                 f"{s['next_run']:.2f}) than the mask chain ({s['mask_run']:.2f}), so the next forward checks them."
                 "</p>")
    elif s["next"] and len(s["next"]) < s["mask_count"]:
        text += (f"<p>The cost plan checks the first {len(s['next'])} of them: the rest would not pay for their "
                 "width.</p>")
    elif not s["next"]:
        hung = ("hangs G<sub>0</sub> after it" if 0 in s["next_groups"]
                else "hangs no group: a plain one-token forward")
        text += f"<p>The next forward carries no drafts: it feeds the bonus token and {hung}.</p>"
    groups = ", ".join(f"G<sub>{j}</sub> ({percent(s['next_odds'][j])})" for j in s["next_groups"]) or "none"
    beside = ", ".join(f"e<sub>{a}</sub> {token_chip(t, SLOT_COLOURS['sibling'])} ({percent(p)})"
                       for a, t, p in s["next_siblings"]) or "none"
    return text + (f"<p>Groups hung after them in the next forward (P(exactly j match)): {groups}. Siblings beside "
                   f"them (P(used)): {beside}.</p>")


def verified_html(walk: Walk) -> str:
    """One verified forward: what it fed and why, each draft's check, the commit, and the next drafts."""
    steps = walk.steps
    if not steps:
        return "<p>Press <b>Decode verified</b> to step through a verified decode one forward at a time.</p>"
    s = steps[walk.index]
    P, K, g = s["pending"], s["drafts"], s["g"]
    shown = max(0, P - 16)
    pending = ("…" if shown else "") + chip_row(s, "pending", shown, P)
    drafts = chip_row(s, "draft") or "none"
    groups = " ".join(
        f"G<sub>{j}</sub> " + "".join(token_chip("[MASK]", SLOT_COLOURS["mask"]) for _ in range(g))
        + f"<small> at positions {s['slots'][P + K + c * g]['position']}…</small>" for c, j in enumerate(s["groups"]))
    siblings = " ".join(
        f"e<sub>{slot['group'][1:]}</sub> {token_chip(slot['text'], SLOT_COLOURS['sibling'])}"
        + "".join(token_chip("[MASK]", SLOT_COLOURS["mask"]) for _ in range(g))
        + f"<small> at position {slot['position']}…</small>" for slot in s["slots"] if slot["kind"] == "sibling")
    kept = (f"the {s['m'] - 1} matched draft{'s' * (s['m'] != 2)} on the chain; the matched sibling is fed again, "
            "with the bonus, as a pending token of the next forward" if s["by_sibling"] else
            f"the {s['m']} matched draft{'s' * (s['m'] != 1)}")
    committed = "".join(token_chip(t, "#dcfce7") for t in s["committed"])
    cut = " (cut: the end of the text or the token limit)" if len(s["committed"]) < s["m"] + 1 else ""
    context = html.escape(s["context"]) or '<span style="color:#94a3b8">(nothing yet)</span>'
    source = "prompt lookup" if s["source"] == "lookup" else "the mask slots"
    return f"""
<div style="line-height:1.7">
<p><b>Forward {s['forward'] + 1} of {len(steps)}</b> · draft threshold {s['threshold']:.2f} · {s['width']} tokens
fed · committed {len(s['committed'])} ({s['m']} draft{'s' * (s['m'] != 1)} + the bonus){cut}</p>
<p><b>Committed before this forward:</b> <span style="white-space:pre-wrap">{context}</span></p>
<p><b>Already in the cache:</b> {s['cache']} token{'s' * (s['cache'] != 1)} (the prompt and the text committed
so far: the model keeps their keys and values, so they are not fed again).<br>
<b>Fed in this forward: {s['width']} token{'s' * (s['width'] != 1)}</b>, all in one pass:<br>
pending ({P} token{'s' * (P != 1)}{', last 16 shown' if shown else ''}: committed tokens that are not in the cache
yet, at the first forward the prompt, after it the token the last forward committed of its own): {pending}<br>
{f"drafts d<sub>1</sub>…d<sub>{K}</sub> from {source}: {drafts}" if K else "drafts: none"}<br>
groups: {groups or 'none'}<br>
siblings (each beside its draft, the second choice of its mask slot, with its group H<sub>a</sub>):
{siblings or 'none'}</p>
{why_this_tree(s)}
<p><b>Verify, left to right.</b> The prediction read at the last pending token is exactly AR's next token; it is
compared with d<sub>1</sub>, the prediction read at d<sub>1</sub> with d<sub>2</sub>, and so on.</p>
{verify_rows(s)}
<p><b>Committed:</b> {committed}{cut} — exactly what one-token decoding produces. The cache keeps the pending
tokens and {kept}; everything else fed is cropped.</p>
{next_drafts(s)}
</div>"""


def verified_move(walk: Walk, delta: int) -> tuple[str, object, Walk]:
    """Previous/next: show another forward of the verified walkthrough."""
    walk = walk.moved(delta)
    return verified_html(walk), tree_figure(walk), walk


VERIFIED_MARKDOWN = """
### Verified decoding, one forward at a time
Verified MARS gives exactly AR's answer in fewer forwards. The mask slots' predictions become *drafts*, and the next
forward checks them with the model's own next-token predictions while it proposes the next drafts, all under one
attention mask shaped like a tree: the pending token (the last forward's bonus), the drafts d<sub>1</sub>…d<sub>k</sub>
in a chain after it, and for each j a group G<sub>j</sub> of B−1 masks hanging after d<sub>1</sub>…d<sub>j</sub>, which
proposes the next drafts in case exactly j drafts match. Every picture below is the decoder's own record of that
forward (`DecodeOptions.record`): the mask is the one the model got.
"""


def verified_section(demo: gr.Blocks) -> gr.Button:
    """The verified walkthrough: its inputs, Decode verified and the forward-by-forward view with its tree mask."""
    gr.Markdown(VERIFIED_MARKDOWN)
    with gr.Row(equal_height=True):
        prompt = gr.Textbox(VERIFIED_PROMPT, label="Prompt", scale=3, max_length=MAX_PROMPT_CHARS,
                            elem_id="walkv-prompt")
        tau, block, new = (slider(f"walkv-{name}") for name in ("threshold", "block", "max-new"))
    with gr.Row():
        decode_button = gr.Button("Decode verified", variant="primary", elem_id="walkv-decode")
        prev_button = gr.Button("◀ Previous forward", elem_id="walkv-prev")
        next_button = gr.Button("Next forward ▶", elem_id="walkv-next")
    walk = gr.State(Walk())
    with gr.Row(elem_id="walkv-forward"):
        view = gr.HTML(verified_html(Walk()), label="verified forward", elem_id="walkv-view")
        plot = gr.Plot(tree_figure(Walk()), label="tree mask", show_label=False, elem_id="walkv-mask")
    inputs, outputs = [prompt, tau, block, new], [view, plot, walk]
    decode_button.click(models.gpu(verified_steps), inputs, outputs, api_name="walkthrough_verified",
                        js=typed_js(inputs, True))
    prev_button.click(lambda w: verified_move(w, -1), walk, outputs, api_visibility="undocumented", **QUICK)
    next_button.click(lambda w: verified_move(w, 1), walk, outputs, api_visibility="undocumented", **QUICK)
    return decode_button

