"""Fixtures of the handler-level studio tests: a tiny model served as the app's model, with no page throttling."""

from __future__ import annotations

import threading
import time

import pytest

from studio import lanes, models

from tiny import tiny_qwen2, tiny_tokenizer


@pytest.fixture(scope="module")
def tiny():
    tok = tiny_tokenizer(mask_token=True)
    return tiny_qwen2(len(tok), max_position_embeddings=1024), tok


@pytest.fixture()
def served(tiny, monkeypatch):
    """Serve `tiny` as the app's model; every handler must give its generation slot back."""
    monkeypatch.setitem(models.MODELS, "tiny", tiny)
    monkeypatch.setattr(models, "CONFIG", models.AppConfig(model="tiny"))
    monkeypatch.setattr(lanes, "FRAME_SECONDS", 0.0)  # one update per forward: the tests step a run by forward
    monkeypatch.setattr(lanes, "APP_FRAMES", float("inf"))  # ... whatever else the test counts as running
    monkeypatch.delenv("SPACE_ID", raising=False)
    yield
    assert models.TRACKER.active == 0


@pytest.fixture()
def loading_other(tiny, monkeypatch):
    """A model "other" whose load holds until released: yields (entered, release), two Events (its load began; let
    it end). Afterwards it is released, its load waited for (it ends in a thread of its own) and "other" forgotten."""
    entered, release = threading.Event(), threading.Event()

    def slow_load(name=None, **kwargs):
        entered.set()
        release.wait(30)
        return tiny

    monkeypatch.setattr(models, "load", slow_load)
    tables = (models.MODELS, models.RUNTIMES, models.PREPARING)
    for table in tables:
        monkeypatch.delitem(table, "other", raising=False)
    yield entered, release
    release.set()
    deadline = time.monotonic() + 30
    while not models.ready("other") and time.monotonic() < deadline:
        time.sleep(0.05)
    for table in tables:
        table.pop("other", None)
