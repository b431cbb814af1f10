"""The Batch tab: 4 to 8 prompts decoded as one batch by the block-cached MARS decoder (the paper's batch strategy)
and by verified MARS (ours: each sample's answer is its one-token answer), against AR on the same batch.

The block decoder cuts generation into blocks of B slots aligned across the batch: a sample that filled its block
commits nothing (it waits) until the slowest sample has filled its block too. The tab shows where that happens: per
sample and forward, how many tokens were committed (0 = waiting at the block boundary). Verified decoding has no
blocks: each sample commits its accepted drafts every forward, and its answer is AR's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gradio as gr

from mars_core import DecodeControl, stream
from mars_core.decoding.strategies import default_threshold
from mars_core.decoding.verified import one_token_only, tree_price
from mars_core.generate import check_request, encode_prompt
from studio import lanes, models
from studio.batch.html import panes_html, row_label, same_as_ar, slots_figure, stats_markdown
from studio.batch.state import MAX_PROMPTS, BatchRun, BatchSession, parse_prompts, stop_batch
from studio.charts import plotly_data
from studio.inputs import MAX_PROMPT_CHARS, cap, check_inputs, slider, warn
from studio.lanes import Throttle, Turns, guarded
from studio.models import WAITING

EXAMPLES = [  # fast (lists, counting, a table) and slow (open questions): the fast ones wait at block boundaries
    "List three colours.",
    "List the planets of the solar system.",
    "Write the numbers from 1 to 10 separated by commas.",
    "Make a table with two columns, number and its square, for 1 to 4.",
    "Why is the sky blue? Answer in one sentence.",
    "Why do people like to travel? Answer in one sentence.",
]
MAX_NEW_TOKENS = cap("batch-max-new")  # per sample (inputs.INPUTS)
TEXT_CHARS = MAX_PROMPTS * (MAX_PROMPT_CHARS + 1)  # longest prompts text the tab accepts (a Textbox max_length)


def trace(block: BatchRun | None, ar: BatchRun | None, status: str, message: str = "",
          verified: BatchRun | None = None, **extra: Any) -> dict:
    """Per forward and per sample data of the three batches (the JSON output; clients and tests read it)."""
    return {
        "status": status, "message": message, **extra,
        "block": {**block.summary(), "new_blocks": block.new_blocks()} if block else {},
        "ar": ar.summary() if ar else {},
        "verified": verified.summary() if verified else {},
        "same_as_ar": same_as_ar(block, ar),
        "verified_same_as_ar": same_as_ar(verified, ar),
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


def one_token_here(runtime: Any, samples: int, block_size: int) -> str:
    """Why the verified batch decodes one token a forward on this machine, where it does (no tree pays at this batch
    size on the runtime's cost curve: plan.one_token_only, the rule its decoder follows); else ""."""
    if runtime is None or not one_token_only(runtime.cost, samples, block_size):
        return ""
    price = tree_price(runtime.cost, samples, block_size - 1)
    return (f"Here a forward of {samples} samples that checks a draft and hangs the next {block_size - 1} masks each "
            f"costs {price:.1f}× a one-token forward (the cost curve timed on this machine), more than such a tree "
            "commits: verified decodes one token a forward here, AR's forwards and AR's answers.")


def frame(
    prompts: list[str], block: BatchRun, ar: BatchRun, verified: BatchRun, *, block_size: int, threshold: float,
    status: str, device: str, chart: bool = True, why: str = "",
) -> tuple:
    """One update of the tab: cells, slot chart (or gr.skip(): left as it is), stats (why: one_token_here's note)
    and trace."""
    figure = slots_figure(block.counts, [row_label(i, p) for i, p in enumerate(prompts)], block_size,
                          block.new_blocks(), block.finished_at)
    return (
        panes_html(prompts, block, ar, verified), plotly_data(figure) if chart else gr.skip(),
        stats_markdown(block, ar, verified, block_size, threshold=threshold, status=status, device=device, why=why),
        "", trace(block, ar, status, verified=verified, prompts=prompts, block_size=block_size, threshold=threshold,
                  one_token_here=why),
    )


def batch_race(
    prompts_text: str, threshold: float, block_size: int, max_new_tokens: int, session: BatchSession
) -> Iterator[tuple]:
    """Decode the prompts as one batch, block-cached and verified MARS against AR, one forward each in turn; yield a
    frame each."""
    try:
        prompts = parse_prompts(prompts_text)
        _, tau, block_size, _, new = check_inputs(prompts[0], threshold, block_size, 0.0, max_new_tokens,
                                                  tab="batch")
    except ValueError as err:  # the user's input: a message, no run, no traceback
        yield failure(str(err))
        return
    controls = (DecodeControl(threshold=tau), DecodeControl(threshold=1.0),  # greedy all: block, AR, verified
                DecodeControl(threshold=default_threshold("verified")))
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
    """The batch race itself, inside a generation slot: load, check, then one forward of each batch in turn. A
    ValueError is a message (a model that did not load, mars_core's checks: prompt too long for the context, …)."""
    for said in models.preparing([models.CONFIG.model], lambda: any(c.stopped for c in controls)):
        yield notice("preparing", said)
    if any(c.stopped for c in controls):  # Stop while the model prepares: no wait for it, its slot given back
        yield placeholder(prompts, block_size, "stopped")
        return
    model, tokenizer = models.get_model(models.CONFIG.model)
    check_request(model, tokenizer, [encode_prompt(tokenizer, p) for p in prompts], "block", block_size, new)
    runtime = models.get_runtime(models.CONFIG.model)
    block = BatchRun("MARS (block)", stream(model, tokenizer, prompts, strategy="block", block_size=block_size,
                                            max_new_tokens=new, control=controls[0], runtime=runtime),
                     tokenizer, len(prompts))
    ar = BatchRun("AR", stream(model, tokenizer, prompts, strategy="ar", max_new_tokens=new, control=controls[1],
                               runtime=runtime), tokenizer, len(prompts))
    verified = BatchRun("MARS verified", stream(model, tokenizer, prompts, strategy="verified", block_size=block_size,
                                                max_new_tokens=new, control=controls[2], runtime=runtime),
                        tokenizer, len(prompts))
    sides = [block, ar, verified]
    why = one_token_here(runtime, len(prompts), block_size)
    device = model.device.type.upper()  # what the wall-clock line measured: CPU, CUDA, MPS
    throttle, turns = Throttle(), Turns()
    try:
        with models.TRACKER:
            while not all(side.finished for side in sides):
                for side in turns.order(sides):
                    if not side.finished:
                        side.advance(turns)
                stopped = any(c.stopped for c in controls)
                finished = all(side.finished for side in sides)
                status = "stopped" if stopped else ("done" if finished else "running")
                if throttle.due(sum(len(ids) for side in sides for ids in side.ids), finished):
                    turns.drawing()
                    yield frame(prompts, block, ar, verified, block_size=block_size, threshold=tau, status=status,
                                device=device, chart=throttle.charts, why=why)
                    turns.framed()
    finally:
        for side in sides:
            side.events.close()


def build(demo: gr.Blocks) -> list[gr.Button]:
    """The Batch tab: the prompts, settings, the message line, the cells, the slot chart, stats and the trace, and
    their events; returns its Run button (enabled once the model is ready)."""
    session = gr.State(BatchSession())
    with gr.Tab("Batch"):
        gr.Markdown(
            "The paper's strategy for batches: the **block-level KV cache**. Generation is cut into blocks of B "
            "aligned slots; a sample that filled its block waits for the slowest before the batch moves on. Ours: "
            "**verified MARS**, no blocks, each sample's answer exactly its AR answer. Every prompt below is decoded "
            "in ONE batch by each, against AR on the same batch, all streaming."
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
