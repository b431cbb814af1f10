"""What the Train tab keeps: a visitor's session (its running training's Stop, its trained model's key, the race's
controls), the models trained (a few, the oldest dropped: memory stays bounded), the cap on trainings running at
once, and which model a training starts from."""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from mars_core import DecodeControl
from mars_core.runtime import Runtime
from studio import models

BASE = "smollm2-135m-instruct"  # what the embedded default's training starts from: its base, without the adapter
KEEP = 3  # trained models kept for racing, all visitors together (each about two copies of the weights)
_KEPT: OrderedDict[str, Trained] = OrderedDict()
_LOCK = threading.Lock()
_RUNNING: set[int] = set()  # ids of the sessions training now
_KEYS = itertools.count(1)


@dataclass
class Trained:
    """One finished (or stopped) training: the merged model and its runtime, what it learned from, its metrics."""

    model: Any
    tokenizer: Any
    runtime: Runtime
    corpus: str
    block_size: int
    held_out: list[dict]  # the held-out items of its corpus (never trained on): what the race picks from
    steps: int
    final: dict  # the last probe's figures (tokens per forward, verified = one-token, correct answers)


@dataclass
class TrainSession:
    """One visitor's Train tab (a gr.State): the running training's Stop, the key of the model it trained last, and
    the running race's lanes."""

    stop: threading.Event | None = None  # set by Stop: the training ends at its next step, keeping what it learned
    trained: str | None = None  # key of this visitor's last trained model (kept(): None once dropped)
    lanes: list[DecodeControl] = field(default_factory=list)  # the running race's controls (Stop ends them)
    seen: tuple = ()  # what this visitor last saw of another's training (watch(): nothing new, nothing sent)
    replaying: threading.Event | None = None  # the stop of the replay playing on this page (watch() sends nothing
    # meanwhile)
    shown: threading.Event | None = None  # the stop of the run (a training or a replay) whose frames the page shows:
    # the last one started; a run the page moved on from goes on to its end unseen (a training: checked and kept)

    def stop_all(self) -> None:
        if self.stop is not None:
            self.stop.set()
        for control in self.lanes:
            control.stop()


@dataclass
class Broadcast:
    """A training as every visitor's Train tab shows it: whose it is, its settings' budget, its points so far (the
    starter's thread appends, watchers read), its state and, once done, the kept model's key and the race's
    prompts."""

    owner: int  # id() of the starter's TrainSession: only it can Stop
    corpus: str
    block_size: int
    max_steps: int
    max_seconds: float
    started: float  # time.monotonic() when the training began
    points: list[dict] = field(default_factory=list)
    state: str = "training"
    elapsed: float | None = None  # set once the training itself ended
    trained: str | None = None  # the kept model's key, once checked and kept
    prompts: list[str] = field(default_factory=list)  # the held-out prompts to race on, once done
    message: str = ""


LIVE: list[Broadcast] = []  # the trainings running now and the last ended one, newest last (at most cap + 1)


def broadcast(live: Broadcast) -> None:
    """Show a training that begins on every visitor's Train tab (ended ones beyond the newest are forgotten)."""
    with _LOCK:
        LIVE[:] = [b for b in LIVE if b.elapsed is None] + [live]


def watched(session: TrainSession) -> Broadcast | None:
    """The training another visitor's Train tab should show this one: a running one not its own (else the last one
    that ended), None when there is none."""
    with _LOCK:
        others = [b for b in LIVE if b.owner != id(session)]
    running = [b for b in others if b.elapsed is None]
    return (running or others or [None])[-1]


def base_name() -> str | None:
    """The model a training starts from: the embedded default's base (SmolLM2-135M-Instruct without the shipped MARS
    adapter: the class watches it learn from one token per forward), else the served --model itself."""
    return BASE if models.CONFIG.model is None else models.CONFIG.model


def start(session: TrainSession) -> threading.Event:
    """Claim one of the app's training places for this visitor (models.CONFIG.trainings of them); a ValueError with
    the message when the visitor already trains or every place is taken."""
    with _LOCK:
        if id(session) in _RUNNING:
            raise ValueError("Your training is already running: Stop it, or wait for it to end.")
        cap = models.CONFIG.trainings
        if cap < 1:
            raise ValueError("Training is turned off on this server (it was started with --trainings 0): press "
                             "**Replay** to watch a recorded training.")
        if len(_RUNNING) >= cap:
            raise ValueError(f"{'A training' if cap == 1 else f'{cap} trainings'} by other visitors "
                             f"{'is' if cap == 1 else 'are'} running (the most at once on this machine: {cap}): "
                             "watch it live below and race its model when it ends, or try again then; the Race tab "
                             "answers meanwhile.")
        _RUNNING.add(id(session))
    if session.stop is not None:  # a replay playing on this page ends: the page shows the training now
        session.stop.set()
    session.stop = session.shown = threading.Event()
    return session.stop


def finish(session: TrainSession) -> None:
    """Give the session's training place back; its broadcast, if it never reached its end, ends here."""
    with _LOCK:
        _RUNNING.discard(id(session))
        for live in LIVE:
            if live.owner == id(session) and live.elapsed is None:
                live.elapsed = time.monotonic() - live.started
                live.state = "ended before its check"


def training(session: TrainSession) -> bool:
    """Whether this visitor's own training is running."""
    return id(session) in _RUNNING


def running() -> int:
    """Trainings running now."""
    return len(_RUNNING)


def keep(session: TrainSession, trained: Trained) -> str:
    """Keep a trained model for racing, as this visitor's; the oldest kept one is dropped beyond KEEP."""
    key = f"trained-{next(_KEYS)}"
    with _LOCK:
        _KEPT[key] = trained
        while len(_KEPT) > KEEP:
            _KEPT.popitem(last=False)
    session.trained = key
    return key


def kept(session: TrainSession) -> Trained | None:
    """This visitor's last trained model, if it is still kept."""
    with _LOCK:
        return _KEPT.get(session.trained) if session.trained else None
