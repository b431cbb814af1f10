"""The Batch tab: 4 to 8 prompts decoded as one batch by the block-cached MARS decoder, against AR on the same batch.

The block decoder cuts generation into blocks of B slots aligned across the batch: a sample that filled its
block commits nothing (it waits) until the slowest sample has filled its block too. The tab shows where that
happens: per sample and forward, how many tokens were committed (0 = waiting at the block boundary).
"""

from __future__ import annotations

import html
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import gradio as gr

from mars_core import DecodeControl, stream
from mars_core.generate import check_request, encode_prompt

from . import lanes, models
from .charts import MARS_COLOUR, chart_layout, plotly_data
from .inputs import MAX_PROMPT_CHARS, cap, check_inputs, slider, warn
from .lanes import Lane, Throttle, Turns, chip, count_class, count_colour, guarded
from .models import WAITING

EXAMPLES = [  # fast (lists, counting, a table) and slow (open questions): the fast ones wait at block boundaries
    "List three colours.",
    "List the planets of the solar system.",
    "Write the numbers from 1 to 10 separated by commas.",
    "Make a table with two columns, number and its square, for 1 to 4.",
    "Why is the sky blue? Answer in one sentence.",
    "Why do people like to travel? Answer in one sentence.",
]
MIN_PROMPTS, MAX_PROMPTS = 4, 8
MAX_NEW_TOKENS = cap("batch-max-new")  # per sample (inputs.INPUTS)
TEXT_CHARS = MAX_PROMPTS * (MAX_PROMPT_CHARS + 1)  # longest prompts text the tab accepts (a Textbox max_length)
WAIT_COLOUR = "#fb923c"  # a sample that committed nothing in a forward: waiting at the block boundary
LABEL_WORDS = 4  # words of the prompt in a chart row label


@dataclass
class BatchSession:
    """One visitor's batch state (the tab's gr.State)."""

    controls: tuple[DecodeControl, DecodeControl] | None = None  # the running batches' (block, AR); None: none runs


def parse_prompts(text: Any) -> list[str]:
    """One prompt per non-empty line; a ValueError unless there are 4 to 8, each within the prompt limit."""
    if not isinstance(text, str):
        raise ValueError("Prompts must be text: one prompt per line.")
    prompts = [line.strip() for line in text.splitlines() if line.strip()]
    if not MIN_PROMPTS <= len(prompts) <= MAX_PROMPTS:
        raise ValueError(f"Give {MIN_PROMPTS} to {MAX_PROMPTS} prompts, one per line; got {len(prompts)}.")
    for i, prompt in enumerate(prompts, 1):
        if len(prompt) > MAX_PROMPT_CHARS:
            raise ValueError(f"Prompt {i} too long: {len(prompt)} characters, the limit is {MAX_PROMPT_CHARS}.")
    return prompts


def stop_batch(session: BatchSession) -> None:
    """Stop button: both batches end before their next forward; what they generated stays."""
    for control in session.controls or ():
        control.stop()


@dataclass
class BatchRun(Lane):
    """One side's batch generation: what each forward committed per sample (the stream and its timing: lanes.Lane)."""

    size: int  # samples in the batch
    counts: list[list[int]] = field(default_factory=list)  # [forward][sample]: tokens committed
    starts: list[list[int]] = field(default_factory=list)  # [forward][sample]: accepted_from (block: first unfilled)
    chunks: list[list[tuple[int, list[str], list[float]]]] = field(init=False)  # [sample]: forward, pieces, conf
    texts: list[str] = field(init=False)
    ids: list[list[int]] = field(init=False)
    finished_at: list[int | None] = field(init=False)  # [sample]: the forward in which it finished

    def __post_init__(self) -> None:
        """Empty per-sample records."""
        self.chunks = [[] for _ in range(self.size)]
        self.texts = [""] * self.size
        self.ids = [[] for _ in range(self.size)]
        self.finished_at = [None] * self.size

    def advance(self, timed: bool = True) -> None:
        """Run one forward of the whole batch (timing only this call, when `timed`: lanes.Turns) and record what each
        sample committed."""
        event = self.next_event(timed)
        if event is None:  # every sample done, or stopped
            return
        self.counts.append([len(ids) for ids in event.token_ids])
        self.starts.append(list(event.accepted_from))
        for i, (ids, conf, text) in enumerate(zip(event.token_ids, event.confidences, event.texts)):
            self.texts[i] += text
            self.ids[i] += ids
            if ids:
                self.chunks[i].append((event.forward, self.pieces(ids, text), conf))
            if event.done[i] and self.finished_at[i] is None:
                self.finished_at[i] = event.forward
        self.finished = all(event.done)

    def done(self) -> list[bool]:
        """Per sample: it has finished."""
        return [f is not None for f in self.finished_at]

    def waits(self, i: int) -> int:
        """Forwards in which sample i committed nothing before it finished: waiting at the block boundary."""
        end = self.finished_at[i]
        return sum(1 for f, counts in enumerate(self.counts) if counts[i] == 0 and (end is None or f <= end))

    def new_blocks(self) -> list[int]:
        """Forwards that start a new block: every sample's accepted_from is 0 again (after the first forward)."""
        # within a block every live sample has filled >= 1 slot after the block's first forward, so an
        # all-zero accepted_from happens exactly when filled was reset to 0 for the batch: a new block
        return [f for f, starts in enumerate(self.starts) if f > 0 and not any(starts)]

    def summary(self) -> dict:
        """Forwards, tokens, seconds and tokens/s of the batch, and per sample counts, texts and ids."""
        forwards, tokens = len(self.counts), sum(map(sum, self.counts))
        return {
            "forwards": forwards, "tokens": tokens, "seconds": self.own_seconds,
            "tokens_per_second": self.per_second(tokens),
            "counts": [list(c) for c in self.counts], "texts": list(self.texts), "ids": [list(i) for i in self.ids],
            "done": self.done(), "finished_at": list(self.finished_at),  # copies: a frame keeps its own state
        }


def row_label(index: int, prompt: str) -> str:
    """A chart row: "1: <first words of the prompt>"."""
    words = prompt.split()
    return f"{index + 1}: {' '.join(words[:LABEL_WORDS])}{'…' * (len(words) > LABEL_WORDS)}"


def same_as_ar(block: BatchRun | None, ar: BatchRun | None) -> list[bool]:
    """Per sample: the block answer equals the AR answer token for token."""
    if block is None or ar is None:
        return []
    return [b == a for b, a in zip(block.ids, ar.ids)]


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
        "MARS (block) tokens, by how many this sample's forward committed", f"{chip('0', WAIT_COLOUR)} (waiting at "
        "the block boundary) shows in the chart &nbsp;·&nbsp; grey text below = AR on the same batch",
        ";margin-bottom:6px")


def tokens_html(chunks: list[tuple[int, list[str], list[float]]]) -> str:
    """One sample's text, each forward's tokens on a background coloured by how many it committed."""
    spans = []
    for forward, pieces, conf in chunks:
        tip = f"forward {forward} · {len(conf)} token{'s' * (len(conf) > 1)} · confidence {min(conf):.2f}"
        spans += [f'<span class="tk {count_class(len(conf))}" title="{tip}">{html.escape(piece)}</span>'
                  for piece in pieces]
    return "".join(spans)


def cell_html(i: int, prompt: str, block: BatchRun | None, ar: BatchRun | None, same: bool | None) -> str:
    """One prompt's cell: the prompt, its block (MARS) text, its AR text, and a status line."""
    text = tokens_html(block.chunks[i]) if block else ""
    ar_text = html.escape(ar.texts[i]) if ar else ""
    empty = '<span style="color:#94a3b8">…</span>'
    parts = []
    for run in (block, ar):
        if run:
            state = "done" if run.finished_at[i] is not None else "running"
            wait = f", waited {run.waits(i)} forwards" if run is block else ""
            parts.append(f"{run.name}: {len(run.ids[i])} tokens{wait} · {state}")
    if same is not None:
        parts.append("same as AR ✓" if same else "differs from AR")
    box = "white-space:pre-wrap;line-height:1.9;max-height:220px;overflow-y:auto;padding:4px 6px;border-radius:6px"
    return (
        '<div style="border:1px solid #e2e8f0;border-radius:8px;padding:8px 10px;background:#fff;color:#0f172a">'
        f'<div style="color:#64748b;font-size:0.8em;margin-bottom:4px">{i + 1}. {html.escape(prompt)}</div>'
        f'<div style="font-size:0.75em;color:{MARS_COLOUR}">MARS (block)</div>'
        f'<div style="{box};font-size:14px">{text or empty}</div>'
        '<div style="font-size:0.75em;color:#64748b;margin-top:4px">AR</div>'
        f'<div style="{box};font-size:13px;color:#64748b;background:#f8fafc">{ar_text or empty}</div>'
        f'<div style="margin-top:6px;color:#64748b;font-size:0.8em">{html.escape(" · ".join(parts))}</div></div>'
    )


def panes_html(prompts: list[str], block: BatchRun | None = None, ar: BatchRun | None = None, note: str = "") -> str:
    """The grid of cells, one per prompt, under the colour legend."""
    notice = f'<div style="color:#64748b;padding:6px 2px">{html.escape(note)}</div>' if note else ""
    if not prompts:
        return legend_html() + (notice or '<div style="color:#94a3b8;padding:10px">(the batch streams here)</div>')
    both_done = bool(block and ar and all(block.done()) and all(ar.done()))
    same = same_as_ar(block, ar) if both_done else [None] * len(prompts)
    cells = "".join(cell_html(i, p, block, ar, s) for i, (p, s) in enumerate(zip(prompts, same)))
    grid = "display:grid;grid-template-columns:repeat(auto-fill,minmax(300px,1fr));gap:10px"
    return f'{legend_html()}{notice}<div class="mars-pane" style="{grid}">{cells}</div>'


def stats_markdown(
    block: BatchRun, ar: BatchRun, block_size: int, threshold: float, status: str, device: str = "CPU"
) -> str:
    """What is deterministic first (forwards, steps per forward, tokens per forward, same answers), then timings."""
    n, b, a = block.size, block.summary(), ar.summary()
    # steps per forward = forwards AR needed for the batch / forwards of the block batch
    steps = a["forwards"] / b["forwards"] if b["forwards"] else 0.0
    # tokens per forward per sample = tokens / (forwards x samples); "while advancing" leaves out the waits
    per_sample = b["tokens"] / max(b["forwards"] * n, 1)
    advancing = b["tokens"] / max(sum(1 for counts in block.counts for c in counts if c), 1)
    waits = sum(block.waits(i) for i in range(n))
    same = sum(same_as_ar(block, ar))
    so_far = "" if status == "done" else " (so far)"
    speed = b["tokens_per_second"] / a["tokens_per_second"] if a["tokens_per_second"] > 0 else 0.0
    return (
        f"**Block batch** (B = {block_size}, τ = {threshold:.2f}): {b['forwards']} forwards · {b['tokens']} tokens · "
        f"**{per_sample:.2f} tokens per forward per sample** ({advancing:.2f} while advancing) · "
        f"{waits} of {b['forwards'] * n} sample-forwards waiting at a block boundary  \n"
        f"**AR batch**: {a['forwards']} forwards · {a['tokens']} tokens · "
        f"{a['tokens'] / max(a['forwards'] * n, 1):.2f} tokens per forward per sample  \n"
        f"**{steps:.2f} steps per forward**{so_far} (AR forwards the batch needed / block forwards) · "
        f"**{same} of {n}** answers equal their AR answer token for token{so_far} · {status}  \n"
        f"Wall clock, a measurement on a shared {device} (each side timed by its own forwards only, the sides "
        f"taking turns to go first; a forward right after a page update counts as the side's typical one): block "
        f"{b['seconds']:.2f} s, {b['tokens_per_second']:.1f} tokens/s over the batch · AR {a['seconds']:.2f} s, "
        f"{a['tokens_per_second']:.1f} tokens/s · {speed:.2f}× in tokens/s"
    )


def trace(block: BatchRun | None, ar: BatchRun | None, status: str, message: str = "", **extra: Any) -> dict:
    """Per forward and per sample data of both batches (the JSON output; clients and tests read it)."""
    return {
        "status": status, "message": message, **extra,
        "block": {**block.summary(), "new_blocks": block.new_blocks()} if block else {},
        "ar": ar.summary() if ar else {},
        "same_as_ar": same_as_ar(block, ar),
    }


def placeholder(prompts: list[str], block_size: int, status: str, message: str = "", note: str = "") -> tuple:
    """Outputs before anything was decoded (waiting, stopped): empty cells and chart axes, the message line
    cleared."""
    labels = [row_label(i, p) for i, p in enumerate(prompts)]
    figure = slots_figure([], labels, block_size, [], [None] * len(prompts))
    note = note or message or status
    return panes_html(prompts, note=note), plotly_data(figure), note, "", trace(None, None, status, message)


def notice(status: str, message: str) -> tuple:
    """One message on the tab's message line (a value refused, preparing the model, a failure), everything else
    left as it is; the trace says it too (for API clients)."""
    return gr.skip(), gr.skip(), gr.skip(), message, trace(None, None, status, message)


def failure(message: str) -> tuple:
    """One message next to the controls instead of a batch (nothing runs, nothing on screen is wiped)."""
    return notice("error", warn(message))


def frame(
    prompts: list[str], block: BatchRun, ar: BatchRun, *, block_size: int, threshold: float, status: str,
    device: str, chart: bool = True,
) -> tuple:
    """One update of the tab: cells, slot chart (or gr.skip(): left as it is), stats and trace."""
    figure = slots_figure(block.counts, [row_label(i, p) for i, p in enumerate(prompts)], block_size,
                          block.new_blocks(), block.finished_at)
    return (
        panes_html(prompts, block, ar), plotly_data(figure) if chart else gr.skip(),
        stats_markdown(block, ar, block_size, threshold, status, device), "",
        trace(block, ar, status, prompts=prompts, block_size=block_size, threshold=threshold),
    )


def batch_race(
    prompts_text: str, threshold: float, block_size: int, max_new_tokens: int, session: BatchSession
) -> Iterator[tuple]:
    """Decode the prompts as one batch, block-cached MARS against AR, one forward each in turn; yield a frame each."""
    try:
        prompts = parse_prompts(prompts_text)
        _, tau, block_size, _, new = check_inputs(prompts[0], threshold, block_size, 0.0, max_new_tokens,
                                                  tab="batch")
    except ValueError as err:  # the user's input: a message, no run, no traceback
        yield failure(str(err))
        return
    controls = (DecodeControl(threshold=tau), DecodeControl(threshold=1.0))  # greedy both: block, AR
    session.controls = controls
    try:
        yield from models.in_a_slot(
            guarded(decode(prompts, tau, block_size, new, controls), failure, "Generation"),
            lambda: placeholder(prompts, block_size, "waiting", WAITING), lambda: any(c.stopped for c in controls),
            lambda: placeholder(prompts, block_size, "stopped"))
    finally:
        if session.controls is controls:
            session.controls = None


def decode(prompts: list[str], tau: float, block_size: int, new: int, controls: tuple) -> Iterator[tuple]:
    """The batch race itself, inside a generation slot: load, check, then alternate one forward of each batch. A
    ValueError is a message (a model that did not load, mars_core's checks: prompt too long for the context, …)."""
    for said in models.preparing([models.CONFIG.model], lambda: any(c.stopped for c in controls)):
        yield notice("preparing", said)
    model, tokenizer = models.get_model(models.CONFIG.model)
    check_request(model, tokenizer, [encode_prompt(tokenizer, p) for p in prompts], "block", block_size, new)
    runtime = models.get_runtime(models.CONFIG.model)
    block = BatchRun("MARS (block)", stream(model, tokenizer, prompts, strategy="block", block_size=block_size,
                                            max_new_tokens=new, control=controls[0], runtime=runtime),
                     tokenizer, len(prompts))
    ar = BatchRun("AR", stream(model, tokenizer, prompts, strategy="ar", max_new_tokens=new, control=controls[1],
                               runtime=runtime), tokenizer, len(prompts))
    device = model.device.type.upper()  # what the wall-clock line measured: CPU, CUDA, MPS
    throttle, turns = Throttle(), Turns()
    try:
        with models.TRACKER:
            while not (block.finished and ar.finished):
                for side in turns.order([block, ar]):
                    if not side.finished:
                        side.advance(turns.timed())
                stopped = any(c.stopped for c in controls)
                finished = block.finished and ar.finished
                status = "stopped" if stopped else ("done" if finished else "running")
                if throttle.due(sum(map(len, block.ids + ar.ids)), finished):
                    yield frame(prompts, block, ar, block_size=block_size, threshold=tau, status=status, device=device,
                                chart=throttle.charts)
                    turns.framed()
    finally:
        block.events.close()
        ar.events.close()


def build(demo: gr.Blocks) -> list[gr.Button]:
    """The Batch tab: the prompts, settings, the message line, the cells, the slot chart, stats and the trace, and
    their events; returns its Run button (enabled once the model is ready)."""
    session = gr.State(BatchSession())
    with gr.Tab("Batch"):
        gr.Markdown(
            "The paper's strategy for batches: the **block-level KV cache**. Generation is cut into blocks of B "
            "aligned slots; a sample that filled its block waits for the slowest before the batch moves on. Every "
            "prompt below is decoded in ONE batch, block-cached MARS against AR on the same batch, both streaming."
        )
        if models.CONFIG.engine != "torch":  # the app was launched with --engine llama.cpp: say where batches run
            gr.Markdown(f"This tab decodes on torch: the {models.CONFIG.engine} engine serves one sequence at a "
                        "time (batch 1), so the batch runs on the same checkpoint's torch model; the Race tab "
                        f"runs on {models.CONFIG.engine}.", elem_id="batch-engine")
        with gr.Row(equal_height=True):
            prompts = gr.Textbox("\n".join(EXAMPLES), label="Prompts (4 to 8, one per line)", lines=7, scale=5,
                                 max_length=TEXT_CHARS, elem_id="batch-prompts")
            run_button, stop_button = lanes.run_and_stop("batch", "Run batch")
        with gr.Row():
            tau, block, new = (slider(f"batch-{name}") for name in ("threshold", "block", "max-new"))
        message = gr.Markdown("", elem_id="batch-message")
        stats = gr.Markdown("Press **Run batch**.", elem_id="batch-stats")  # above the cells: in view on a laptop
        panes = gr.HTML(panes_html(EXAMPLES), label="batch", elem_id="batch-panes")
        labels = [row_label(i, p) for i, p in enumerate(EXAMPLES)]
        plot = gr.Plot(plotly_data(slots_figure([], labels, 4, [], [])), label="block slots", show_label=False,
                       elem_id="batch-plot")
        data = lanes.trace_json()
    lanes.wire(run_button, stop_button, handlers=(batch_race, stop_batch), inputs=[prompts, tau, block, new, session],
               outputs=[panes, plot, stats, message, data], api_names=("batch", "stop_batch"))
    return [run_button]
