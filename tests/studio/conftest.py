"""Fixtures of the handler-level studio tests: a tiny model served as the app's model, with no page throttling."""

from __future__ import annotations

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
