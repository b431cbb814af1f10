"""Continuous batching: one thread runs every request of a model; requests of one strategy share each forward.

    scheduler = Scheduler(model, tokenizer)
    for event in scheduler.stream("List the days", strategy="verified", max_new_tokens=48, control=control):
        ...                                   # StreamEvents, as mars_core.stream gives them

Requests with the same strategy, block size, token budget (and, for verified, threshold) form a group; the group
has one running decode (decoding/joined.py). Each turn of the thread visits every group once: its running decode
takes one forward for all its requests, then the requests that arrived since run their first forward (the prefill)
together and join it. A request leaves when its answer ends, its control is stopped, or its reader goes away. At
most `cap` requests share a group's forward; the others wait, first come first served (`ahead` says how many are
before one). Where the runtime is invariant (its width check), each request's answer is the one it gets alone,
token for token: the forward gives a row the same numbers in any batch. Greedy decoding only.

Each event says what the forward cost (`seconds`, measured around the shared forward) and how many requests fed it
(`shared`): the fair clock of a request is its forwards' seconds, not the wall time it waited for other groups.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from .decoding import strategies
from .decoding.control import DecodeControl
from .decoding.joined import KINDS, Joined, cache_length
from .decoding.spec import DecodeSpec
from .decoding.verified.plan import one_token_only
from .generate import (
    DecodeOptions,
    StreamEvent,
    TextTracker,
    check_request,
    decode_spec,
    encode_prompt,
    event_of,
    live_control,
)
from .runtime import Runtime, prepared
from .runtime.curve import CostCurve

log = logging.getLogger("mars_core")

PACE = 8.0  # the cap: a forward of `cap` requests costs at most this many times one request's (cost curve), so a
# request in a full forward still advances at least 1/PACE as fast as alone; wider caps serve a class sooner
# (docs/app.md#a-class-racing-at-once)
MOST = 32  # ... and never more than this many requests a forward
UNTIMED_CAP = 8  # the cap where the runtime has no cost curve
IDLE_SECONDS = 2.0  # the thread ends after this long with nothing to run
_END = object()


def lanes_cap(curve: CostCurve | None, block_size: int, pace: float = PACE, most: int = MOST) -> int:
    """The most requests one forward feeds: the largest batch whose forward at a τ lane's width (B: the last token
    and B-1 masks) costs at most `pace` times one request's, by the curve (UNTIMED_CAP without one)."""
    if curve is None:
        return UNTIMED_CAP
    width = max(block_size, 1)
    alone = curve.at(1, [width])[0]
    return max(b for b in range(1, most + 1) if b == 1 or curve.at(b, [width])[0] <= pace * alone)


@dataclass(eq=False)
class Request:
    """One caller's decode: its prompt, its live settings, and the queue its events go to."""

    ids: list[int]
    control: DecodeControl
    tracker: TextTracker
    events: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    began: float = field(default_factory=time.perf_counter)
    forwards: int = 0
    closed: bool = False  # its reader went away (the stream was closed)
    failed: Exception | None = None  # what its own settings or text raised: its reader gets it, the others go on

    @property
    def leaving(self) -> bool:
        """Stopped by its caller, or nobody reads it any more."""
        return self.closed or self.control.stopped


@dataclass(eq=False)
class Group:
    """The requests of one strategy, block size, budget (and verified's threshold): a running decode of those in
    it (rows: its samples, in order) and those waiting to join."""

    kind: str
    spec: DecodeSpec
    threshold: float  # verified's (it shapes the trees only); sliding's are per request
    confidence: str  # how a prediction's confidence is read ("prob", "entropy", "margin"): the group's requests'
    rows: list[Request] = field(default_factory=list)
    running: Joined | None = None
    waiting: deque[Request] = field(default_factory=deque)
    joining: list[Request] = field(default_factory=list)  # taken from the queue, prefilling: rows once their
    # first forward ran


class Streamed(Iterator[StreamEvent]):
    """One request's events as the thread puts them (an iterator); ahead() says its place in the queue; closing it
    (or dropping it) takes the request out."""

    def __init__(self, scheduler: Scheduler, request: Request) -> None:
        self.scheduler, self.request, self.ended = scheduler, request, False

    def __next__(self) -> StreamEvent:
        if self.ended or self.request.control.stopped:  # Stop ends the stream now: what the thread ran ahead of
            self.close()  # its reader is not shown (as stream(), whose decoder ends before its next forward)
            raise StopIteration
        item = self.request.events.get()
        if item is _END or isinstance(item, BaseException):
            self.close()
            if item is _END:
                raise StopIteration
            raise item
        return item

    def ahead(self) -> int | None:
        """Requests of its group waiting before it while it waits for room (None: it runs, or joins at the thread's
        next turn)."""
        return self.scheduler.ahead(self.request)

    def close(self) -> None:
        self.ended = self.request.closed = True

    def __del__(self) -> None:
        self.request.closed = True


class Scheduler:
    """One model's requests, decoded by one thread in shared forwards (module doc)."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, runtime: Runtime | None = None,
                 cap: int | None = None) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.runtime = runtime or prepared(model)
        self.cap = cap or lanes_cap(self.runtime.cost, 4)
        self.groups: dict[tuple, Group] = {}
        self.lock = threading.Condition()
        self.thread: threading.Thread | None = None
        self.forwards = 0  # forwards run (prefills included)
        self.widest = 0  # the most requests one forward fed
        self.turns = 0  # turns of the thread so far

    # ------------------------------------------------------------------------- the callers' side

    def stream(self, prompt: Any, *, strategy: str = "verified", block_size: int = 4, max_new_tokens: int = 256,
               control: DecodeControl | None = None, threshold: float | None = None, chat: bool = True
               ) -> Streamed:
        """StreamEvents of one prompt's decode, run in shared forwards (a ValueError for what stream() refuses, and
        for sampling: the scheduler decodes greedily)."""
        return Streamed(self, self.submit(prompt, strategy=strategy, block_size=block_size,
                                          max_new_tokens=max_new_tokens, control=control, threshold=threshold,
                                          chat=chat))

    def submit(self, prompt: Any, *, strategy: str, block_size: int, max_new_tokens: int,
               control: DecodeControl | None, threshold: float | None, chat: bool) -> Request:
        """Validate and queue one request (stream() reads its events)."""
        options = DecodeOptions(strategy=strategy, block_size=block_size, max_new_tokens=max_new_tokens,
                                control=control, threshold=threshold if control is None else None, chat=chat,
                                runtime=self.runtime)
        control = live_control(options)
        if control.temperature > 0:
            raise ValueError("the scheduler decodes greedily (temperature 0): a sampled request decodes on its own")
        kind = strategy
        if kind not in KINDS:
            raise ValueError(f"the scheduler runs {', '.join(KINDS)} decoding, not {strategy!r}")
        ids = [encode_prompt(self.tokenizer, prompt, chat)]
        block = strategies.strategy(strategy).block_size(block_size)
        check_request(self.model, self.tokenizer, ids, strategy, block, max_new_tokens)
        if kind == "verified" and one_token_only(self.runtime.cost, 1, block):
            kind = "ar"  # no width pays here: verified is one-token decoding (a group of its own)
        settings = control.snapshot()
        tau = settings.threshold
        spec = decode_spec(self.model, self.tokenizer, options, block)
        # a static runtime's rows read every slot of the cache: only requests of one cache length share its forwards
        slots = cache_length(len(ids[0]), spec, kind) if self.runtime.static else None
        key = (strategy, kind, block, max_new_tokens, tau if strategy == "verified" else None, settings.confidence,
               slots)
        request = Request(ids[0], control, TextTracker(self.tokenizer, 1))
        with self.lock:
            group = self.groups.get(key)
            if group is None:
                group = self.groups[key] = Group(kind, spec, tau, settings.confidence)
            group.waiting.append(request)
            self.lock.notify_all()
            if self.thread is None:
                # not a daemon: it ends when idle (a daemon thread left in torch at exit aborts the process)
                thread = threading.Thread(target=self.loop, name="mars-scheduler")
                try:
                    thread.start()
                except BaseException:  # no thread to run it: the request is refused, the next one tries again
                    group.waiting.remove(request)
                    raise
                self.thread = thread
        return request

    def ahead(self, request: Request) -> int | None:
        """How many requests of its group wait before it while it waits for room (None: it runs, joins at the
        next turn, or is leaving). Requests stopped or dropped are not counted: the next turn takes them out."""
        with self.lock:
            for group in self.groups.values():
                if request in group.waiting and not request.leaving:
                    before = [r for r in group.waiting if not r.leaving].index(request)
                    staying = sum(not r.leaving for r in (*group.rows, *group.joining))
                    return before if staying + before >= self.cap else None
        return None

    # ------------------------------------------------------------------------- the thread

    def loop(self) -> None:
        """Visit every group once a turn while any has work; idle for IDLE_SECONDS, the thread ends (the next
        request starts another). Should the thread die, what it held gets the error and the next request starts
        another."""
        try:
            self.turns_until_idle()
        except BaseException as err:
            log.exception("the scheduler's thread failed")
            with self.lock:
                held = [r for g in self.groups.values() for r in (*g.rows, *g.joining, *g.waiting)]
                self.groups, self.thread = {}, None
            for request in held:
                request.events.put(err)
            raise

    def turns_until_idle(self) -> None:
        """The thread's turns, until it has been idle for IDLE_SECONDS."""
        while True:
            with self.lock:
                if not self.lock.wait_for(lambda: any(g.rows or g.waiting for g in self.groups.values()),
                                          IDLE_SECONDS):
                    self.thread = None
                    return
                self.groups = {k: g for k, g in self.groups.items() if g.rows or g.waiting}  # idle ones go
                groups = list(self.groups.values())
                self.turns += 1  # each turn starts with the next group: none always runs first (while a page draws)
                k = self.turns % len(groups)
                groups = groups[k:] + groups[:k]
            for group in groups:
                try:
                    self.turn(group)
                except Exception as err:  # noqa: BLE001 - the group's callers get the error, the thread goes on
                    log.exception("a shared decode failed")
                    with self.lock:
                        failed, group.rows, group.running = group.rows, [], None
                    for request in failed:
                        request.events.put(err)

    @torch.inference_mode()
    def turn(self, group: Group) -> None:
        """One forward of the group's running decode, then the newcomers' prefill, after which they join it."""
        going = [r.leaving for r in group.rows]  # read once: a Stop from another thread may land meanwhile
        leaving = [r for r, gone in zip(group.rows, going) if gone]
        if leaving:
            keep = [i for i, gone in enumerate(going) if not gone]
            with self.lock:
                group.running = group.running.take(keep) if keep else None
                group.rows = [group.rows[i] for i in keep]
            for request in leaving:
                request.events.put(_END)
        if group.running is not None:
            running, rows = self.advance(group, group.running, group.rows)
            with self.lock:
                group.running, group.rows = running, rows
        with self.lock:
            for request in [r for r in group.waiting if r.leaving]:  # stopped or dropped while queued: ended now
                group.waiting.remove(request)
                request.events.put(_END)
            new: list[Request] = []
            while group.waiting and len(group.rows) + len(new) < self.cap:
                new.append(group.waiting.popleft())
            group.joining = new
        if new:
            self.join(group, new)

    def join(self, group: Group, new: list[Request]) -> None:
        """The newcomers' prefill (a decode of their own), then they join the group's running decode; a failure
        there is theirs alone (the group's rows go on)."""
        joined: list[Request] = []
        try:
            taus = self.thresholds(group, new)
            # newcomers with one prompt (and τ) share one prefill: its sample is replicated for each of them after
            # the forward (a row's numbers are its own in any batch, so each copy is that request's prefill alone)
            firsts: dict[tuple, int] = {}
            sample = [firsts.setdefault((tuple(r.ids), tau), len(firsts)) for r, tau in zip(new, taus)]
            prompts = [list(ids) for ids, _ in firsts]
            fresh = Joined.start(self.model, prompts, group.spec, group.kind, group.threshold)
            fresh, joined = self.advance(group, fresh, new, taus, sample)
            if fresh is not None:
                merged = fresh if group.running is None else group.running.merge(fresh)
                with self.lock:
                    group.running, group.rows = merged, group.rows + joined
        except Exception as err:  # noqa: BLE001 - the newcomers get the error
            log.exception("a prefill failed")
            for request in new:
                request.events.put(err)
        finally:
            with self.lock:
                group.joining = []

    @staticmethod
    def thresholds(group: Group, rows: list[Request]) -> list[float]:
        """Each request's τ for the coming forward (a sliding request's own, as its caller has it now). A request
        whose settings fail their check (a τ out of range set mid-run) fails alone: it feeds no masks this forward
        and leaves after it with its error (advance)."""
        taus = []
        for r in rows:
            try:
                taus.append(r.control.snapshot().threshold if group.kind == "sliding" else group.threshold)
            except Exception as err:  # noqa: BLE001 - its own settings: its error, the others' forward goes on
                r.failed = err
                taus.append(1.0)
        return taus

    def advance(self, group: Group, running: Joined, rows: list[Request], taus: list[float] | None = None,
                sample: list[int] | None = None) -> tuple[Joined | None, list[Request]]:
        """One forward of `running`, each request its event; returns the decode of the requests whose answers go on
        (None: none) and those requests. Request i is sample sample[i] of `running` (None: sample i); a sample that
        several requests share (one prompt's prefill) is copied for each of them after the forward."""
        taus = self.thresholds(group, rows) if taus is None else taus
        sample = list(range(len(rows))) if sample is None else sample
        began = time.perf_counter()
        step = running.step([taus[sample.index(j)] for j in range(running.size)], group.confidence)
        running.finish()
        seconds = time.perf_counter() - began
        self.forwards, self.widest = self.forwards + 1, max(self.widest, len(rows))
        now = time.perf_counter()
        for i, request in enumerate(rows):
            if request.failed is not None:
                continue
            try:
                event = event_of(step, request.forwards, now - request.began, request.tracker, [sample[i]],
                                 threshold=taus[i] if group.kind == "sliding" else step.threshold,
                                 seconds=seconds, began=began, shared=len(rows))
            except Exception as err:  # noqa: BLE001 - its own text (its tracker): its error, the others go on
                request.failed = err
                continue
            request.forwards += 1
            request.events.put(event)
        done = running.answer.done.tolist()
        for i, request in enumerate(rows):
            if request.failed is not None:
                request.events.put(request.failed)
            elif done[sample[i]]:
                request.events.put(_END)
        keep = [i for i in range(len(rows)) if not done[sample[i]] and rows[i].failed is None]
        if len(keep) == len(rows) and sample == list(range(running.size)):
            return running, rows
        return (running.take([sample[i] for i in keep]) if keep else None), [rows[i] for i in keep]
