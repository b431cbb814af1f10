"""MARS Studio's Gradio app: race MARS against one-token decoding, walk through the method, sweep the threshold.

The UI only: every token comes from mars_core. Run `python app.py [--model PATH_OR_ID] [--ar-model ...] [--port N]`;
`--engine llama.cpp [--llamacpp-weights bf16]` races on llama.cpp (pip install -e ".[llamacpp]").
"""

from __future__ import annotations

import logging
import sys
import threading

import gradio as gr

from studio import cli, explorer, models
from studio.batch import tab as batch
from studio.inputs import page_js
from studio.page import CSS, TAGLINE, THEME, default_model_note, intro_markdown  # noqa: F401 - the page's frame
from studio.race import tab as race
from studio.train import loop as train_loop
from studio.train import tab as train
from studio.walkthrough import tab as walkthrough

log = logging.getLogger("mars_studio")


def model_status(buttons: int) -> tuple:
    """The page's line on the served models while they are prepared (hidden once ready), the timer that asks again
    each second (stopped once ready), and each of the `buttons` that run a model, enabled only once it is ready (a
    failed preparation enables them too: a Run then says why)."""
    text, ready = models.status_markdown()
    failed = "could not be prepared" in text or "on the first Run" in text
    waiting = (not ready and not failed) or bool(models.COMPILING or models.BACKGROUND)  # and while they run
    return (gr.Markdown(text, visible=bool(text)), gr.Timer(active=waiting),
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
    """Prepare the served models, then the Train tab's base model and its step-0 probe (so a first Start draws its
    first point at once)."""
    models.preload()
    train_loop.preload()


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and serve the app."""
    parser = cli.build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    models.CONFIG = cli.app_config(parser, args)
    sys.setswitchinterval(models.SWITCH_SECONDS)  # races keep their pace beside Python-bound work (the compile)
    if args.record_example:
        print(f"recorded {race.record_example()}")
        return
    models.PRELOADING = not args.no_preload
    if not args.no_preload:
        threading.Thread(target=preload, name="preload", daemon=True).start()
    build_ui().launch(server_name=args.host, server_port=args.port, theme=THEME, css=CSS, js=page_js())


if __name__ == "__main__":
    main()
