"""The scheduler (continuous batching): concurrent callers share forwards, each gets its answer alone token for token;
Stop and a changed τ act on their own request only; the cap holds and the queue says who is ahead."""

import threading
import time

import pytest

from mars_core import DecodeControl, generate
from mars_core.decoding.joined import Joined
from mars_core.runtime.curve import CostCurve
from mars_core.scheduler import PACE, UNTIMED_CAP, Scheduler, lanes_cap

from trained import ANSWERS, mars_trained

PROMPTS = list(ANSWERS)


@pytest.fixture(scope="module")
def trained(tokenizer):
    return mars_trained("qwen2", tokenizer)


def together(scheduler, jobs):
    """Run each job (prompt, strategy, control) in its own thread at once; their token ids and events. The
    scheduler's thread starts its first turn once every job is in (however the threads are scheduled)."""
    out = [None] * len(jobs)
    start, all_in, submitted, submit, turn = threading.Barrier(len(jobs)), threading.Event(), [], scheduler.submit, \
        scheduler.turn

    def counted(*args, **kwargs):
        request = submit(*args, **kwargs)
        submitted.append(request)
        if len(submitted) == len(jobs):
            all_in.set()
        return request

    scheduler.submit, scheduler.turn = counted, lambda group: all_in.wait(60) and turn(group)

    def one(k, prompt, strategy, control):
        start.wait()
        events = list(scheduler.stream(prompt, strategy=strategy, max_new_tokens=40, control=control))
        out[k] = ([t for e in events for t in e.token_ids[0]], events)

    threads = [threading.Thread(target=one, args=(k, *job)) for k, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return out


@pytest.mark.parametrize("strategy,tau", [("ar", 1.0), ("verified", 0.3), ("sliding", 0.7)])
def test_concurrent_requests_share_forwards_and_keep_their_answers(trained, tokenizer, strategy, tau):
    alone = [generate(trained, tokenizer, p, strategy=strategy, threshold=tau, max_new_tokens=40).token_ids[0]
             for p in PROMPTS]
    scheduler = Scheduler(trained, tokenizer)
    got = together(scheduler, [(p, strategy, DecodeControl(threshold=tau)) for p in PROMPTS])
    assert [ids for ids, _ in got] == alone
    assert scheduler.widest >= 2  # forwards were shared
    shared = [e.shared for _, events in got for e in events]
    assert max(shared) == scheduler.widest and all(e.seconds > 0 for _, events in got for e in events)
    assert all(events[-1].done[0] for _, events in got)


@pytest.mark.parametrize("strategy,tau", [("ar", 1.0), ("verified", 0.3), ("sliding", 0.7)])
def test_newcomers_with_one_prompt_share_its_prefill_and_keep_their_answers(trained, tokenizer, monkeypatch,
                                                                            strategy, tau):
    """Requests that join at one turn with the same prompt (a sliding one: and the same τ) are prefilled once, the
    sample copied for each; every answer is its answer alone, and each copy is its own from there on: one stopped
    after its prefill leaves the others' answers whole (a class pressing Run on one prompt)."""
    prompts = [PROMPTS[1], PROMPTS[0], PROMPTS[0], PROMPTS[0]]
    taus = [tau, tau, tau, 1.0 if strategy == "sliding" else tau]  # sliding: the last at its own τ, its own prefill
    alone = [generate(trained, tokenizer, p, strategy=strategy, threshold=t, max_new_tokens=40).token_ids[0]
             for p, t in zip(prompts, taus)]
    prefilled, start = [], Joined.start
    monkeypatch.setattr(Joined, "start", classmethod(
        lambda cls, model, ps, *args: prefilled.append(len(ps)) or start(model, ps, *args)))
    scheduler = Scheduler(trained, tokenizer)
    controls = [DecodeControl(threshold=t) for t in taus]
    with scheduler.lock:  # all four join at the thread's first turn
        streams = [scheduler.stream(p, strategy=strategy, max_new_tokens=40, control=c)
                   for p, c in zip(prompts, controls)]
    firsts = [next(s) for s in streams]  # the prefill's event, each its own
    controls[2].stop()  # a copy of PROMPTS[0]'s sample leaves
    got = [f.token_ids[0] + [t for e in s for t in e.token_ids[0]] for f, s in zip(firsts, streams)]
    assert [got[k] for k in (0, 1, 3)] == [alone[k] for k in (0, 1, 3)]
    assert got[2] == alone[2][: len(got[2])]  # what it got before it left
    assert prefilled == [3 if strategy == "sliding" else 2] and scheduler.widest == 4


def test_stop_and_threshold_act_on_their_own_request(trained, tokenizer):
    """Stopped, a request's stream ends at once (nothing the thread ran ahead is read); a τ changed acts on that
    request's next forward on. The thread waits after the prefill until the changes are made, so nothing here
    depends on how far it ran ahead of its readers."""
    scheduler = Scheduler(trained, tokenizer)
    controls = [DecodeControl(threshold=0.9) for _ in PROMPTS]
    alone = [generate(trained, tokenizer, p, strategy="sliding", threshold=0.9, max_new_tokens=40).token_ids[0]
             for p in PROMPTS]
    changed, turn = threading.Event(), scheduler.turn
    scheduler.turn = lambda group: (scheduler.turns < 2 or changed.wait(60)) and turn(group)
    with scheduler.lock:  # all five join at the thread's first turn: one prefill
        streams = [scheduler.stream(p, strategy="sliding", max_new_tokens=40, control=c)
                   for p, c in zip(PROMPTS, controls)]
    firsts = [next(s) for s in streams]  # every request has had its prefill; the thread waits at its second turn
    controls[1].stop()
    controls[2].threshold = 1.0  # from its next forward on: one token a forward
    changed.set()
    rest = [list(s) for s in streams]
    ids = [f.token_ids[0] + [t for e in r for t in e.token_ids[0]] for f, r in zip(firsts, rest)]
    assert rest[1] == []  # stopped: its stream ends
    for k in (0, 3, 4):
        assert ids[k] == alone[k]
    assert ids[1] == alone[1][: len(ids[1])]
    n = len(firsts[2].token_ids[0])
    assert ids[2][:n] == alone[2][:n]
    assert rest[2] and all(e.threshold == 1.0 and len(e.token_ids[0]) == 1 for e in rest[2])
    assert all(e.threshold == 0.9 for e in rest[0])  # the others' τ stays theirs
    assert max(len(e.token_ids[0]) for e in rest[0] + rest[3] + rest[4]) > 1  # ... and theirs still commit several


def test_a_request_whose_own_settings_fail_fails_alone(trained, tokenizer):
    """A τ out of range set mid-run (DecodeControl checks it as the next forward reads it) is that request's error:
    its reader gets it, and the requests sharing its forwards go on to their answers alone."""
    scheduler = Scheduler(trained, tokenizer)
    controls = [DecodeControl(threshold=0.9) for _ in PROMPTS[:3]]
    alone = [generate(trained, tokenizer, p, strategy="sliding", threshold=0.9, max_new_tokens=40).token_ids[0]
             for p in PROMPTS[:3]]
    changed, turn = threading.Event(), scheduler.turn
    scheduler.turn = lambda group: (scheduler.turns < 2 or changed.wait(60)) and turn(group)
    with scheduler.lock:  # all three join at the thread's first turn
        streams = [scheduler.stream(p, strategy="sliding", max_new_tokens=40, control=c)
                   for p, c in zip(PROMPTS, controls)]
    firsts = [next(s) for s in streams]
    controls[1].threshold = 0.0  # not a τ: refused when the next forward reads it
    changed.set()
    with pytest.raises(ValueError, match="threshold"):
        list(streams[1])
    for k in (0, 2):
        assert firsts[k].token_ids[0] + [t for e in streams[k] for t in e.token_ids[0]] == alone[k]


def test_a_stop_while_others_leave_ends_that_stream(trained, tokenizer):
    """A Stop that lands while the thread sorts out the requests leaving (from another thread, between two reads of
    who leaves) still ends that request: its reader is not left waiting for an end that never comes."""
    from mars_core.scheduler import _END

    scheduler = Scheduler(trained, tokenizer)
    controls = [DecodeControl(threshold=0.9) for _ in PROMPTS[:3]]
    changed, turn = threading.Event(), scheduler.turn
    scheduler.turn = lambda group: (scheduler.turns < 2 or changed.wait(60)) and turn(group)
    with scheduler.lock:
        streams = [scheduler.stream(p, strategy="sliding", max_new_tokens=40, control=c)
                   for p, c in zip(PROMPTS, controls)]
    [next(s) for s in streams]  # every request has had its prefill; the thread waits at its second turn
    late, reads = streams[2].request, []

    class StopsWhileRead(type(late)):  # stopped from the thread's second look at it on
        @property
        def leaving(self) -> bool:
            reads.append(True)
            return len(reads) > 1

    streams[0].close()  # a request leaves: the thread sorts out who at its next turn
    late.__class__ = StopsWhileRead
    changed.set()
    items = []
    while not items or items[-1] is not _END:
        items.append(late.events.get(timeout=30))  # queue.Empty: its end never came
    assert all(late not in g.rows for g in scheduler.groups.values())


def test_a_stopped_stream_shows_nothing_the_thread_ran_ahead(trained, tokenizer):
    """The thread runs ahead of a slow reader (its events queue); Stop ends the stream at once all the same."""
    scheduler, control = Scheduler(trained, tokenizer), DecodeControl(threshold=0.9)
    streamed = scheduler.stream(PROMPTS[0], strategy="sliding", max_new_tokens=40, control=control)
    first = next(streamed)
    deadline = time.monotonic() + 60
    while streamed.request.events.qsize() < 2 and time.monotonic() < deadline:  # two more forwards queued, unread
        time.sleep(0.01)
    assert streamed.request.events.qsize() >= 2
    control.stop()
    assert list(streamed) == [] and first.token_ids[0]


def test_the_cap_and_the_queue(trained, tokenizer):
    scheduler = Scheduler(trained, tokenizer, cap=2)
    alone = [generate(trained, tokenizer, p, strategy="verified", max_new_tokens=40).token_ids[0] for p in PROMPTS]
    got = together(scheduler, [(p, "verified", DecodeControl(threshold=0.3)) for p in PROMPTS])
    assert [ids for ids, _ in got] == alone
    assert scheduler.widest == 2
    # four more at once: two join at the next turn; the others wait for room, those queued before them counted
    scheduler = Scheduler(trained, tokenizer, cap=2)  # a new one: nothing of the last round is still leaving
    with scheduler.lock:  # the thread admits nobody meanwhile
        streams = [scheduler.stream(p, strategy="verified", max_new_tokens=40) for p in PROMPTS[:4]]
        assert [s.ahead() for s in streams] == [None, None, 2, 3]
    got = [[t for e in s for t in e.token_ids[0]] for s in streams]
    assert got == alone[:4] and scheduler.widest == 2


def test_the_queue_counts_only_the_requests_that_stay(trained, tokenizer):
    """Where a queued request stands: requests stopped before it, waiting or running, are not counted (the thread's
    next turn takes them out); a stopped one stands nowhere."""
    scheduler = Scheduler(trained, tokenizer, cap=1)
    controls = [DecodeControl(threshold=0.3) for _ in range(4)]
    with scheduler.lock:  # the thread admits nobody meanwhile
        streams = [scheduler.stream(PROMPTS[0], strategy="verified", max_new_tokens=8, control=c) for c in controls]
        assert [s.ahead() for s in streams] == [None, 1, 2, 3]
        controls[1].stop()
        assert [s.ahead() for s in streams] == [None, None, 1, 2]
        controls[0].stop()
        assert [s.ahead() for s in streams] == [None, None, None, 1]
    assert [len([t for e in s for t in e.token_ids[0]]) > 0 for s in streams] == [False, False, True, True]


def test_refused_requests_say_why(trained, tokenizer):
    scheduler = Scheduler(trained, tokenizer)
    with pytest.raises(ValueError, match="greedily"):
        scheduler.stream("hi", max_new_tokens=40, control=DecodeControl(threshold=0.3, temperature=0.7))
    with pytest.raises(ValueError, match="not 'block'"):
        scheduler.stream("hi", strategy="block", max_new_tokens=40)
    with pytest.raises(ValueError, match="prompt too long"):
        scheduler.stream("hi " * 300, max_new_tokens=40)


def test_the_cap_comes_from_the_cost_curve():
    flat = CostCurve.from_function(lambda b, w: 1.0, batch_sizes=(1, 16), widths=(1, 4, 8))
    steep = CostCurve.from_function(lambda b, w: b * w, batch_sizes=(1, 16), widths=(1, 4, 8))
    assert lanes_cap(flat, 4) == 32  # a wider forward costs nothing more: the most
    assert lanes_cap(steep, 4) == PACE and lanes_cap(steep, 4, pace=3.0) == 3  # cost grows with each: PACE
    assert lanes_cap(None, 4) == UNTIMED_CAP


def test_each_request_keeps_its_confidence_measure(trained, tokenizer):
    controls = [DecodeControl(threshold=0.5, confidence=c) for c in ("prob", "entropy", "margin")]
    alone = [generate(trained, tokenizer, PROMPTS[0], strategy="sliding", max_new_tokens=40, control=c).token_ids[0]
             for c in controls]
    got = together(Scheduler(trained, tokenizer), [(PROMPTS[0], "sliding", c) for c in controls])
    assert [ids for ids, _ in got] == alone


def test_a_request_stopped_in_the_queue_ends_without_waiting_for_room(trained, tokenizer):
    scheduler = Scheduler(trained, tokenizer, cap=1)
    control = DecodeControl(threshold=0.3)
    with scheduler.lock:
        first = scheduler.stream(PROMPTS[4], strategy="verified", max_new_tokens=200)
        queued = scheduler.stream(PROMPTS[0], strategy="verified", max_new_tokens=200, control=control)
        assert queued.ahead() == 1
    next(first)  # the first runs: the forward is full
    control.stop()
    assert list(queued) == []  # ended at the thread's next turn, the first still running or not
    assert [t for e in first for t in e.token_ids[0]]
