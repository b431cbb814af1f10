"""The Train tab's handlers on a tiny model served as the app's model: a few steps of real MARS training stream their
metrics, Stop keeps what was learned, the cap and bad values give one message, and the race runs six lanes."""

from __future__ import annotations

import threading
import time

import pytest

from mars_core.training import live
from mars_core.training.corpora import corpus_split
from studio import models
from studio.train import loop as train_loop
from studio.train import state as train_state
from studio.train import tab as train
from studio.train.state import TrainSession

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
        assert "by other visitors" in said and "Race tab answers" in said and "watch it live" in said
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
    assert all("departs" not in out for out in rest[-1])  # lanes cut short by Stop are not said to depart


def test_the_race_tab_answers_while_a_training_runs(quick):
    """A training holds no generation slot: a race on the Race tab runs to its end meanwhile."""
    import threading

    from studio.race import state as race_state
    from studio.race import tab as race

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


def test_another_visitor_watches_the_training_live_and_races_its_model(quick):
    """A second visitor's timer shows the first visitor's training (labelled as another's, points growing), Start
    beyond the cap says so and offers to watch, only the starter can Stop, and the watcher races the model."""
    import threading

    teacher, student = TrainSession(), TrainSession()
    training = train_loop.train("counting", "", 4, 12, 1, teacher)
    first = next(training)
    assert "Other visitors' Train tabs show it live" in first[OUT.index("message")]
    assert train_loop.watch(teacher)[OUT.index("message")] == train_loop.gr.skip()  # its own Start streams it
    seen: list = []
    runner = threading.Thread(target=lambda: seen.extend(training))
    runner.start()
    try:
        said = frames("counting", "", 4, 5, 1, session=student)[-1][OUT.index("message")]
        assert "watch it live below" in said
        train.stop(student)  # a watcher's Stop stops nothing
        watched = []
        while True:
            alive = runner.is_alive()
            frame = train_loop.watch(student)
            if frame[OUT.index("metrics")] != train_loop.gr.skip():
                watched.append(frame)
            if not alive:
                break
            runner.join(timeout=0.05)
    finally:
        runner.join(timeout=120)
    assert "stopped" not in seen[-1][OUT.index("metrics")]["state"]
    steps = [f[OUT.index("metrics")]["step"] for f in watched if "step" in f[OUT.index("metrics")]]
    assert len(set(steps)) >= 3 and steps == sorted(steps)  # the watcher saw it move
    assert "another visitor started" in watched[-1][OUT.index("message")]
    assert watched[-1][OUT.index("metrics")]["state"].startswith("done")
    assert train_state.kept(student) is train_state.kept(teacher)  # the class races the teacher's model
    prompt = train_state.kept(student).held_out[0]["messages"][0]["content"]
    assert "after training" in list(train_loop.race(prompt, student))[-1][-1]
    assert train_loop.watch(student)[OUT.index("metrics")] == train_loop.gr.skip()  # nothing new: nothing sent


def test_a_watcher_is_told_when_the_last_training_left_no_model(monkeypatch):
    """A training whose starter left before its check ended without a model: a watcher's message says so, not that
    it is still watching a training only its starter can Stop."""
    monkeypatch.setattr(train_state, "LIVE", [])
    live = train_state.Broadcast(0, "counting", 4, 12, 60.0, time.monotonic() - 5)
    live.points.append({"step": 1, "seconds": 1.0})
    train_state.broadcast(live)
    watching = train_loop.watch(TrainSession())[OUT.index("message")]
    assert "only they can Stop it" in watching
    live.elapsed, live.state = 5.0, "ended before its check"
    said = train_loop.watch(TrainSession())[OUT.index("message")]
    assert "ended before its check" in said and "no model to race" in said and "Stop" not in said


def test_a_recorded_training_replays_with_its_race(quick, tmp_path):
    """Replay plays the shipped record (labelled recorded, with machine and date): its points in order, then its
    race's six panes and summary."""
    import json

    record = json.loads(train_loop.RECORDED.read_text())
    assert record["points"] and record["machine"] and record["date"]
    steps = [p for p in record["points"] if "ar_loss" in p]
    assert steps[-1]["slot_losses"][0] < 0.7 * steps[0]["slot_losses"][0]  # the recorded run learned
    out = list(train_loop.replay(TrainSession(), speed=1e6))
    assert "Replaying a recorded training" in out[0][OUT.index("message")] and record["date"] in out[0][6]
    last = out[-1]
    assert last[OUT.index("metrics")]["points"] == record["points"]
    assert last[7:13] == tuple(record["race"]["panes"]) and last[13] == record["race"]["summary"]
    assert not out[0][OUT.index("message")].startswith("Your training")
    training = TrainSession()  # the visitor's own training running: Replay stops it, and says so
    stop = train_state.start(training)
    try:
        first = next(train_loop.replay(training, speed=1e6))
    finally:
        train_state.finish(training)
    assert stop.is_set() and first[OUT.index("message")].startswith("Your training was stopped for the replay.")
    (tmp_path / "bad.json").write_text("{")
    said = list(train_loop.replay(TrainSession(), tmp_path / "bad.json"))
    assert len(said) == 1 and "No recorded training" in said[0][OUT.index("message")]


def test_the_page_shows_the_run_last_started(quick):
    """Replay during the visitor's own training: the training stops and goes on to its end unseen (checked, its model
    kept to race), so its last frames do not replace the replay's; Start during a replay: the replay stops and shows
    nothing more. Both runs write the same outputs of one page, and Gradio sends a run's last frame again at its end:
    a run the page moved on from ends on a frame that changes nothing."""
    session = TrainSession()
    training = train_loop.train("counting", "", 4, 2000, 10, session)
    for frame in training:  # until the training's thread runs
        if isinstance(frame[OUT.index("metrics")], dict):
            break
    replayed = list(train_loop.replay(session, speed=1e6))
    assert replayed[0][OUT.index("message")].startswith("Your training was stopped for the replay.")
    unseen = list(training)  # its check and summary went unseen: its last frame (Gradio sends it again) changes nothing
    assert unseen and all(v == train_loop.gr.skip() for frame in unseen for v in frame)
    assert train_state.kept(session) is not None and train_state.running() == 0  # yet it ended and was kept
    assert session.replaying is None
    replay = train_loop.replay(session, speed=1.0)  # real time: the record's points a second or more apart
    assert "Replaying a recorded training" in next(replay)[OUT.index("message")]
    assert session.replaying is not None
    out = frames("counting", "", 4, 5, 1, session=session)
    assert "Trained for 5 steps" in out[-1][OUT.index("message")]
    unseen = list(replay)  # stopped by Start: its last frame changes nothing
    assert unseen and all(v == train_loop.gr.skip() for frame in unseen for v in frame) and session.replaying is None


def test_the_mask_slots_learn(quick):
    """Learning, not just running: over a short training slot 1's loss ends well below where it began, and the AR
    loss does not blow up."""
    metrics = frames("counting", "", 4, 30, 2)[-1][OUT.index("metrics")]
    steps = [p for p in metrics["points"] if "ar_loss" in p]
    mean = lambda points, key: sum(key(p) for p in points) / len(points)  # noqa: E731 - the last steps' mean: noisy
    slot_1 = lambda p: p["slot_losses"][0]  # noqa: E731
    assert mean(steps[-5:], slot_1) < 0.7 * slot_1(steps[0]), [slot_1(p) for p in steps]
    assert mean(steps[-5:], lambda p: p["ar_loss"]) < 1.5 * steps[0]["ar_loss"]


def test_the_start_of_the_app_measures_the_step_0_probe_once_and_says_so_meanwhile(quick, monkeypatch):
    """app.preload's Train part: while it measures the untrained model's probe the status line says so (and the page
    keeps asking); a Start meanwhile says it waits for it; afterwards the probe is read back, not measured again."""
    monkeypatch.setattr(train_loop, "_BASE_PROBES", {})
    measured, release = [], threading.Event()
    from mars_core.evaluation import probe  # base_probe imports decode_probe where it is used

    real = probe.decode_probe

    def slow_probe(*args, **kwargs):
        measured.append(args[0])  # the model probed
        assert release.wait(60)  # released by the test, not timed out
        return real(*args, **kwargs)

    monkeypatch.setattr(probe, "decode_probe", slow_probe)
    preload = threading.Thread(target=train_loop.preload)
    preload.start()
    while not measured:
        time.sleep(0.01)
    text, _ = models.status_markdown()
    assert "Preparing the Train tab's starting point" in text
    started = train_loop.train("counting", "", 4, 5, 1, TrainSession())
    said = []
    for frame in started:  # up to the frame that says it waits (the next one waits for the preload itself)
        said.append(frame[OUT.index("message")])
        if "Waiting for the app's start" in str(said[-1]):
            break
    assert "Waiting for the app's start" in str(said[-1]), said
    release.set()
    preload.join()
    assert "starting point" not in models.status_markdown()[0]
    out = list(started)
    base = models.get_model(train_state.base_name())[0]
    assert out[-1][OUT.index("metrics")]["state"].startswith("done")
    assert sum(model is base for model in measured) == 1  # the base's probe: measured at start, read back at Start
