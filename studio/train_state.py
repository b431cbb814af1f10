"""What the Train tab keeps: a visitor's session (its running training's Stop, its trained model's key, the race's
controls), the models trained (a few, the oldest dropped: memory stays bounded), the cap on trainings running at
once, and which model a training starts from."""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from mars_core import DecodeControl
from mars_core.runtime import Runtime

from . import models

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

    def stop_all(self) -> None:
        if self.stop is not None:
            self.stop.set()
        for control in self.lanes:
            control.stop()


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
            raise ValueError("Training is turned off on this server (it was started with --trainings 0).")
        if len(_RUNNING) >= cap:
            raise ValueError(f"{'A training' if cap == 1 else f'{cap} trainings'} by other visitors "
                             f"{'is' if cap == 1 else 'are'} running (the most at once on this machine: {cap}). "
                             "Try again when one ends; the Race tab answers meanwhile.")
        _RUNNING.add(id(session))
    session.stop = threading.Event()
    return session.stop


def finish(session: TrainSession) -> None:
    """Give the session's training place back."""
    with _LOCK:
        _RUNNING.discard(id(session))


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
