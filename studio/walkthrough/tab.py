"""The Walkthrough tab: the training mask rule by rule, the loss, and a decode stepped forward by forward."""

from __future__ import annotations

import html
from collections.abc import Iterator

import gradio as gr
import plotly.graph_objects as go
import torch

from mars_core import stream
from mars_core.generate import encode_prompt
from studio import models
from studio.charts import MARS_COLOUR
from studio.inputs import MAX_PROMPT_CHARS, check, slider, typed_js, warn
from studio.lanes import QUICK
from studio.walkthrough.verified import verified_section
from studio.walkthrough.walk import CELL, Walk, checked_in_a_slot, token_chip

DEFAULT_PROMPT = "Name 4 colours, as a numbered list."

CATEGORY_NAMES = ("hidden", "clean → clean (causal)", "noisy → noisy (same block, causal)",
                  "noisy → clean (earlier blocks)")
CATEGORY_COLOURS = ("#f1f5f9", "#64748b", "#2563eb", "#f59e0b")


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


def mask_view(n: int, block_size: int) -> tuple[go.Figure | object, str]:
    """The mask sliders' event (and /mask): the figure and an empty message line, or, for a value out of range,
    the figure left as it is and one message (None: a value still being typed, typed_js: nothing yet)."""
    if n is None or block_size is None:
        return gr.skip(), gr.skip()
    try:
        n, block_size = check("mask-n", n), check("mask-block", block_size)
    except ValueError as err:
        return gr.skip(), warn(str(err))
    return mask_figure(n, block_size), ""


def mask_figure(n: int, block_size: int) -> go.Figure:
    """The training attention mask as a heatmap, each visibility rule in its own colour (the colours equal
    mars_core.training_attention_mask cell for cell: tests/studio/test_app.py checks it)."""
    n, block_size = int(n), int(block_size)
    cats = mask_categories(n, block_size)
    labels = [f"x̃{i}" for i in range(n)] + [f"x{i}" for i in range(n)]
    scale = []
    for i, colour in enumerate(CATEGORY_COLOURS):
        scale += [[i / len(CATEGORY_COLOURS), colour], [(i + 1) / len(CATEGORY_COLOURS), colour]]
    hover = [[f"query {labels[r]} → key {labels[c]}: {CATEGORY_NAMES[int(cats[r, c])]}" for c in range(2 * n)]
             for r in range(2 * n)]
    fig = go.Figure(go.Heatmap(
        z=cats.tolist(), x=labels, y=labels, colorscale=scale, zmin=-0.5, zmax=len(CATEGORY_COLOURS) - 0.5,
        xgap=1, ygap=1, text=hover, hoverinfo="text", showscale=False,
    ))
    for name, colour in zip(CATEGORY_NAMES, CATEGORY_COLOURS):  # the rules as a legend under the grid (a colour
        # bar beside it left a phone's narrow screen no room for the grid)
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name, hoverinfo="skip",
                                 marker=dict(symbol="square", size=12, color=colour, line=dict(color="#cbd5e1",
                                                                                               width=1))))
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
        title=dict(text=f"Training attention mask, n = {n}, B = {block_size}", font=dict(size=14)),
        height=560, margin=dict(l=50, r=10, t=40, b=10), plot_bgcolor="#ffffff", paper_bgcolor="#ffffff",
        xaxis=dict(title=dict(text="keys [noisy x̃ | clean x]", font=dict(size=12)), constrain="domain"),
        yaxis=dict(autorange="reversed", scaleanchor="x", constrain="domain", constraintoward="top",  # a phone:
                   title=dict(text="queries", font=dict(size=12))),  # the grid first, under the title
        legend=dict(orientation="h", x=0, y=-0.12, yanchor="top", font=dict(size=12)),
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


def walk_steps(prompt: str, threshold: float, block_size: int, max_new_tokens: int) -> Iterator[tuple[str, Walk]]:
    """The Decode button: the inputs checked, then the decode in a generation slot (until one is free, the view says
    so); its one frame is the first forward's view and the walk."""
    yield from checked_in_a_slot((prompt, threshold, block_size, max_new_tokens), "walk", decode, failure,
                                 lambda said: (f"<p>{said}</p>", gr.skip()))


def walk_decode(prompt: str, threshold: float, block_size: int, max_new_tokens: int) -> tuple[str, Walk]:
    """Decode a prompt with the sliding strategy and keep, per forward, its input, proposals and verdicts: the first
    forward's view and the walk (walk_steps' last frame)."""
    *_, last = walk_steps(prompt, threshold, block_size, max_new_tokens)
    return last


def decode(prompt: str, tau: float, block: int, new: int) -> Iterator[tuple[str, Walk]]:
    """The walkthrough's decode itself, inside a generation slot: one frame once every forward is kept."""
    model, tok = models.get_model(models.CONFIG.model)
    fed = encode_prompt(tok, prompt)
    steps, context = [], ""
    with models.TRACKER:
        for event in stream(model, tok, prompt, strategy="sliding", block_size=block, max_new_tokens=new,
                            threshold=tau, runtime=models.get_runtime(models.CONFIG.model)):
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
    walk = Walk(steps)
    yield step_html(walk), walk


def failure(message: str) -> tuple[str, Walk]:
    """The walkthrough's outputs for a message instead of a decode: the message (and its toast), an empty walk."""
    return f"<p>{html.escape(warn(message))}</p>", Walk()


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


def step_html(walk: Walk) -> str:
    """One forward of the walkthrough: its input, each slot's proposal and confidence, and what was accepted."""
    steps = walk.steps
    if not steps:
        return "<p>Press <b>Decode</b> to step through a generation one forward at a time.</p>"
    s = steps[walk.index]
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


def walk_move(walk: Walk, delta: int) -> tuple[str, Walk]:
    """Previous/next: show another forward of the walkthrough."""
    walk = walk.moved(delta)
    return step_html(walk), walk


def build(demo: gr.Blocks) -> list[gr.Button]:
    """The Walkthrough tab: the training mask and the loss, then a decode stepped forward by forward, and their
    events; returns its two Decode buttons (enabled once the model is ready)."""
    with gr.Tab("Walkthrough"):
        gr.Markdown("### Training: one forward over [noisy | clean]")
        with gr.Row():
            mask_n, mask_b = slider("mask-n"), slider("mask-block")
        mask_message = gr.Markdown("", elem_id="mask-message")
        mask_plot = gr.Plot(mask_figure(8, 4), label="attention mask", show_label=False)
        gr.Markdown(LOSS_MARKDOWN, latex_delimiters=[
            {"left": "$$", "right": "$$", "display": True}, {"left": "$", "right": "$", "display": False}])
        gr.Markdown("### Decoding at a threshold τ, one forward at a time")
        with gr.Row(equal_height=True):
            prompt = gr.Textbox(DEFAULT_PROMPT, label="Prompt", scale=3, max_length=MAX_PROMPT_CHARS)
            tau, block, new = (slider(f"walk-{name}") for name in ("threshold", "block", "max-new"))
        with gr.Row():
            decode_button = gr.Button("Decode", variant="primary")
            prev_button = gr.Button("◀ Previous forward")
            next_button = gr.Button("Next forward ▶")
        walk = gr.State(Walk())
        view = gr.HTML(step_html(Walk()), label="forward")
        verified_decode = verified_section(demo)
    gr.on([mask_n.change, mask_b.change], mask_view, [mask_n, mask_b], [mask_plot, mask_message], api_name="mask",
          show_progress="hidden", js=typed_js([mask_n, mask_b], False))
    inputs = [prompt, tau, block, new]
    decode_button.click(models.gpu(walk_steps), inputs, [view, walk], api_name="walkthrough",
                        js=typed_js(inputs, True))
    prev_button.click(lambda w: walk_move(w, -1), walk, [view, walk], api_visibility="undocumented", **QUICK)
    next_button.click(lambda w: walk_move(w, 1), walk, [view, walk], api_visibility="undocumented", **QUICK)
    return [decode_button, verified_decode]
