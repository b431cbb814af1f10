"""The Race tab: the layout and its events (the race itself: race.loop; what a race keeps: race.state; its panes
and stats: race.html; its charts: race.figures), the handlers of its switches, and the recorded race the page
opens on (python app.py --record-example)."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from pathlib import Path

import gradio as gr
import torch

from mars_core.machine import cpu_name
from studio import lanes, models
from studio.charts import plotly_data
from studio.inputs import INPUTS, MAX_PROMPT_CHARS, check, slider, typed_js, warn
from studio.lanes import QUICK
from studio.race.figures import acceptance_figure, forwards_figure, time_figure
from studio.race.html import legend_html, pane_html, verified_guarantee
from studio.race.loop import frame, lane_controls, placeholder, race, run_race
from studio.race.state import LANE_NAMES, LANES, RaceSession, Run

# (prompt, what it shows): the first, a held-out prompt, is what the page opens on (its recorded race): the embedded
# model there is typical of held-out prompts (tokens per forward near its held-out means, the same answer in every
# lane); the last is the case where threshold mode goes wrong, labelled so: it teaches what τ trades away
EXAMPLES = [
    ("Put this in a table with columns Fruit and Price: lemon costs $8, peach costs $6, mango costs $4.",
     "typical: a table (the race the page opens on)"),
    ("Name 7 countries, as a numbered list.", "a list: MARS gains much"),
    ("What is 26 + 40? Show your work step by step.", "step by step: long, MARS τ departs late"),
    ("Explain in two sentences what a volcano is.", "open explanation: MARS τ gains little"),
    ("List the numbers from 1 to 15, separated by commas.",
     "where threshold mode goes wrong: a confident mask-slot guess changes the answer at its 2nd token"),
]
DEFAULT_PROMPT = EXAMPLES[0][0]
# The race's sliders (inputs.INPUTS): field -> (minimum, maximum, step, default)
SLIDERS = {name: (i.low, i.high, i.step, i.value) for name, i in (
    ("threshold", INPUTS["race-threshold"]), ("block size", INPUTS["race-block"]),
    ("temperature", INPUTS["race-temperature"]), ("max new tokens", INPUTS["race-max-new"]))}
EXAMPLE_FILE = Path(__file__).resolve().parents[2] / "assets" / "race_example.json"  # python app.py --record-example


# ----------------------------------------------------------------------------- the switches


def set_threshold(threshold: float | None, session: RaceSession) -> str:
    """Slider change (or /set_threshold): the running MARS generation uses it from its next forward; sent with a
    race or after it, the newest value wins. Returns the race's message line: a value out of range gets its one
    message there (no toast, no traceback, nothing else touched), a good one clears it; None (the page's word for a
    value still being typed, see typed_js) changes nothing and says nothing."""
    if threshold is None:
        return gr.skip()
    try:
        tau = check("race-threshold", threshold)
    except ValueError as err:
        return warn(str(err))
    session.threshold, session.threshold_at = tau, time.monotonic()
    session.apply_threshold()
    return ""


def set_adapt(adapt: bool, session: RaceSession) -> None:
    """"Adapt to load" switch: on or off for the running generation too."""
    session.adapt = bool(adapt)
    session.apply_threshold()


def stop(session: RaceSession) -> None:
    """Stop button: every lane ends before its next forward; the race then shows what it has, status "stopped"."""
    for control in session.running():
        control.stop()


# ----------------------------------------------------------------------------- the recorded example


# a replay's footers carry the recording's label, not a live lane's "done" (answered)
LANE_STATE = [f.name for f in dataclasses.fields(Run) if f.name not in ("name", "events", "tokenizer", "answered")]


def record_example(path: Path = EXAMPLE_FILE) -> Path:
    """Race the default prompt with the served model at the default settings, once its forward is ready (compiled
    where it compiles) and warmed by a race untimed, and save every lane: what the page shows before a visitor
    presses Run (labelled as recorded, with when, where and on what forward, and whether it was exact)."""
    tau, block, _, new = (SLIDERS[k][3] for k in ("threshold", "block size", "temperature", "max new tokens"))
    models.get_model(models.CONFIG.model)  # loaded, its compile started (where it compiles)
    models.wait_compiled(models.CONFIG.model)
    keep: dict = {}
    for into in ({}, keep):  # a race to warm the forward, then the one kept
        for _ in run_race(DEFAULT_PROMPT, block, new, lane_controls(tau), RaceSession(threshold=tau), keep=into):
            pass
    recorded = {key: {name: getattr(keep[key], name) for name in LANE_STATE} for key in LANES}
    record = {"prompt": DEFAULT_PROMPT, "threshold": tau, "block_size": block, "max_new_tokens": new,
              "model": models.model_label(models.CONFIG.model), "dtype": keep["dtype"], "exact": keep["exact"],
              "machine": f"{cpu_name()}, {torch.get_num_threads()} threads",
              "forward": recorded_forward(models.forward_note(models.CONFIG.model)),
              "recorded": time.strftime("%Y-%m-%d"),
              "summary": {key: {**keep[key].summary(), "same_as_ar": keep[key].ids == keep["ar"].ids} for key in LANES},
              "lanes": recorded}
    path.write_text(json.dumps(record, ensure_ascii=False))
    return path


def recorded_forward(note: str) -> str:
    """The forward that served a recording, as its small print says it: the note without how long that process took
    to compile it (a fact of the start, not of the race's timings)."""
    return re.sub(r" \((?:kept artifacts|compiled) in \d+ s\)", "", note)


def example_outputs(path: Path = EXAMPLE_FILE) -> tuple:
    """The recorded race as the page's first content (the default model on torch only: a recording of another model
    or engine would not be true of the one served), else empty axes."""
    if models.CONFIG.model is not None or models.CONFIG.engine != "torch" or not path.is_file():
        return placeholder("ready", "Press Run: the three lanes stream at the same time.")
    record = json.loads(path.read_text())
    runs = {key: Run(LANE_NAMES[key], iter(()), None, **lane) for key, lane in record["lanes"].items()}
    machine = f"{record['machine']}, {record['dtype']}"
    forward = f"; forward {record['forward']}" if record.get("forward") else ""  # older recordings do not say
    status = f"recorded on {record['recorded']} ({machine}): press Run to race live"
    return frame(runs, RaceSession(threshold=record["threshold"]), record["block_size"], status, done=True,
                 exact=record["exact"], recorded=f"on {record['recorded']} ({machine}{forward})")


# ----------------------------------------------------------------------------- the tab


ACCEPTANCE_NOTE = """**Acceptance, MARS verified lane.** *Mean accepted length*: drafts matched per forward that checked
drafts (each such forward also commits one token of its own, the bonus); tokens per forward counts every forward.
*Acceptance rate by draft position*: how often draft d<sub>a</sub> matched the model's own token, among the forwards
where it was checked, that is where d<sub>1</sub> … d<sub>a−1</sub> had all matched (verification stops at the first
mismatch): P(d<sub>a</sub> matched | d<sub>1</sub> … d<sub>a−1</sub> matched). Each bar says matched/checked.
Positions past B−1 come from prompt lookup, whose chains can be longer."""

HOW_IT_IS_TIMED = (
    "The lanes share this machine's CPU: the app advances them in turn, one forward each, a different lane first "
    "each round, and times each by its own forwards only, so none is charged for another's work; the forward right "
    "after each update of this page is charged its lane's typical forward instead, since drawing the page (in a "
    "browser on the same machine) slows whatever runs then. MARS verified checks the mask slots' drafts (and, where "
    "the text repeats itself, prompt-lookup drafts) with the model's own next-token predictions in the same forward "
    "that proposes the next drafts: every token is the one one-token decoding picks (" + verified_guarantee(True)
    + " where this machine's forwards passed the width check: a row's numbers do not depend on how many rows share "
    "its forward; the lane's title says which holds here), several per forward when the drafts are right.")


def acceptance_chart() -> gr.Plot:
    """The verified lane's acceptance by draft position, under the race (updated with the other charts), beside a
    note on how to read it."""
    with gr.Row():
        plot = gr.Plot(plotly_data(acceptance_figure(None)), label="acceptance by draft position", show_label=False,
                       elem_id="acceptance-plot")
        gr.Markdown(ACCEPTANCE_NOTE, elem_id="acceptance-note")
    return plot


def controls_row() -> tuple[gr.Textbox, gr.Slider, gr.Button, gr.Button]:
    """The prompt, τ and Run/Stop, in columns (not one form: on a phone they wrap, one per line)."""
    with gr.Row(equal_height=True):
        with gr.Column(scale=4, min_width=300):
            prompt = gr.Textbox(DEFAULT_PROMPT, label="Prompt", lines=2, placeholder="Ask something…",
                                max_length=MAX_PROMPT_CHARS, elem_id="race-prompt")
        with gr.Column(scale=2, min_width=180):
            threshold = slider("race-threshold")
        run_button, stop_button = lanes.run_and_stop("race", "Run")
    return prompt, threshold, run_button, stop_button


def settings() -> tuple[gr.Slider, gr.Slider, gr.Slider, gr.Checkbox]:
    """The other settings, folded: block size, temperature, max new tokens, adapt to load."""
    with gr.Accordion("Settings: block size, temperature, max new tokens, adapt to load", open=False,
                      elem_id="race-settings"):
        with gr.Row():
            block, temperature, max_new = (slider(f"race-{name}") for name in ("block", "temperature", "max-new"))
            adapt = gr.Checkbox(value=False, label="Adapt to load",
                                info="τ drops 0.05 per extra concurrent run, down to 0.5")
    return block, temperature, max_new, adapt


def lane_panes() -> list[gr.HTML]:
    """The three lanes side by side (on a phone, one under another)."""
    panes = []
    with gr.Row(elem_id="race-lanes"):
        for key in LANES:
            with gr.Column(min_width=280):
                panes.append(gr.HTML(pane_html(None, key=key), label=f"{key} text", elem_id=f"{key}-pane",
                                     padding=False))
    return panes


def charts() -> tuple[gr.Plot, gr.Plot, gr.Plot]:
    """Tokens per forward and tokens against time side by side, the acceptance chart under them."""
    with gr.Row():
        forwards_plot = gr.Plot(plotly_data(forwards_figure({}, 4)), label="tokens per forward", show_label=False,
                                elem_id="forwards-plot")
        time_plot = gr.Plot(plotly_data(time_figure({})), label="tokens against time", show_label=False,
                            elem_id="time-plot")
    return forwards_plot, time_plot, acceptance_chart()


def build(demo: gr.Blocks) -> list[gr.Button]:
    """The Race tab, the race first: prompt, τ and Run/Stop, the message line, the three lanes with their counters,
    then the stats, examples, the other settings (folded), the charts and the trace; the page opens on the recorded
    race. Returns the buttons that run the model (enabled once it is ready)."""
    session = gr.State(RaceSession())
    with gr.Tab("Race"):
        prompt, threshold, run_button, stop_button = controls_row()
        message = gr.Markdown("", elem_id="race-message")
        block, temperature, max_new, adapt = settings()
        panes = lane_panes()
        gr.HTML(legend_html())
        stats = gr.Markdown("Press **Run**: the three lanes stream at the same time.", label="stats",
                            elem_id="race-stats")
        gr.Examples([[p] for p, _ in EXAMPLES], inputs=prompt, label="Examples (each finishes in under a minute)",
                    example_labels=[f"{label} · {p}" for p, label in EXAMPLES], examples_per_page=len(EXAMPLES))
        figures = charts()
        with gr.Accordion("How the race is run and timed", open=False):
            gr.Markdown(HOW_IT_IS_TIMED)
        data = lanes.trace_json()
    outputs = [*panes, *figures, stats, message, data]
    demo.load(example_outputs, None, outputs, api_visibility="undocumented", show_progress="hidden")
    lanes.wire(run_button, stop_button, handlers=(race, stop),
               inputs=[prompt, threshold, block, temperature, max_new, adapt, session], outputs=outputs,
               api_names=("race", "stop"))
    threshold.change(set_threshold, [threshold, session], message, api_name="set_threshold",
                     js=typed_js([threshold], False), **QUICK)
    adapt.change(set_adapt, [adapt, session], None, api_name="set_adapt", **QUICK)
    return [run_button]
