"""The Batch tab's views: each prompt's cell (its block and verified MARS text, coloured by tokens per forward, and its
AR text), the slots chart (who committed what in each forward, who waited at a block boundary) and the stats line."""

from __future__ import annotations

import html

from studio import lanes
from studio.batch.state import BatchRun
from studio.charts import MARS_COLOUR, chart_layout
from studio.lanes import chip, count_class, count_colour

WAIT_COLOUR = "#fb923c"  # a sample that committed nothing in a forward: waiting at the block boundary
LABEL_WORDS = 4  # words of the prompt in a chart row label


def row_label(index: int, prompt: str) -> str:
    """A chart row: "1: <first words of the prompt>"."""
    words = prompt.split()
    return f"{index + 1}: {' '.join(words[:LABEL_WORDS])}{'…' * (len(words) > LABEL_WORDS)}"


def same_as_ar(run: BatchRun | None, ar: BatchRun | None) -> list[bool]:
    """Per sample: the run's (block or verified) answer equals the AR answer token for token, so far: where both
    finished, equal; where one did, the other's tokens a prefix of it; where neither did (running, or stopped), the
    tokens both have equal (the side ahead is not counted as differing for being ahead)."""
    if run is None or ar is None:
        return []
    return [agrees(b, a, b_done, a_done) for b, a, b_done, a_done in zip(run.ids, ar.ids, run.done(), ar.done())]


def agrees(ids: list[int], ar_ids: list[int], done: bool, ar_done: bool) -> bool:
    """Whether an answer agrees with AR's as far as what is known of both (same_as_ar)."""
    if done and ar_done:
        return ids == ar_ids
    if ar_done:
        return ar_ids[: len(ids)] == ids
    if done:
        return ids[: len(ar_ids)] == ar_ids
    n = min(len(ids), len(ar_ids))
    return ids[:n] == ar_ids[:n]


def slot_colourscale(block_size: int) -> list[list]:
    """A stepwise colourscale for counts 0..B: 0 in the waiting colour, then the panes' count colours."""
    # the colour axis runs from -0.5 to B + 0.5, so count k owns the band [k, k + 1] / (B + 1)
    scale = []
    for k in range(block_size + 1):
        colour = WAIT_COLOUR if k == 0 else count_colour(k)
        scale += [[k / (block_size + 1), colour], [(k + 1) / (block_size + 1), colour]]
    return scale


def slots_figure(
    counts: list[list[int]], labels: list[str], block_size: int, new_blocks: list[int],
    finished_at: list[int | None],
) -> dict:
    """Heatmap of the block batch: x = forward, y = sample, colour = tokens it committed (0 = waiting)."""
    forwards = len(counts)
    z = [
        [counts[f][i] if end is None or f <= end else None for f in range(forwards)]  # blank once finished
        for i, end in enumerate(finished_at)
    ]
    ticks = ["0 (waiting)", *map(str, range(1, block_size + 1))]
    heatmap = {
        "type": "heatmap", "x": list(range(forwards)), "y": labels, "z": z, "zmin": -0.5, "zmax": block_size + 0.5,
        "colorscale": slot_colourscale(block_size), "xgap": 1, "ygap": 1, "name": "tokens committed",
        "colorbar": {"title": {"text": "tokens"}, "tickvals": list(range(block_size + 1)), "ticktext": ticks},
        "hovertemplate": "%{y}<br>forward %{x}: %{z} token(s)<extra></extra>",
    }
    lines = [
        {"type": "line", "xref": "x", "yref": "paper", "x0": f - 0.5, "x1": f - 0.5, "y0": 0, "y1": 1,
         "line": {"color": "#334155", "width": 1.5, "dash": "dot"}}
        for f in new_blocks
    ]
    title = f"Tokens committed per sample and forward (B = {block_size}: 0 = waiting, dotted = new block, blank = done)"
    layout = chart_layout(title, "forward of the block batch", "", shapes=lines)
    layout["height"] = max(200, 90 + 32 * len(labels))
    layout["margin"]["l"] = 10
    layout["yaxis"].update(type="category", autorange="reversed", automargin=True, showgrid=False)
    layout["xaxis"].update(showgrid=False, range=[-0.5, max(forwards, 1) - 0.5])
    return {"data": [heatmap], "layout": layout}


def legend_html() -> str:
    """The colour legend above the cells."""
    return lanes.legend_html(
        "MARS tokens (block, then verified), by how many this sample's forward committed",
        f"{chip('0', WAIT_COLOUR)} (waiting at the block boundary) shows in the chart &nbsp;·&nbsp; grey text = AR "
        "on the same batch",
        ";margin-bottom:6px")


def tokens_html(chunks: list[tuple[int, list[str], list[float]]]) -> str:
    """One sample's text, each forward's tokens on a background coloured by how many it committed."""
    spans = []
    for forward, pieces, conf in chunks:
        tip = f"forward {forward} · {len(conf)} token{'s' * (len(conf) > 1)} · confidence {min(conf):.2f}"
        spans += [f'<span class="tk {count_class(len(conf))}" title="{tip}">{html.escape(piece)}</span>'
                  for piece in pieces]
    return "".join(spans)


BOX = "white-space:pre-wrap;line-height:1.9;max-height:220px;overflow-y:auto;padding:4px 6px;border-radius:6px"
EMPTY = '<span style="color:#94a3b8">…</span>'


def text_box(title: str, colour: str, body: str, style: str = "font-size:14px") -> str:
    """One side's text in a cell, under its name."""
    return (f'<div style="font-size:0.75em;color:{colour};margin-top:4px">{title}</div>'
            f'<div style="{BOX};{style}">{body or EMPTY}</div>')


def cell_html(i: int, prompt: str, block: BatchRun | None, ar: BatchRun | None, verified: BatchRun | None,
              same: tuple[bool | None, bool | None]) -> str:
    """One prompt's cell: the prompt, its block and verified MARS texts, its AR text, and a status line."""
    parts = []
    for run in (block, verified, ar):
        if run:
            state = "done" if run.finished_at[i] is not None else "running"
            wait = f", waited {run.waits(i)} forwards" if run is block else ""
            parts.append(f"{run.name}: {len(run.ids[i])} tokens{wait} · {state}")
    if same[0] is not None:
        parts.append("same as AR ✓" if same[0] else "differs from AR")
    if same[1] is not None:
        parts.append("verified = AR ✓" if same[1] else "verified differs from AR")
    return (
        '<div style="border:1px solid #e2e8f0;border-radius:8px;padding:8px 10px;background:#fff;color:#0f172a">'
        f'<div style="color:#64748b;font-size:0.8em;margin-bottom:4px">{i + 1}. {html.escape(prompt)}</div>'
        + text_box("MARS (block)", MARS_COLOUR, tokens_html(block.chunks[i]) if block else "")
        + (text_box("MARS verified", MARS_COLOUR, tokens_html(verified.chunks[i])) if verified else "")
        + text_box("AR", "#64748b", html.escape(ar.texts[i]) if ar else "",
                   "font-size:13px;color:#64748b;background:#f8fafc")
        + f'<div style="margin-top:6px;color:#64748b;font-size:0.8em">{html.escape(" · ".join(parts))}</div></div>'
    )


def answers_same(run: BatchRun | None, ar: BatchRun | None, size: int) -> list[bool | None]:
    """Per sample, once both batches are done: the run's answer equals AR's; before, None."""
    done = bool(run and ar and all(run.done()) and all(ar.done()))
    return same_as_ar(run, ar) if done else [None] * size


def panes_html(prompts: list[str], block: BatchRun | None = None, ar: BatchRun | None = None,
               verified: BatchRun | None = None, note: str = "") -> str:
    """The grid of cells, one per prompt, under the colour legend."""
    notice = f'<div style="color:#64748b;padding:6px 2px">{html.escape(note)}</div>' if note else ""
    if not prompts:
        return legend_html() + (notice or '<div style="color:#94a3b8;padding:10px">(the batch streams here)</div>')
    same = list(zip(answers_same(block, ar, len(prompts)), answers_same(verified, ar, len(prompts))))
    cells = "".join(cell_html(i, p, block, ar, verified, s) for i, (p, s) in enumerate(zip(prompts, same)))
    grid = "display:grid;grid-template-columns:repeat(auto-fill,minmax(300px,1fr));gap:10px"
    return f'{legend_html()}{notice}<div class="mars-pane" style="{grid}">{cells}</div>'


def stats_markdown(
    block: BatchRun, ar: BatchRun, verified: BatchRun, block_size: int, *, threshold: float, status: str,
    device: str = "CPU", why: str = "",
) -> str:
    """What is deterministic first (forwards, steps per forward, tokens per forward, same answers; why: why verified
    feeds one token a forward here, where it does), then timings."""
    n, b, a, v = block.size, block.summary(), ar.summary(), verified.summary()
    # steps per forward = forwards AR needed for the batch / forwards of the block batch
    steps = a["forwards"] / b["forwards"] if b["forwards"] else 0.0
    # tokens per forward per sample = tokens / (forwards x samples); "while advancing" leaves out the waits
    per_sample = b["tokens"] / max(b["forwards"] * n, 1)
    advancing = b["tokens"] / max(sum(1 for counts in block.counts for c in counts if c), 1)
    waits = sum(block.waits(i) for i in range(n))
    same = sum(same_as_ar(block, ar))
    so_far = "" if status == "done" else " (so far)"
    speed = b["tokens_per_second"] / a["tokens_per_second"] if a["tokens_per_second"] > 0 else 0.0
    verified_speed = v["tokens_per_second"] / a["tokens_per_second"] if a["tokens_per_second"] > 0 else 0.0
    return (
        f"**Block batch** (B = {block_size}, τ = {threshold:.2f}): {b['forwards']} forwards · {b['tokens']} tokens · "
        f"**{per_sample:.2f} tokens per forward per sample** ({advancing:.2f} while advancing) · "
        f"{waits} of {b['forwards'] * n} sample-forwards waiting at a block boundary  \n"
        f"**Verified batch**: {v['forwards']} forwards · {v['tokens']} tokens · "
        f"**{v['tokens'] / max(v['forwards'] * n, 1):.2f} tokens per forward per sample** · "
        f"**{sum(same_as_ar(verified, ar))} of {n}** answers equal their AR answer token for token{so_far}  \n"
        + (f"{why}  \n" if why else "") +
        f"**AR batch**: {a['forwards']} forwards · {a['tokens']} tokens · "
        f"{a['tokens'] / max(a['forwards'] * n, 1):.2f} tokens per forward per sample  \n"
        f"**{steps:.2f} steps per forward**{so_far} (AR forwards the batch needed / block forwards) · "
        f"**{same} of {n}** answers equal their AR answer token for token{so_far} · {status}  \n"
        f"Wall clock, a measurement on a shared {device} (each side timed by its own forwards only, the sides "
        f"taking turns to go first; a forward right after a page update counts as the side's typical one): block "
        f"{b['seconds']:.2f} s, {b['tokens_per_second']:.1f} tokens/s over the batch ({speed:.2f}× AR) · verified "
        f"{v['seconds']:.2f} s, {v['tokens_per_second']:.1f} tokens/s ({verified_speed:.2f}× AR) · AR "
        f"{a['seconds']:.2f} s, {a['tokens_per_second']:.1f} tokens/s"
    )

