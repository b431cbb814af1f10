"""The Train tab: watch MARS learn. Pick a small corpus (or paste text), B and a budget, press Start: mars_core's own
MarsTrainer fine-tunes a LoRA on a copy of the base model while the page draws the AR loss and each mask slot's loss
falling and held-out tokens per forward rising; then race the trained model against the same model before training."""

from __future__ import annotations

import gradio as gr

from mars_core.training.corpora import CORPORA, DEFAULT_CORPUS, MAX_PASTED_CHARS, PASTED
from studio import models
from studio.charts import plotly_data
from studio.inputs import slider, typed_js, unchecked
from studio.lanes import QUICK
from studio.race.html import legend_html, pane_html
from studio.race.state import LANE_NAMES, LANES
from studio.train.figures import loss_figure, progress_html, speed_figure
from studio.train.loop import SIDES, race, replay, train, watch
from studio.train.state import TrainSession

WATCH_SECONDS = 2.0  # how often a visitor's Train tab asks for another visitor's training


def intro() -> str:
    """What the tab does, naming the model a training starts from."""
    base = ("the embedded SmolLM2-135M-Instruct *without* its shipped MARS adapter" if models.CONFIG.model is None
            else f"the served model, {models.model_label(models.CONFIG.model)}")
    return (
        "MARS is continued training, no new heads: the model learns to fill B−1 **mask slots** after the last real "
        "token, so one forward can commit several tokens. Press **Start**: a LoRA is fine-tuned live on a copy of "
        f"{base} with mars_core's own `MarsTrainer`. Watch the AR loss stay low while each mask slot's loss falls "
        "(slot 1, the token after next, learns first), and the held-out tokens per forward rise. The held-out items "
        "are prompts of the corpus that training never sees. Then race what was trained against the same model before "
        "training.")


def stop(session: TrainSession) -> None:
    """The Stop button: the training ends at its next step (what it learned is kept, and can be raced), a race at its
    next forward."""
    session.stop_all()


def corpus_note(corpus: str) -> str:
    """One line on the chosen corpus."""
    if corpus == PASTED:
        return (f"Your text, cut into passages (prompt: continue from its first words; answer: the rest); the last "
                f"passages are held out. Up to {MAX_PASTED_CHARS:,} characters.")
    return f"*{corpus}*: {CORPORA[corpus].about}." if corpus in CORPORA else ""


def build(demo: gr.Blocks) -> list[gr.Button]:
    """The Train tab, compact so the charts are on the first screen: the introduction folded, the corpus, B and the
    budget in one row with Start, Stop and Replay, the progress and both live charts; then the metrics and the race
    of the trained model against its base. A timer shows another visitor's training live (train_loop.watch).
    Returns no button to hold until the served model is ready: a training prepares its own base model
    (models.preparing says so on the status line)."""
    session = gr.State(TrainSession())
    with gr.Tab("Train", elem_id="train-tab"):
        with gr.Accordion("How MARS learns, and what this tab does", open=False, elem_id="train-intro"):
            gr.Markdown(intro())
        with gr.Row(equal_height=True):
            with gr.Column(scale=4, min_width=300):
                corpus = unchecked(gr.Radio([*CORPORA, PASTED], value=DEFAULT_CORPUS, label="What to learn",
                                            elem_id="train-corpus"))
                note = gr.Markdown(corpus_note(DEFAULT_CORPUS), elem_id="train-corpus-note")
                pasted = gr.Textbox("", label="Text to learn", lines=3, max_length=MAX_PASTED_CHARS, visible=False,
                                    elem_id="train-text")
            with gr.Column(scale=6, min_width=300):
                with gr.Row():
                    block, steps, minutes = (slider(f"train-{name}", min_width=150)
                                             for name in ("block", "steps", "minutes"))
            with gr.Column(scale=1, min_width=120):
                start_button = gr.Button("Start", variant="primary", elem_id="train-run")
                stop_button = gr.Button("Stop", variant="stop", elem_id="train-stop")
                replay_button = gr.Button("Replay", elem_id="train-replay")
        message = gr.Markdown("", elem_id="train-message")
        bar = gr.HTML(progress_html(0, 1, 0, 1), elem_id="train-progress", padding=False)
        status = gr.Markdown("Press **Start** (the default: counting, B = 4, 3 minutes at most), or **Replay** to "
                             "watch a recorded training.", elem_id="train-status")
        with gr.Row():
            losses = gr.Plot(plotly_data(loss_figure([])), show_label=False, elem_id="train-loss-plot")
            speeds = gr.Plot(plotly_data(speed_figure([])), show_label=False, elem_id="train-speed-plot")
        with gr.Accordion("Metrics (JSON)", open=False):
            metrics = gr.JSON(label="metrics", show_label=False)
        gr.Markdown("### Race what was trained\nThe same model before training (top) and after (bottom), each as AR, "
                    "MARS at τ = 0.9 and MARS verified, on a held-out prompt of the corpus.")
        with gr.Row(equal_height=True):
            with gr.Column(scale=4, min_width=300):
                prompt = gr.Dropdown([], label="Held-out prompt (never trained on)", allow_custom_value=True,
                                     elem_id="train-race-prompt")
            with gr.Column(scale=1, min_width=120):
                race_button = gr.Button("Race", variant="primary", elem_id="train-race")
        summary = gr.Markdown("", elem_id="train-race-summary")
        panes = []
        for side in SIDES:
            gr.Markdown(f"**{'Before training' if side == 'before' else 'After training'}**")
            with gr.Row():
                for key in LANES:
                    with gr.Column(min_width=280):
                        # untitled until a race: the verified lane's title depends on that model's width check
                        panes.append(gr.HTML(pane_html(None, f"{LANE_NAMES[key]}: train, then press Race"),
                                             elem_id=f"train-{side}-{key}", padding=False))
        gr.HTML(legend_html())
    inputs = [corpus, pasted, block, steps, minutes, session]
    shown = [losses, speeds, status, bar, metrics, prompt, message]
    start_button.click(train, inputs, shown, api_name="train", show_progress="minimal", concurrency_limit=None,
                       js=typed_js(inputs, True))
    stop_button.click(stop, session, None, api_name="train_stop", **QUICK)
    replay_button.click(replay, session, [*shown, *panes, summary], api_name="train_replay",
                        show_progress="minimal", concurrency_limit=None)
    race_button.click(race, [prompt, session], [*panes, summary], api_name="train_race", show_progress="minimal",
                      concurrency_limit=None)
    gr.Timer(WATCH_SECONDS).tick(watch, session, shown, api_name="train_watch", show_progress="hidden", queue=False)
    corpus.change(lambda c: (corpus_note(c), gr.Textbox(visible=c == PASTED)), corpus, [note, pasted],
                  api_visibility="undocumented", show_progress="hidden", queue=False)
    return []
