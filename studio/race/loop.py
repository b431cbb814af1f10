"""The race itself: AR, MARS at a threshold and MARS verified stream side by side, one forward each in turn, inside
a generation slot; and every update it sends the page (a frame: panes, charts, stats, message line, trace).

What the race says in bold is deterministic and true of the answers on screen: forwards, tokens per forward, and
whether each MARS answer is AR's (the first token where it departs is marked). Wall-clock is a measurement on a
shared CPU and is labelled so: each lane is timed by its own forwards only, the lanes taking turns (a different
lane first each round; the forward right after a frame, slowed by the page drawing it, counts as the lane's typical
one: lanes.Turns).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import gradio as gr

from mars_core import DecodeControl
from mars_core.decoding.strategies import default_threshold
from mars_core.runtime import Runtime
from studio import engine, models
from studio.charts import plotly_data
from studio.inputs import check_inputs, warn
from studio.lanes import Throttle, Turns, guarded
from studio.race.figures import acceptance_figure, forwards_figure, time_figure
from studio.race.html import pane_html, stats_markdown
from studio.race.state import LANE_NAMES, LANES, RaceSession, Run, acceptance, departure

RECENT_SECONDS = 2.0  # a /set_threshold this close before a race starts was sent with it (clients send concurrently)


# ----------------------------------------------------------------------------- what the page gets


def trace(runs: dict[str, Run | None], status: str, message: str = "") -> dict:
    """Per-forward data of every lane (the JSON output; clients and tests read it)."""

    def one(run: Run | None) -> dict:
        if run is None:
            return {}
        return {**run.summary(), "counts": run.counts, "thresholds": run.thresholds, "times": run.times,
                "timed": run.timed, "shared": run.shared,
                "text": run.text, "ids": run.ids, "drafted": run.drafted, "matched": run.matched}

    out = {"status": status, "message": message, **{key: one(runs.get(key)) for key in LANES}}
    out["acceptance"] = acceptance(runs.get("verified"))
    ar = runs.get("ar")
    if ar is not None:
        done = status == "done"
        out["departs_at"] = {k: departure(ar.ids, runs[k].ids, done) for k in ("mars", "verified") if runs.get(k)}
    return out


def frame(runs: dict[str, Run], session: RaceSession, block_size: int, status: str, *, done: bool = False,
          exact: bool = False, charts: bool = True, message: str = "", recorded: str | None = None) -> tuple:
    """One update of every output: the three lanes, the three charts (or gr.skip(): left as they are), stats, the
    message line (cleared) and the trace. A lane whose answer ended by itself says "done" under its text whatever
    the race's status (a Stop after it cut nothing). `recorded`: where and when a recorded race was timed (its
    small print says so, not this machine)."""
    ar, mars = runs["ar"], runs["mars"]
    tau = mars.thresholds[-1] if mars.thresholds else session.threshold_in_force()
    panes = []
    for key in LANES:
        run = runs[key]
        depart = departure(ar.ids, run.ids, done) if key != "ar" else None
        footer = f"{'done' if run.answered else status} · {sum(run.counts)} tokens in {len(run.counts)} forwards"
        panes.append(pane_html(run, footer, depart, key, exact, tau if key == "mars" else None))
    figures = ((plotly_data(forwards_figure(runs, block_size)), plotly_data(time_figure(runs)),
                plotly_data(acceptance_figure(runs["verified"]))) if charts else (gr.skip(),) * 3)
    stats = stats_markdown(runs, session, block_size, status, done, exact, recorded=recorded)
    return (*panes, *figures, stats, message, trace(runs, status))


def placeholder(status: str, message: str = "", exact: bool = False) -> tuple:
    """Outputs before anything was generated (the page's first content without a recording): empty lanes, the
    charts as empty axes, the message in the stats line."""
    note = message or status
    return (*(pane_html(None, note, key=key, exact=exact) for key in LANES),
            plotly_data(forwards_figure({}, 4)), plotly_data(time_figure({})), plotly_data(acceptance_figure(None)),
            note, "", trace({}, status, message))


def notice(status: str, message: str) -> tuple:
    """A message on the race's message line (waiting for a slot, preparing the model, a value refused, a failure),
    everything else left as it is: one message, nothing wiped; the trace says it too (for API clients)."""
    return (*(gr.skip(),) * 7, message, trace({}, status, message))


def failure(message: str) -> tuple:
    """One message, next to the controls, instead of a run (nothing runs, nothing on screen is wiped)."""
    return notice("error", warn(message))


# ----------------------------------------------------------------------------- the race


def lane_controls(tau: float, temperature: float = 0.0) -> dict[str, DecodeControl]:
    """Each lane's settings, read at its every forward: AR at τ = 1, MARS at `tau`, verified at its own default."""
    return {"ar": DecodeControl(threshold=1.0, temperature=temperature),
            "mars": DecodeControl(threshold=tau, temperature=temperature),
            "verified": DecodeControl(threshold=default_threshold("verified"), temperature=temperature)}


def race(
    prompt: str, threshold: float, block_size: int, temperature: float, max_new_tokens: int, adapt: bool,
    session: RaceSession,
) -> Iterator[tuple]:
    """Stream AR, MARS at τ and MARS verified side by side, one forward each in turn; yields every output (the Run
    button's handler: Gradio passes its inputs positionally)."""
    try:
        prompt, tau, block, temp, new = check_inputs(prompt, threshold, block_size, temperature, max_new_tokens)
    except ValueError as err:
        yield failure(str(err))
        return
    if time.monotonic() - session.threshold_at > RECENT_SECONDS:
        session.threshold = tau  # else a /set_threshold sent with this race (or after it) wins: the newest
    session.adapt = bool(adapt)
    controls = lane_controls(session.threshold_in_force(), temp)
    session.ar, session.mars, session.verified = (controls[key] for key in LANES)
    work = guarded(run_race(prompt, block, new, controls, session), failure, "Generation")
    try:
        if engine.shares_forwards(temp):  # the scheduler's queue, not a generation slot (run_race says the place)
            yield from work
        else:
            yield from models.in_a_slot(work, lambda: notice("waiting", models.WAITING),
                                        lambda: controls["ar"].stopped,
                                        lambda: notice("stopped", "Stopped before the race began."))
    finally:
        if session.ar is controls["ar"]:
            session.ar = session.mars = session.verified = None


def start_lanes(prompt: str, block: int, new: int, controls: dict[str, DecodeControl]) -> tuple[dict[str, Run], bool]:
    """The three lanes' streams over the served model(s) on the engine chosen at launch (torch or llama.cpp:
    studio.engine), and whether the verified lane is exact here (the runtime passed its width check and AR is the
    same checkpoint)."""
    config = models.CONFIG
    model, tokenizer = models.get_model(config.model)
    runtime = engine.race_runtime(config.model)
    ar_model, ar_tokenizer = models.get_model(config.ar_model) if config.ar_model else (model, tokenizer)
    ar_runtime = models.get_runtime(config.ar_model) if config.ar_model else runtime

    def lane(key: str, strategy: str, name: str | None, served: tuple, run_on: Runtime, **options: int) -> Run:
        events = engine.lane_stream(name, served, prompt, run_on, strategy=strategy, max_new_tokens=new,
                                    control=controls[key], **options)
        return Run(LANE_NAMES[key], events, served[1])

    runs = {"ar": lane("ar", "ar", config.ar_model or config.model, (ar_model, ar_tokenizer), ar_runtime),
            "mars": lane("mars", "sliding", config.model, (model, tokenizer), runtime, block_size=block),
            "verified": lane("verified", "verified", config.model, (model, tokenizer), runtime, block_size=block)}
    return runs, runtime.invariant and not config.ar_model


QUEUE_POLL = 0.25  # seconds between looks at the queue
QUEUE_AGAIN = 2.0  # seconds after which an unchanged place is said again: Gradio closes the generator of a page that
# left only when it yields, so this bounds how long a closed page keeps its place in the queue


def queued(runs: dict[str, Run], controls: dict[str, DecodeControl]) -> Iterator[str]:
    """While the scheduler holds the lanes in its queue (more races than share a forward), what the page says: when
    the place changes, else every QUEUE_AGAIN seconds (each frame costs the busy app's one event loop, its gr.skip()
    outputs included); nothing where the lanes run at once (or decode alone)."""
    said, at = None, -math.inf
    while not any(c.stopped for c in controls.values()):
        places = [p for run in runs.values() if (p := getattr(run.events, "ahead", lambda: None)()) is not None]
        if not places:
            return
        ahead, cap = max(places), models.scheduler(models.CONFIG.model).cap
        where = f"{ahead} race{'s' if ahead > 1 else ''} ahead of yours" if ahead else "yours is next"
        now = f"In the queue: {where} (up to {cap} races share each forward here)…"
        if now != said or time.monotonic() - at >= QUEUE_AGAIN:
            said, at = now, time.monotonic()
            yield now
        time.sleep(QUEUE_POLL)


def run_race(prompt: str, block: int, new: int, controls: dict[str, DecodeControl], session: RaceSession, *,
             keep: dict | None = None) -> Iterator[tuple]:
    """The race itself, inside a generation slot (`keep` receives the lanes, for recording). A ValueError is a
    message (mars_core's checks: prompt too long for the context, no mask token, …; a model that did not load)."""
    for said in models.preparing(models.served(), lambda: controls["ar"].stopped):
        yield notice("preparing", said)
    if controls["ar"].stopped:
        yield notice("stopped", "Stopped before the race began.")
        return
    with models.TRACKER:  # counted from before its lanes start: their first forward reads the load with it
        controls["mars"].threshold = session.threshold_in_force()
        runs, exact = start_lanes(prompt, block, new, controls)
        if keep is not None:
            model = models.get_model(models.CONFIG.model)[0]
            keep.update(runs, dtype=str(model.dtype).removeprefix("torch."), exact=exact)
        for ahead in queued(runs, controls):
            yield notice("waiting", ahead)
        throttle, turns = Throttle(), Turns()
        while not all(r.finished for r in runs.values()):
            for key in turns.order(list(runs)):
                if any(c.stopped for c in controls.values()):  # Stop: no more forwards shown, even ones run ahead
                    for run in runs.values():
                        run.close()
                    break
                if not runs[key].finished:
                    if key == "mars":
                        controls["mars"].threshold = session.threshold_in_force()
                    runs[key].advance(turns)
            stopped = any(c.stopped for c in controls.values())
            finished = all(r.finished for r in runs.values())
            status = "stopped" if stopped else ("done" if finished else "running")
            if throttle.due(sum(len(r.ids) for r in runs.values()), finished):
                turns.drawing()
                yield frame(runs, session, block, status, done=finished and not stopped, exact=exact,
                            charts=throttle.charts)
                turns.framed()
