"""The Train tab's two runs: a live MARS training (mars_core.training.live: the real MarsTrainer, a LoRA on a copy of
the base model, in a thread) streamed to the page as its losses and probes come; then a race of the trained model
against the same model before training (AR, MARS τ, MARS verified each), on a held-out item of its corpus."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gradio as gr

from mars_core import DecodeControl, stream
from mars_core.decoding.strategies import default_threshold
from mars_core.runtime import Runtime
from mars_core.training.corpora import CORPORA, PASTED, corpus_split, pasted_examples
from studio import models
from studio.charts import plotly_data
from studio.inputs import check, warn
from studio.lanes import Throttle, guarded
from studio.race.html import pane_html
from studio.race.state import LANE_NAMES, LANES, Run, departure
from studio.train import state as train_state
from studio.train.figures import loss_figure, progress_html, speed_figure, status_markdown
from studio.train.state import Broadcast, Trained, TrainSession

if TYPE_CHECKING:  # the trainer's modules load on the first Start (transformers' Trainer brings peft and accelerate):
    from mars_core.training.live import LiveConfig  # an app that only decodes, as a Space, needs none of them

PROBE_ITEMS = 2  # held-out items each probe during training decodes (a probe pauses the training: kept short)
PROBE_TOKENS = 32
CHECK_ITEMS = 3  # held-out items the trained model is checked on at the end (verified against one-token decoding)
CHECK_TOKENS = 64
RACE_TOKENS = 64
FRAME_SECONDS = 1.0  # the page is updated about this often while a training runs
SIDES = ("before", "after")


@dataclass(frozen=True)
class TrainSettings:
    """A training's settings, checked: the corpus's name, its training and held-out items, and the run's config."""

    corpus: str
    train: list[dict]
    held_out: list[dict]
    config: LiveConfig


def checked_settings(corpus: Any, pasted: Any, block_size: Any, steps: Any, minutes: Any) -> TrainSettings:
    """The validated settings (a ValueError with one message else)."""
    from mars_core.training.live import LiveConfig

    block = check("train-block", block_size)
    budget = check("train-steps", steps)
    seconds = 60.0 * check("train-minutes", minutes)
    if corpus == PASTED:
        train, held = pasted_examples(pasted)
    elif corpus in CORPORA:
        train, held = corpus_split(corpus)
    else:
        raise ValueError(f"Corpus must be one of {', '.join([*CORPORA, PASTED])}, got {corpus!r}.")
    return TrainSettings(corpus, train, held, LiveConfig(block_size=block, max_steps=budget, max_seconds=seconds))


# ----------------------------------------------------------------------------- training


def train_frame(live: Broadcast, elapsed: float, *, choices: Any = None, message: str = "") -> tuple:
    """One update of the training's outputs: both charts, the status and its bar, the metrics JSON, the race's prompt
    choices (gr.skip() until the training ends), the message line."""
    points = live.points
    step = max((p["step"] for p in points), default=0)
    return (plotly_data(loss_figure(points)), plotly_data(speed_figure(points)),
            status_markdown(points, live.max_steps, live.max_seconds, elapsed, live.state),
            progress_html(elapsed, live.max_seconds, step, live.max_steps), metrics_json(points, live.state),
            gr.skip() if choices is None else choices, message)


def metrics_json(points: list[dict], state: str) -> dict:
    """The latest figures (what API clients read): step, seconds, ar_loss, slot_losses, the last probe's tokens per
    forward, the state; and every point so far."""
    last = next((p for p in reversed(points) if "ar_loss" in p), {})
    probe = next((p for p in reversed(points) if p.get("probe") or p.get("check")), {})
    step = max((p["step"] for p in points), default=0)
    seconds = max((p["seconds"] for p in points), default=0.0)
    return {"state": state, "step": step, "seconds": seconds, "ar_loss": last.get("ar_loss"),
            "slot_losses": last.get("slot_losses", []),
            "tau_tokens_per_forward": probe.get("tau_tokens_per_forward"),
            "verified_tokens_per_forward": probe.get("verified_tokens_per_forward"),
            **{k: v for k, v in probe.items() if k in ("verified_identical", "ar_correct", "items")},
            "points": points}


def notice(message: str) -> tuple:
    """A line on the message line (the model's preparation, waiting for a slot), everything else as it is: both runs'
    outputs end with their message line."""
    return (*(gr.skip(),) * 6, message)


def failure(message: str) -> tuple:
    """One message next to Start or Race; nothing on screen is wiped."""
    return notice(warn(message))


def while_shown(frames: Iterator[tuple], session: TrainSession, stop: threading.Event, outputs: int
                ) -> Iterator[tuple]:
    """A run's frames while the page shows it (session.shown is its stop). Once another run took the page (a Replay,
    a Start), the rest runs unseen to its end (a training is still checked and kept), then one frame that changes
    nothing: Gradio sends a run's last frame again when it ends, which would replace the other run's."""
    for frame in frames:
        if session.shown is stop:
            yield frame
    if session.shown is not stop:
        yield (gr.skip(),) * outputs


def train(corpus: str, pasted: str, block_size: Any, steps: Any, minutes: Any,
          session: TrainSession) -> Iterator[tuple]:
    """The Start button: the settings checked, a training place claimed (one per visitor, a cap for the machine),
    then the training streamed; its last frame offers the held-out prompts to race."""
    try:
        settings = checked_settings(corpus, pasted, block_size, steps, minutes)
        stop = train_state.start(session)
    except ValueError as err:
        yield failure(str(err))
        return
    try:
        yield from while_shown(guarded(run_training(settings, session, stop), failure, "Training"), session, stop, 7)
    finally:
        train_state.finish(session)


def run_training(settings: TrainSettings, session: TrainSession, stop: threading.Event) -> Iterator[tuple]:
    """The training itself: the base model prepared (once), a copy trained in a thread (its metrics arriving through
    a queue, a frame a second), then merged, checked on held-out items and kept for the race."""
    from mars_core.evaluation.probe import final_check, live_probe
    from mars_core.training.live import train_live

    name = train_state.base_name()
    for said in models.preparing([name], stop.is_set):
        yield notice(said)
    if stop.is_set():
        yield notice("Stopped before the training began.")
        return
    base, tokenizer = models.get_model(name)
    if getattr(tokenizer, "mask_token_id", None) is None:
        raise ValueError("This model has no mask token: MARS training needs one (mars_core.load guarantees one).")
    config, held = settings.config, settings.held_out
    live = Broadcast(id(session), settings.corpus, config.block_size, config.max_steps, config.max_seconds,
                     time.monotonic())
    points = live.points  # appended here, read by every visitor watching (watch)
    arrived: queue.Queue = queue.Queue()
    outcome: dict[str, Any] = {}

    probe = live_probe(tokenizer, held[:PROBE_ITEMS], config.block_size, base.dtype, models.get_runtime(name).cost,
                       PROBE_TOKENS)
    if PRELOADING_LINE in models.BACKGROUND:
        yield notice("Waiting for the app's start to finish measuring the untrained model's probe (once per start); "
                     "the training begins right after.")
    before = base_probe(name, held[:PROBE_ITEMS], config.block_size)  # the untrained model's figures, kept
    config = dataclasses.replace(config, probe_at_start=False)

    def work() -> None:
        try:
            outcome["result"] = train_live(copy.deepcopy(base).float(), tokenizer, settings.train, config,
                                           arrived.put, probe, stop=stop)
        except Exception as err:  # noqa: BLE001 - handed to the generator, which says it (guarded)
            outcome["error"] = err
        finally:
            arrived.put(None)

    start = live.started = time.monotonic()
    points.append({"step": 0, "seconds": 0.0, "probe": True, **before})
    train_state.broadcast(live)
    threading.Thread(target=work, name="train", daemon=True).start()
    yield train_frame(live, 0.0, message="Training started: the first losses come after the first steps, the first "
                      "probe of held-out items before them. Other visitors' Train tabs show it live.")
    try:
        while not _drain(arrived, points):  # a frame a second until the training's end (None) arrives
            yield train_frame(live, time.monotonic() - start)
            try:
                item = arrived.get(timeout=FRAME_SECONDS)
            except queue.Empty:
                continue
            if item is None:
                break
            points.append(item)
    finally:
        stop.set()  # the page left (Gradio closed this generator): the training ends at its next step
    if "error" in outcome:
        raise outcome["error"]
    wrapped, callback = outcome["result"]
    elapsed = time.monotonic() - start
    live.state = "checking"
    yield train_frame(live, elapsed, message="Merging the LoRA and checking the trained model on "
                      f"{CHECK_ITEMS} held-out items (verified against its own one-token decoding)…")
    # prepared as the served model is (models.CONFIG.static): the race runs before and after on the same path
    after, runtime, final = final_check(wrapped, tokenizer, held[:CHECK_ITEMS], config.block_size, base.dtype,
                                        max_new_tokens=CHECK_TOKENS, static=models.CONFIG.static)
    final.pop("answers", None)
    steps = callback.steps
    points.append({"step": steps, "seconds": round(time.monotonic() - start, 2), "check": True, **final})
    key = train_state.keep(session, Trained(after, tokenizer, runtime, settings.corpus, config.block_size, held,
                                            steps, final))
    ended = {"stop": "stopped (what it learned is kept)", "seconds": "time budget spent"}.get(callback.stopped_by,
                                                                                             "step budget spent")
    live.prompts = [item["messages"][0]["content"] for item in held]
    live.message, live.state, live.trained, live.elapsed = trained_summary(final, steps), f"done: {ended}", key, elapsed
    yield train_frame(live, elapsed, choices=gr.Dropdown(choices=live.prompts, value=live.prompts[0]),
                      message=live.message)


def watch(session: TrainSession) -> tuple:
    """The Train tab's timer: another visitor's training (the running one, else the last that ended) on this
    visitor's page, live, whoever started it, labelled so; once it is done, its model is this visitor's to race.
    Nothing is sent while this visitor's own training runs (its Start streams it) or, once it ended, nothing
    changed."""
    live = train_state.watched(session)
    running = live is not None and live.elapsed is None  # its clock and bar move every second: sent each tick
    tick = int(time.monotonic() - live.started) if running else None
    seen = (id(live), len(live.points), live.state, tick) if live else ()
    if live is None or train_state.training(session) or session.replaying is not None or seen == session.seen:
        return (gr.skip(),) * 7
    clock_only = session.seen[:3] == seen[:3]  # only its clock moved: the status and bar, not the charts again
    session.seen = seen
    elapsed = live.elapsed if live.elapsed is not None else time.monotonic() - live.started
    if clock_only:
        step = max((p["step"] for p in live.points), default=0)
        return (gr.skip(), gr.skip(), status_markdown(live.points, live.max_steps, live.max_seconds, elapsed,
                                                      live.state),
                progress_html(elapsed, live.max_seconds, step, live.max_steps), gr.skip(), gr.skip(), gr.skip())
    choices = None
    if live.trained is not None and session.trained != live.trained and (session.trained is None
                                                                          or train_state.kept(session) is None):
        session.trained = live.trained  # the class races the teacher's model
        choices = gr.Dropdown(choices=live.prompts, value=live.prompts[0])
    what = f"a training another visitor started ({live.corpus}, B = {live.block_size}"
    if live.elapsed is None:
        said = f"Watching {what}; only they can Stop it)."
    elif live.trained:
        said = f"Watched {what}). It ended: {live.message}"
    else:  # its starter left before its check: nothing to race
        said = f"The last training, {what}), {live.state}: it left no model to race."
    return train_frame(live, elapsed, choices=choices, message=said)


RECORDED = Path(__file__).resolve().parents[2] / "assets" / "train_recorded.json"  # train/record.py writes it
REPLAY_SPEED = float(os.environ.get("MARS_REPLAY_SPEED", "4"))  # a recorded training plays this many times faster


def replay(session: TrainSession, path: Path = RECORDED, speed: float = REPLAY_SPEED) -> Iterator[tuple]:
    """The Replay button: a recorded training (a real run of the defaults, written by studio/train/record.py) played
    `speed` times faster than it ran, labelled as recorded with its machine and date, then its recorded race. For a
    server with trainings turned off, or a visitor who cannot wait; it stops the visitor's own training and says so
    (that training's end, its check, is then not shown: the page is the replay's).
    Outputs: the training's, then the six race panes and the race's summary."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        yield (*failure(f"No recorded training to replay here ({type(err).__name__})."), *(gr.skip(),) * 7)
        return
    live = Broadcast(0, record["corpus"], record["block_size"], record["max_steps"], record["max_seconds"], 0.0)
    stopped = "Your training was stopped for the replay. " if train_state.training(session) else ""
    label = (f"{stopped}Replaying a recorded training ({record['machine']}, {record['date']}), {speed:g}× as fast "
             f"as it ran; recorded by `{record['command']}`")
    session.stop_all()
    stop = session.stop = session.shown = threading.Event()
    began = time.monotonic()
    session.replaying = stop
    try:
        yield from while_shown(_played(record, live, label, stop, speed, began), session, stop, 14)
    finally:
        if session.replaying is stop:
            session.replaying = None


def _played(record: dict, live: Broadcast, label: str, stop: threading.Event, speed: float, began: float
            ) -> Iterator[tuple]:
    """The replay's frames: each recorded point at its time over `speed`, then the recorded race."""
    for point in record["points"]:
        while (time.monotonic() - began) * speed < point["seconds"] and not stop.is_set():
            time.sleep(min(FRAME_SECONDS, point["seconds"] / speed - (time.monotonic() - began)) + 1e-3)
        if stop.is_set():
            break
        live.points.append(point)
        live.state = "recorded: checking" if point.get("check") else "recorded: training"
        yield (*train_frame(live, point["seconds"], message=label), *(gr.skip(),) * 7)
    live.state = "recorded: done" if not stop.is_set() else "recorded: replay stopped"
    seconds = max((p["seconds"] for p in live.points), default=0.0)
    race = record["race"]
    yield (*train_frame(live, seconds, message=f"{label}. {record['summary']} Its race, recorded: "
                        f"{race['prompt']!r}."), *race["panes"], race["summary"])


PRELOAD_LOG = ("preparing the Train tab's starting point", "the Train tab's starting point is ready")  # its log lines
# (benchmarks/load_test.py waits for the second)
PRELOADING_LINE = ("Preparing the Train tab's starting point (the untrained base model and its step-0 probe; "
                  "a Start meanwhile waits for it)")
_BASE_PROBES: dict[tuple, dict] = {}  # (model, B, the probe's prompts) -> the untrained model's probe figures
_BASE_LOCK = threading.Lock()


def base_probe(name: str | None, items: list[dict], block_size: int) -> dict:
    """The probe of the model a training starts from, before any step (step 0: the first point on the chart): the
    same for every training of these items and B (a LoRA starts at zero), so measured once per process, on the served
    base model as the probes decode (its own curve, plain kernels), and read back after."""
    from mars_core.evaluation.probe import decode_probe

    key = (name, block_size, tuple(str(item["messages"][:-1]) for item in items))
    with _BASE_LOCK:
        if key not in _BASE_PROBES:
            base, tokenizer = models.get_model(name)
            _BASE_PROBES[key] = decode_probe(base, tokenizer, items, block_size, max_new_tokens=PROBE_TOKENS,
                                             runtime=Runtime(cost=models.get_runtime(name).cost))
        return _BASE_PROBES[key]


def preload() -> None:
    """At start, in the background: the base model prepared and the default training's step-0 probe measured, so a
    first Start on the defaults draws its first point at once."""
    from mars_core.training.corpora import DEFAULT_CORPUS
    from studio.inputs import INPUTS

    began = models.BACKGROUND[PRELOADING_LINE] = time.monotonic()
    models.log.info(PRELOAD_LOG[0])
    try:
        base_probe(train_state.base_name(), corpus_split(DEFAULT_CORPUS)[1][:PROBE_ITEMS],
                   int(INPUTS["train-block"].value))
    except ValueError:
        pass  # the model could not be prepared: a Start says why
    finally:
        models.BACKGROUND.pop(PRELOADING_LINE, None)
        models.log.info("%s (%.0f s)", PRELOAD_LOG[1], time.monotonic() - began)


def _drain(arrived: queue.Queue, points: list[dict]) -> bool:
    """Move every metric waiting in the queue onto `points`; True when the training's end (None) was among them."""
    while True:
        try:
            item = arrived.get_nowait()
        except queue.Empty:
            return False
        if item is None:
            return True
        points.append(item)


def trained_summary(final: dict, steps: int) -> str:
    """The trained model, in one line: its held-out tokens per forward and whether verified kept its answers."""
    return (f"**Trained for {steps} steps.** On {final['items']} held-out items: verified "
            f"{final['verified_tokens_per_forward']:.2f} tokens per forward, its answers identical to the trained "
            f"model's own one-token decoding on {final['verified_identical']} of {final['items']}; MARS at τ = 0.9 "
            f"{final['tau_tokens_per_forward']:.2f}; one-token answers equal to the reference on "
            f"{final['ar_correct']} of {final['items']}. Race it below.")


# ----------------------------------------------------------------------------- the race


def race(prompt: Any, session: TrainSession) -> Iterator[tuple]:
    """The Race button: the trained model (after) against its base (before), AR, MARS τ and verified each, on a
    held-out prompt, one forward per lane in turn inside a generation slot."""
    trained = train_state.kept(session)
    if trained is None:
        yield failure("Train a model first (Start above): the race is between it and its base."
                           if session.trained is None else "Your trained model was dropped to make room for newer "
                           "ones (the app keeps a few): train again.")
        return
    if not isinstance(prompt, str) or not prompt.strip():
        yield failure("Pick a held-out prompt to race on.")
        return
    controls = {(side, key): DecodeControl(threshold=1.0 if key == "ar" else
                                           default_threshold("verified") if key == "verified" else 0.9)
                for side in SIDES for key in LANES}
    session.lanes = list(controls.values())
    stopped = lambda: any(c.stopped for c in controls.values())  # noqa: E731
    yield from models.in_a_slot(guarded(run_race(prompt, trained, controls, stopped), failure, "Race"),
                                lambda: notice(models.WAITING), stopped,
                                lambda: notice("Stopped before the race began."))


def run_race(prompt: str, trained: Trained, controls: dict, stopped: Callable[[], bool]) -> Iterator[tuple]:
    """The six lanes, one forward each in turn; a frame when due (lanes.Throttle); stopped(): any lane's Stop."""
    name = train_state.base_name()
    for said in models.preparing([name], stopped):
        yield notice(said)
    if stopped():  # Stop while the base model prepares: no wait for it
        yield notice("Stopped before the race began.")
        return
    base, tokenizer = models.get_model(name)
    served = {"before": (base, models.get_runtime(name)), "after": (trained.model, trained.runtime)}
    strategies = {"ar": "ar", "mars": "sliding", "verified": "verified"}
    runs = {(side, key): Run(LANE_NAMES[key], stream(served[side][0], tokenizer, prompt, strategy=strategies[key],
                                                     block_size=trained.block_size, max_new_tokens=RACE_TOKENS,
                                                     control=controls[(side, key)], runtime=served[side][1]),
                             tokenizer)
            for side in SIDES for key in LANES}
    throttle = Throttle()
    with models.TRACKER:
        while not all(r.finished for r in runs.values()):
            for run in runs.values():
                if not run.finished:
                    run.advance()
            halted = stopped()
            done = all(r.finished for r in runs.values())
            if throttle.due(sum(len(r.ids) for r in runs.values()), done):  # stopped lanes end short: no departure
                yield race_frame(runs, {side: served[side][1] for side in SIDES},
                                 "stopped" if halted else "done" if done else "running", done and not halted)


def race_frame(runs: dict, runtimes: dict[str, Runtime], status: str, done: bool) -> tuple:
    """The six panes (before, then after; each verified lane titled by its runtime's width check) and the race's
    summary line."""
    panes = []
    for side in SIDES:
        ar = runs[(side, "ar")]
        exact = runtimes[side].invariant
        for key in LANES:
            run = runs[(side, key)]
            depart = departure(ar.ids, run.ids, done) if key != "ar" else None
            panes.append(pane_html(run, f"{status} · {sum(run.counts)} tokens in {len(run.counts)} forwards", depart,
                                   key, exact, 0.9 if key == "mars" else None))
    return (*panes, race_summary(runs, done))


def race_summary(runs: dict, done: bool) -> str:
    """Tokens per forward before and after training, lane by lane (counts: true of the answers on screen)."""
    rows = []
    for side, said in (("before", "before training"), ("after", "after training")):
        ar = runs[(side, "ar")]
        cells = []
        for key in LANES:
            run = runs[(side, key)]
            s = run.summary()
            same = "" if key == "ar" else (" (AR's answer)" if departure(ar.ids, run.ids, done) is None else
                                           " (departs from AR)")
            cells.append(f"{LANE_NAMES[key]} **{s['tokens_per_forward']:.2f}**{same}")
        rows.append(f"{said}: " + " · ".join(cells))
    return "Tokens per forward, " + "  \n".join(rows)
