"""The Train tab's handlers on a tiny model served as the app's model: a few steps of real MARS training stream their
metrics, Stop keeps what was learned, the cap and bad values give one message, and the race runs six lanes."""

from __future__ import annotations

import pytest

from mars_core.training import live
from mars_core.training.corpora import corpus_split
from studio import models, train, train_loop, train_state
from studio.train_state import TrainSession

# train_loop.train's outputs, in order
OUT = ("losses", "speeds", "status", "bar", "metrics", "prompt", "message")


@pytest.fixture()
def quick(served, monkeypatch):
    """Trainings of a few steps (a probe each step) on a small slice of the corpus."""
    monkeypatch.setattr(train_loop, "corpus_split", lambda name: corpus_split(name, train=40, held_out=3))
    monkeypatch.setattr(train_loop, "CHECK_TOKENS", 16)
    monkeypatch.setattr(train_loop, "PROBE_TOKENS", 8)
    monkeypatch.setattr(train_loop, "RACE_TOKENS", 12)
    monkeypatch.setattr(train_loop, "FRAME_SECONDS", 0.05)
    monkeypatch.setattr(live.LiveConfig, "__init__", _quick_config(live.LiveConfig.__init__))
    yield


def _quick_config(init):
    def quick_init(self, *args, **kwargs):
        init(self, *args, **{**kwargs, "batch_size": 2, "probe_seconds": 0.01})
    return quick_init


def frames(*args, session=None) -> list[tuple]:
    return list(train_loop.train(*args, session or TrainSession()))


def test_a_few_steps_stream_losses_and_probes_then_offer_held_out_prompts(quick):
    session = TrainSession()
    out = frames("counting", "", 4, 5, 1, session=session)
    last = out[-1]
    metrics = last[OUT.index("metrics")]
    assert metrics["step"] == 5 and metrics["state"].startswith("done")
    steps = [p for p in metrics["points"] if "ar_loss" in p]
    assert [p["step"] for p in steps] == [1, 2, 3, 4, 5]
    assert all(len(p["slot_losses"]) == 3 and all(v > 0 for v in p["slot_losses"]) for p in steps)
    probes = [p for p in metrics["points"] if p.get("probe")]
    assert probes[0]["step"] == 0 and probes[-1]["step"] == 5
    assert all(p["verified_tokens_per_forward"] >= 1.0 and p["tau_tokens_per_forward"] >= 1.0 for p in probes)
    (final,) = [p for p in metrics["points"] if p.get("check")]
    assert final["step"] == 5 and final["items"] == 3
    assert final["verified_identical"] == 3  # fp32 tiny model: verified is one-token decoding
    assert {"step", "seconds", "ar_loss", "slot_losses", "tau_tokens_per_forward",
            "verified_tokens_per_forward"} <= set(metrics)
    assert "Trained for 5 steps" in last[OUT.index("message")]
    assert train_state.kept(session) is not None and train_state.running() == 0


def test_stop_ends_the_training_and_keeps_what_it_learned(quick, monkeypatch):
    session = TrainSession()
    seen = []
    for frame in train_loop.train("counting", "", 4, 2000, 10, session):
        seen.append(frame)
        metrics = frame[OUT.index("metrics")]
        if isinstance(metrics, dict) and metrics["step"] >= 2 and session.stop is not None:
            train.stop(session)
    metrics = seen[-1][OUT.index("metrics")]
    assert 2 <= metrics["step"] < 2000 and "stopped" in metrics["state"]
    assert train_state.kept(session) is not None  # Stop kept the model: it can be raced


def test_one_training_per_visitor_and_a_cap_for_the_machine(quick, monkeypatch):
    first, second = TrainSession(), TrainSession()
    train_state.start(first)
    try:
        said = frames("counting", "", 4, 5, 1, session=first)[-1][OUT.index("message")]
        assert "already running" in said
        said = frames("counting", "", 4, 5, 1, session=second)[-1][OUT.index("message")]
        assert "by other visitors" in said and "Race tab answers" in said
    finally:
        train_state.finish(first)
    monkeypatch.setattr(models, "CONFIG", models.AppConfig(model="tiny", trainings=0))
    assert "turned off" in frames("counting", "", 4, 5, 1)[-1][OUT.index("message")]


@pytest.mark.parametrize("args, said", [
    (("nonsense", "", 4, 5, 1), "Corpus must be one of"),
    (("pasted text", "", 4, 5, 1), "Paste some text"),
    (("pasted text", "word " * 10, 4, 5, 1), "too short"),
    (("pasted text", "x" * 20_001, 4, 5, 1), "too long"),
    (("counting", "", 1, 5, 1), "Block size B must be between 2 and 8"),
    (("counting", "", 4, 0, 1), "Steps must be between 5 and 2000"),
    (("counting", "", 4, 5, 11), "Minutes must be between 0.5 and 10"),
    (("counting", "", 4, "many", 1), "Steps must be a number"),
])
def test_bad_values_get_one_message_and_nothing_runs(quick, args, said):
    out = frames(*args)
    assert len(out) == 1 and said in out[0][OUT.index("message")]
    assert train_state.running() == 0


def test_the_race_puts_the_trained_model_against_its_base(quick):
    session = TrainSession()
    assert "Train a model first" in list(train_loop.race("Count from 3 to 9.", session))[-1][-1]
    frames("counting", "", 4, 5, 1, session=session)
    prompt = train_state.kept(session).held_out[0]["messages"][0]["content"]
    last = list(train_loop.race(prompt, session))[-1]
    assert len(last) == 7 and "before training" in last[-1] and "after training" in last[-1]
    assert all("tokens in" in pane for pane in last[:6])
    assert "(AR's answer)" in last[-1].split("after training")[1]  # verified after training: AR's answer (fp32)


def test_a_race_can_be_stopped(quick):
    session = TrainSession()
    frames("counting", "", 4, 5, 1, session=session)
    prompt = train_state.kept(session).held_out[0]["messages"][0]["content"]
    race = train_loop.race(prompt, session)
    next(race)
    train.stop(session)
    rest = list(race)
    assert "stopped" in rest[-1][0] and len(rest) <= 2


def test_the_race_tab_answers_while_a_training_runs(quick):
    """A training holds no generation slot: a race on the Race tab runs to its end meanwhile."""
    import threading

    from studio import race, race_state

    session = TrainSession()
    training = train_loop.train("counting", "", 4, 2000, 10, session)
    next(training)  # claimed its place and started its thread
    frames_seen = []
    runner = threading.Thread(target=lambda: frames_seen.extend(training))
    runner.start()
    try:
        outputs = list(race.race("Count from 3 to 9.", 0.9, 4, 0.0, 16, False, race_state.RaceSession()))
        assert outputs[-1][-1]["status"] == "done" and train_state.running() == 1
    finally:
        train.stop(session)
        runner.join(timeout=120)
    assert "stopped" in frames_seen[-1][OUT.index("metrics")]["state"] and train_state.running() == 0


def test_only_the_newest_trained_models_are_kept(monkeypatch):
    """Memory stays bounded: beyond KEEP trained models the oldest is dropped, and its visitor is told to train
    again."""
    monkeypatch.setattr(train_state, "_KEPT", type(train_state._KEPT)())
    sessions = [TrainSession() for _ in range(train_state.KEEP + 1)]
    for k, session in enumerate(sessions):
        train_state.keep(session, f"model {k}")  # what is kept is opaque to the store
    assert train_state.kept(sessions[0]) is None
    assert [train_state.kept(s) for s in sessions[1:]] == [f"model {k}" for k in range(1, train_state.KEEP + 1)]
    said = list(train_loop.race("Count from 3 to 9.", sessions[0]))[-1][-1]
    assert "dropped to make room" in said
