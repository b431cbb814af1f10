"""MARS Studio's Gradio app: race MARS against one-token decoding, walk through the method, sweep the threshold.

The UI only: every token comes from mars_core. Run `python app.py [--model PATH_OR_ID] [--ar-model ...] [--port N]`;
`--engine llama.cpp [--llamacpp-weights bf16]` races on llama.cpp (pip install -e ".[llamacpp]").
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import threading

import gradio as gr

from studio import batch, engine, explorer, lanes, models, race, train, train_state, walkthrough
from studio.inputs import page_js
from studio.race_html import LANE_CSS, verified_guarantee

log = logging.getLogger("mars_studio")

CSS = (".gradio-container {max-width: 1400px !important; margin: 0 auto; min-width: 0 !important; width: 100%}"
       "#tagline h2{margin:0}#model-status p{margin:0}"
       # a phone: the settings Gradio groups in one row (a form) take a line each instead of running off the screen
       "@media (max-width: 640px){.gradio-container .form{flex-wrap:wrap}"
       ".gradio-container .form>*{min-width:100% !important}}"
       # wide content (a displayed equation, the sweep's table) scrolls inside its box rather than widening the page
       ".katex-display{overflow-x:auto;overflow-y:hidden;max-width:100%}#sweep-table{overflow-x:auto;max-width:100%}"
       + lanes.PANE_CSS + LANE_CSS)
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


TAGLINE = ("## MARS Studio <span style='font-size:0.6em;font-weight:normal'>one prompt, three decoders racing: AR, "
           "MARS at a threshold τ and MARS verified</span>")


def intro_markdown() -> str:
    """What the app shows and which models it serves (folded under the tagline)."""
    config = models.CONFIG
    ar = models.model_label(config.ar_model) if config.ar_model else "the same checkpoint, one token per forward"
    note = default_model_note() if not config.model else ""
    if engine.on_llamacpp():  # the race's engine; the other tabs decode the torch model
        note += (f" The race decodes on {engine.label()} (the same checkpoint as a GGUF, trees sized by llama.cpp's "
                 "own cost curve); the other tabs run it on torch.")
    return (
        "MARS lets an ordinary causal LM commit several tokens per forward: each forward reads the last real "
        "token plus B−1 mask tokens and keeps the predictions whose confidence reaches the threshold τ "
        "(τ = 1 is exactly one-token decoding). *Verified* MARS checks those predictions with the model's own "
        "in the next forward, so its answer is one-token decoding's ("
        f"{verified_guarantee(True)}, bit for bit, where the machine's forwards pass the width check that "
        "mars_core.prepare runs; the verified lane's title says whether this one did), in fewer forwards.  \n"
        f"MARS model: {models.model_label(config.model)} · AR baseline: {ar}.{note}"
    )


def model_status(buttons: int) -> tuple:
    """The page's line on the served models while they are prepared (hidden once ready), the timer that asks again
    each second (stopped once ready), and each of the `buttons` that run a model, enabled only once it is ready (a
    failed preparation enables them too: a Run then says why)."""
    text, ready = models.status_markdown()
    failed = "could not be prepared" in text or "on the first Run" in text
    return (gr.Markdown(text, visible=bool(text)), gr.Timer(active=not ready and not failed),
            *(gr.Button(interactive=ready or failed) for _ in range(buttons)))


def build_ui() -> gr.Blocks:
    """The whole app: a one-line header (the method folded under it) and the model's preparation, then the Race,
    Batch, Walkthrough and Explorer tabs (each builds its own layout and events), with a queue. Until the
    served models are ready the status line says what is being prepared and the Run buttons wait."""
    with gr.Blocks(title="MARS Studio") as demo:
        gr.Markdown(TAGLINE, elem_id="tagline")
        with gr.Accordion("What MARS is, and the model served", open=False, elem_id="intro"):
            gr.Markdown(intro_markdown())
        status = gr.Markdown(models.status_markdown()[0], elem_id="model-status")
        buttons = [button for tab in (race, batch, walkthrough, explorer, train) for button in tab.build(demo)]
        if models.PRELOADING and not models.status_markdown()[1]:
            for button in buttons:  # the page's first paint: Run waits for the model being prepared (poll enables)
                button.interactive = False
        timer = gr.Timer(1.0)
        for event in (demo.load, timer.tick):
            event(lambda: model_status(len(buttons)), None, [status, timer, *buttons], api_visibility="undocumented",
                  show_progress="hidden", queue=False)
    demo.queue(default_concurrency_limit=models.CONFIG.concurrency, max_size=64)
    return demo


def preload() -> None:
    """Prepare the served models, then the Train tab's base model (so a first Start draws its first point soon)."""
    models.preload()
    models.prepare_in_background(train_state.base_name())


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
    parser.add_argument("--engine", default=os.environ.get("MARS_ENGINE", "torch"),
                        help="what the race decodes on: torch (default) or llama.cpp (pip install -e \".[llamacpp]\")")
    parser.add_argument("--llamacpp-weights", default=os.environ.get("MARS_LLAMACPP_WEIGHTS", "bf16"),
                        help="llama.cpp's GGUF weight type: f32, bf16 (default) or q8_0 (written once, cached)")
    parser.add_argument("--llamacpp-threads", type=int, default=None, help="llama.cpp's threads (default: every core)")
    parser.add_argument("--llamacpp-invariant", action="store_true",
                        help="llama.cpp forwards at two rows or more: the verified lane is AR bit for bit (one kernel "
                             "path for every width), one-token decoding a width-2 forward per token")
    parser.add_argument("--static-shapes", action="store_true", default=os.environ.get("MARS_STATIC") == "1",
                        help="decode at a few fixed widths into a KV cache allocated once (CUDA graphs on a GPU; "
                             "docs/speed.md#static-shapes); default: the dynamic decoders, faster on a CPU")
    parser.add_argument("--concurrency", type=int, default=int(os.environ.get("MARS_CONCURRENCY", "4")),
                        help="generations served at once (the queue holds the rest)")
    parser.add_argument("--trainings", type=int, default=int(os.environ.get("MARS_TRAININGS", "1")),
                        help="Train tab runs at once, all visitors together (the others get a message)")
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
    if args.trainings < 0:
        parser.error("--trainings must be at least 0 (0: the Train tab refuses every run)")
    try:
        chosen = engine.check_engine(args.engine, args.llamacpp_weights.lower(), args.ar_model)
    except ValueError as err:
        parser.error(str(err))
    embedded = (None, "", "default")  # `default` names the embedded model: its recorded race and note are shown
    models.CONFIG = models.AppConfig(model=None if args.model in embedded else args.model,
                                     ar_model=None if args.ar_model in embedded else args.ar_model,
                                     concurrency=args.concurrency,
                                     dtype=None if args.dtype in (None, "auto") else args.dtype,
                                     engine=chosen, llamacpp_weights=args.llamacpp_weights.lower(),
                                     llamacpp_threads=args.llamacpp_threads,
                                     llamacpp_invariant=args.llamacpp_invariant, trainings=args.trainings,
                                     static=args.static_shapes)
    if args.record_example:
        print(f"recorded {race.record_example()}")
        return
    models.PRELOADING = not args.no_preload
    if not args.no_preload:
        threading.Thread(target=preload, name="preload", daemon=True).start()
    build_ui().launch(server_name=args.host, server_port=args.port, theme=THEME, css=CSS, js=page_js())


if __name__ == "__main__":
    main()
