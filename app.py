"""MARS Studio's Gradio app: race MARS against one-token decoding, walk through the method, sweep the threshold.

The UI only: every token comes from mars_core. Run `python app.py [--model PATH_OR_ID] [--ar-model ...] [--port N]`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import threading
from collections.abc import Callable

import gradio as gr
import pandas as pd

from mars_core.evaluation.prompts import prompt_categories, prompt_set
from mars_core.evaluation.sweep import SWEEP_COLUMNS
from studio import batch, explorer, lanes, models, race, walkthrough
from studio.charts import plotly_data
from studio.inputs import MAX_PROMPT_CHARS, page_js, slider, typed_js

log = logging.getLogger("mars_studio")

try:  # Hugging Face ZeroGPU: a GPU per call when the `spaces` package is there; a no-op everywhere else
    import spaces

    gpu: Callable = getattr(spaces, "GPU", None) or (lambda fn: fn)
except ImportError:
    gpu = lambda fn: fn  # noqa: E731

CSS = ".gradio-container {max-width: 1400px !important; margin: 0 auto}" + lanes.PANE_CSS
THEME = gr.themes.Soft(primary_hue="blue")


def default_model_note(report: str = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets",
                                                   "eval_smollm2_mars_b4.json")) -> str:
    """One line on the embedded model: its held-out tokens per forward at τ = 0.9 and in verified mode, read from
    the shipped eval (the verified figure only where the eval has verified rows)."""
    try:
        with open(report) as f:
            rows = {(r.get("strategy", "sliding"), r["threshold"], r["category"]): r for r in json.load(f)["rows"]}
        tpf = {c: rows[("sliding", 0.9, c)]["tokens_per_forward"] for c in ("all", "predictable")}
    except (OSError, KeyError, ValueError):
        return ""
    checked = [r["tokens_per_forward"] for (s, _, c), r in rows.items() if s == "verified" and c == "all"]
    verified = (f"; verified, {checked[0]:.2f} tokens per forward with the one-token answers" if checked else "")
    return (f" The embedded default is SmolLM2-135M with a MARS LoRA fine-tune (B = 4): at τ = 0.9 it commits "
            f"{tpf['all']:.2f} tokens per forward on held-out prompts ({tpf['predictable']:.2f} on predictable ones "
            f"such as lists and tables){verified}.")


def intro_markdown() -> str:
    """The header: what the app shows and which models it serves."""
    config = models.CONFIG
    ar = models.model_label(config.ar_model) if config.ar_model else "the same checkpoint, one token per forward"
    note = default_model_note() if not config.model else ""
    return (
        "# MARS Studio\n"
        "MARS lets an ordinary causal LM commit several tokens per forward: each forward reads the last real "
        "token plus B−1 mask tokens and keeps the predictions whose confidence reaches the threshold τ "
        "(τ = 1 is exactly one-token decoding). *Verified* MARS checks those predictions with the model's own "
        "in the next forward: AR's answer, in fewer forwards.  \n"
        f"MARS model: {models.model_label(config.model)} · AR baseline: {ar}.{note}"
    )


def build_ui() -> gr.Blocks:
    """The whole app: Race, Batch, Walkthrough and Threshold explorer tabs, with a queue."""
    with gr.Blocks(title="MARS Studio") as demo:
        gr.Markdown(intro_markdown())
        session = gr.State(race.new_session())
        with gr.Tab("Race"):
            with gr.Row(equal_height=True):
                prompt = gr.Textbox(race.DEFAULT_PROMPT, label="Prompt", lines=2, scale=5,
                                    placeholder="Ask something…", max_length=MAX_PROMPT_CHARS, elem_id="race-prompt")
                with gr.Column(scale=1, min_width=140):
                    run_button = gr.Button("Run", variant="primary", elem_id="race-run")
                    stop_button = gr.Button("Stop", variant="stop", elem_id="race-stop")
            gr.Examples([[p] for p, _ in race.EXAMPLES], inputs=prompt, label="Examples",
                        example_labels=[f"{label} · {p}" for p, label in race.EXAMPLES])
            with gr.Row():
                threshold, block, temperature, max_new = (slider(f"race-{name}") for name in
                                                          ("threshold", "block", "temperature", "max-new"))
                adapt = gr.Checkbox(value=False, label="Adapt to load",
                                    info="τ drops 0.05 per extra concurrent run, down to 0.5")
            gr.HTML(race.legend_html())
            panes = []
            with gr.Row():
                for key, title in (("ar", "**AR** · one token per forward"),
                                   ("mars", "**MARS τ** · mask predictions accepted while confidence ≥ τ"),
                                   ("verified", "**MARS verified** · drafts checked by the model: AR's answer")):
                    with gr.Column(min_width=260):
                        gr.Markdown(title)
                        panes.append(gr.HTML(race.pane_html(None), label=f"{key} text", elem_id=f"{key}-pane",
                                             **race.PANE))
            stats = gr.Markdown("Press **Run**: the three lanes stream at the same time.", label="stats",
                                elem_id="race-stats")
            with gr.Row():
                forwards_plot = gr.Plot(plotly_data(race.forwards_figure({}, 4)), label="tokens per forward",
                                        show_label=False, elem_id="forwards-plot")
                time_plot = gr.Plot(plotly_data(race.time_figure({})), label="tokens against time",
                                    show_label=False, elem_id="time-plot")
            gr.Markdown(
                "<small>The lanes share this machine's CPU: the app advances them in turn, one forward each, and "
                "times each by its own forwards only, so none is charged for another's work. MARS verified checks "
                "the mask slots' drafts (and, where the text repeats itself, prompt-lookup drafts) with the model's "
                "own next-token predictions in the same forward that proposes the next drafts: every token is the "
                "one AR picks, several per forward when the drafts are right.</small>"
            )
            with gr.Accordion("Per-forward data (JSON)", open=False):
                data = gr.JSON(label="trace", show_label=False)
        with gr.Tab("Batch"):
            gr.Markdown(
                "The paper's strategy for batches: the **block-level KV cache**. Generation is cut into blocks of B "
                "aligned slots; a sample that filled its block waits for the slowest before the batch moves on. Every "
                "prompt below is decoded in ONE batch, block-cached MARS against AR on the same batch, both streaming."
            )
            with gr.Row(equal_height=True):
                batch_prompts = gr.Textbox("\n".join(batch.EXAMPLES), label="Prompts (4 to 8, one per line)", lines=7,
                                           scale=5, max_length=batch.TEXT_CHARS, elem_id="batch-prompts")
                with gr.Column(scale=1, min_width=140):
                    batch_run = gr.Button("Run batch", variant="primary", elem_id="batch-run")
                    batch_stop = gr.Button("Stop", variant="stop", elem_id="batch-stop")
            with gr.Row():
                batch_tau, batch_block, batch_new = (slider(f"batch-{name}") for name in ("threshold", "block",
                                                                                           "max-new"))
            batch_panes = gr.HTML(batch.panes_html(batch.EXAMPLES), label="batch", elem_id="batch-panes")
            batch_stats = gr.Markdown("Press **Run batch**.", elem_id="batch-stats")
            batch_plot = gr.Plot(plotly_data(batch.slots_figure([], [batch.row_label(i, p) for i, p in
                                                                     enumerate(batch.EXAMPLES)], 4, [], [])),
                                 label="block slots", show_label=False, elem_id="batch-plot")
            with gr.Accordion("Per-forward data (JSON)", open=False):
                batch_data = gr.JSON(label="trace", show_label=False)
        with gr.Tab("Walkthrough"):
            gr.Markdown("### Training: one forward over [noisy | clean]")
            with gr.Row():
                mask_n = gr.Slider(2, 16, value=8, step=1, label="Response tokens n")
                mask_b = gr.Slider(1, 8, value=4, step=1, label="Block size B")
            mask_plot = gr.Plot(walkthrough.mask_figure(8, 4), label="attention mask", show_label=False)
            gr.Markdown(walkthrough.LOSS_MARKDOWN, latex_delimiters=[
                {"left": "$$", "right": "$$", "display": True}, {"left": "$", "right": "$", "display": False}])
            gr.Markdown("### Decoding, one forward at a time")
            with gr.Row(equal_height=True):
                walk_prompt = gr.Textbox(walkthrough.DEFAULT_PROMPT, label="Prompt", scale=3,
                                         max_length=MAX_PROMPT_CHARS)
                walk_tau, walk_block, walk_new = (slider(f"walk-{name}") for name in ("threshold", "block", "max-new"))
            with gr.Row():
                decode_button = gr.Button("Decode", variant="primary")
                prev_button = gr.Button("◀ Previous forward")
                next_button = gr.Button("Next forward ▶")
            walk = gr.State({"steps": [], "index": 0})
            walk_view = gr.HTML(walkthrough.step_html({"steps": [], "index": 0}), label="forward")
        with gr.Tab("Threshold explorer"):
            gr.Markdown(
                "Decode the held-out prompts (never trained on; the built-in set when the data is absent) at "
                "several thresholds, greedy, one prompt at a time. Quality is agreement with the τ = 1 answer: "
                "the shared-prefix fraction of tokens (1 = the same answer). In verified mode the threshold only "
                "chooses which drafts are checked: quality stays 1 and tokens per forward moves."
            )
            with gr.Row():
                sweep_mode = gr.Radio(list(explorer.MODES), value="threshold mode", label="Mode", scale=1)
                sweep_taus = gr.Textbox("1, 0.9, 0.7, 0.5", label="Thresholds", scale=2)
                sweep_block, sweep_new = slider("sweep-block"), slider("sweep-max-new")
            cats, pool = prompt_categories(), len(prompt_set())
            with gr.Row():
                sweep_cats = gr.CheckboxGroup(cats, value=cats, label="Prompt categories", scale=3)
                sweep_limit = slider("sweep-limit", maximum=pool, value=min(9, pool), scale=1)
            sweep_plan = gr.Markdown(elem_id="sweep-plan")
            sweep_button = gr.Button("Run sweep", variant="primary", elem_id="sweep-run")
            sweep_status = gr.Markdown(label="status", elem_id="sweep-status")
            pareto = gr.Plot(label="pareto", show_label=False)
            table = gr.Dataframe(pd.DataFrame(columns=list(SWEEP_COLUMNS)), label="Results", interactive=False)
            csv_file = gr.File(label="CSV")

        outputs = [*panes, forwards_plot, time_plot, stats, data]
        demo.load(race.example_outputs, None, outputs, api_visibility="undocumented", show_progress="hidden")
        # No Gradio concurrency limit: the race takes an app-wide generation slot itself (models.slots), so it
        # exists from the moment it is submitted, and a /set_threshold sent with it is not lost.
        race_inputs = [prompt, threshold, block, temperature, max_new, adapt, session]
        run_button.click(gpu(race.race), race_inputs, outputs, api_name="race", show_progress="minimal",
                         concurrency_limit=None, js=typed_js(race_inputs, True))
        quick = dict(concurrency_limit=None, show_progress="hidden", queue=True)
        # Stop ends the lanes from inside (their controls): Gradio's `cancels` would mark every output as an error
        stop_button.click(race.stop, session, None, api_name="stop", **quick)
        threshold.change(race.set_threshold, [threshold, session], None, api_name="set_threshold",
                         js=typed_js([threshold], False), **quick)
        adapt.change(race.set_adapt, [adapt, session], None, api_name="set_adapt", **quick)
        batch_inputs = [batch_prompts, batch_tau, batch_block, batch_new, session]
        batch_run.click(gpu(batch.batch_race), batch_inputs, [batch_panes, batch_plot, batch_stats, batch_data],
                        api_name="batch", show_progress="minimal", concurrency_limit=None,
                        js=typed_js(batch_inputs, True))
        batch_stop.click(batch.stop_batch, session, None, api_name="stop_batch", **quick)
        gr.on([mask_n.change, mask_b.change], walkthrough.mask_figure, [mask_n, mask_b], mask_plot, api_name="mask",
              show_progress="hidden")
        walk_inputs = [walk_prompt, walk_tau, walk_block, walk_new]
        decode_button.click(gpu(walkthrough.walk_steps), walk_inputs, [walk_view, walk], api_name="walkthrough",
                            js=typed_js(walk_inputs, True))
        hidden = dict(api_visibility="undocumented", **quick)
        prev_button.click(lambda w: walkthrough.walk_move(w, -1), walk, [walk_view, walk], **hidden)
        next_button.click(lambda w: walkthrough.walk_move(w, 1), walk, [walk_view, walk], **hidden)
        sweep_inputs = [sweep_taus, sweep_block, sweep_new, sweep_cats, sweep_limit, sweep_mode]
        sweep_button.click(gpu(explorer.sweep), sweep_inputs, [pareto, table, csv_file, sweep_status],
                           api_name="sweep", show_progress_on=pareto,
                           js=typed_js(sweep_inputs, True))
        gr.on([c.change for c in sweep_inputs] + [demo.load], explorer.plan, sweep_inputs, sweep_plan,
              api_visibility="undocumented", show_progress="hidden", queue=False)
    demo.queue(default_concurrency_limit=models.CONFIG.concurrency, max_size=64)
    return demo


def preload() -> None:
    """Load the served models in the background so the first Run does not wait (failures show on Run)."""
    for name in {models.CONFIG.model, models.CONFIG.ar_model or models.CONFIG.model}:
        try:
            models.get_model(name)
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
    parser.add_argument("--dtype", default=os.environ.get("MARS_DTYPE"), choices=["auto", "bf16", "fp32"],
                        help="weights' dtype (default auto: bf16 where the CPU/GPU runs it fast; fp32: verified lanes "
                             "then equal AR token for token, no bf16 rounding)")
    parser.add_argument("--concurrency", type=int, default=int(os.environ.get("MARS_CONCURRENCY", "4")),
                        help="generations served at once (the queue holds the rest)")
    parser.add_argument("--no-preload", action="store_true", help="load the models on the first request only")
    parser.add_argument("--record-example", action="store_true",
                        help="race the default prompt and save it (assets/race_example.json) as the page's first "
                             "content, then exit")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    for name in (args.model, args.ar_model):
        try:
            models.check_model_choice(name)
        except ValueError as err:
            parser.error(str(err))
    if args.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    models.CONFIG = models.AppConfig(model=args.model or None, ar_model=args.ar_model or None,
                                     concurrency=args.concurrency,
                                     dtype=None if args.dtype in (None, "auto") else args.dtype)
    if args.record_example:
        print(f"recorded {race.record_example()}")
        return
    if not args.no_preload:
        threading.Thread(target=preload, name="preload", daemon=True).start()
    build_ui().launch(server_name=args.host, server_port=args.port, theme=THEME, css=CSS, js=page_js())


if __name__ == "__main__":
    main()
