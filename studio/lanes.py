"""What the Race and Batch tabs share: the recorder behind a lane (Run) and a batch (BatchRun) with its clock, the
lanes' turns (fair to each: Turns), when to redraw the page, the token colours with their CSS and legend chips, the
Run/Stop pair and its wiring, and the guard that turns an error into a message (the walkthrough and the explorer use
the guard too)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import gradio as gr

from studio import models
from studio.inputs import typed_js

log = logging.getLogger("mars_studio")
T = TypeVar("T")  # a frame: what a handler yields to the page

QUICK = dict(concurrency_limit=None, show_progress="hidden", queue=True)  # an event that only flips a switch

# ----------------------------------------------------------------------------- when to redraw

FRAME_SECONDS = 0.25  # at most one update of the page per this much time (and the last): a browser re-drawing
# panes and charts after every forward of a fast model falls behind and stops answering clicks. The interval grows
# with the text on screen (FRAME_SECONDS more per FRAME_TOKENS tokens), the charts come every CHART_SECONDS: a long
# run on a busy machine stays responsive (Stop answers).
FRAME_TOKENS = 400
CHART_SECONDS = 1.0
APP_FRAMES = 6.0  # frames a second the app sends at most, all running generations together: with many visitors
# each page updates less often (13 racing: every 2 s), so the server's 2 cores decode instead of drawing frames
SETTLE_FORWARDS = 1  # forwards after a frame that the lanes' clocks do not time (Turns). Measured in a browser on
# the same 2 cores: the first forward after a frame is slowed most (the page drawing it), the next ones less.
TIMER = time.perf_counter  # what the lanes time their forwards with (tests put a virtual clock here)


@dataclass
class Throttle:
    """The one frame policy of the streaming tabs: due() says whether to send a frame now, then `charts` whether
    that frame redraws the charts (else gr.skip() leaves them as they are). The last frame always comes, in full."""

    shown: float = -math.inf  # when the page, and its charts, were last updated
    charted: float = -math.inf
    charts: bool = True

    def due(self, tokens: int, last: bool) -> bool:
        """A frame now, with `tokens` tokens on screen? (`last`: the run has ended: always.)"""
        now = time.monotonic()
        busy = max(models.TRACKER.active - 1, 0) / APP_FRAMES  # the others' share of the app's frames (alone: 0)
        if not (last or now - self.shown >= max(FRAME_SECONDS * (1 + tokens / FRAME_TOKENS), busy)):
            return False
        self.charts = last or now - self.charted >= max(CHART_SECONDS, busy)
        self.shown, self.charted = now, now if self.charts else self.charted
        return True


# ----------------------------------------------------------------------------- the recorder


@dataclass
class Turns:
    """The lanes' turns on the one machine, and which forwards their clocks keep. The lanes run one forward each in
    turn and the page gets a frame between rounds; right after a frame the page draws it (on the same CPU when the
    browser is local), and whichever forward runs then pays for that work. So each round starts with the next lane
    (a rotation: no lane always runs first after a frame), and the first SETTLE_FORWARDS forwards after a frame are
    not timed: their lane is charged its typical forward instead (Lane.clocked). A forward the scheduler ran in its
    own thread (mars_core.scheduler) is timed by that rule instead: not where it overlapped one of the page's turns
    (from drawing() to framed(): the frame built and sent, the interpreter held meanwhile), whichever lane it was."""

    rounds: int = 0
    since_frame: int = 1 << 30  # forwards run since the last frame was sent
    pages: list[tuple[float, float]] = field(default_factory=list)  # the page's turns so far: (from, to) by clock
    drawing_since: float | None = None  # the page's turn now under way began then
    clock: Callable[[], float] = time.perf_counter  # the scheduler's clock (StreamEvent.began); tests put a virtual one

    def order(self, keys: list[T]) -> list[T]:
        """This round's order of the lanes: the last round's, shifted by one."""
        k = self.rounds % len(keys)
        self.rounds += 1
        return [*keys[k:], *keys[:k]]

    def timed(self) -> bool:
        """Does the forward about to run count for its lane's clock? (Once per forward run.)"""
        self.since_frame += 1
        return self.since_frame > SETTLE_FORWARDS

    def drawing(self) -> None:
        """The page's turn begins: a frame is built now, then sent (framed() once the page asks for the next)."""
        self.drawing_since = self.clock()

    def framed(self) -> None:
        """A frame was sent just now."""
        self.since_frame = 0
        if self.drawing_since is not None:
            self.pages.append((self.drawing_since, self.clock()))
            self.drawing_since = None

    def clear(self, began: float, seconds: float) -> bool:
        """Whether a forward run elsewhere from `began` for `seconds` overlapped none of the page's turns."""
        for start, end in reversed(self.pages):
            if end <= began:  # this turn and every earlier one ended before the forward began
                return True
            if start < began + seconds:
                return False
        return True


@dataclass
class Lane:
    """One generation's event stream, timed by its own forwards only (the lanes take turns on one machine, Turns): what
    a race lane (race_state.Run) and a batch side (batch_state.BatchRun) record their forwards with."""

    name: str
    events: Iterator
    tokenizer: Any
    finished: bool = field(default=False, kw_only=True)
    spent: list[float] = field(default_factory=list, kw_only=True)  # per forward: its seconds, as measured
    timed: list[bool] = field(default_factory=list, kw_only=True)  # per forward: do its seconds count (Turns)
    shared: list[int] = field(default_factory=list, kw_only=True)  # per forward: the lanes it fed (other visitors')

    def next_event(self, turns: Turns | None = None) -> Any | None:
        """Run one forward, timing only this call (whether that time counts: `turns`, Turns.timed, or for a forward
        the scheduler ran, Turns.clear; None: it counts); None once the stream has ended (finished)."""
        timed = turns is None or turns.timed()
        start = TIMER()
        try:
            event = next(self.events)
        except StopIteration:
            self.finished = True
            return None
        shared = getattr(event, "seconds", None)  # a forward the scheduler ran: its own seconds, whatever we waited
        self.spent.append(TIMER() - start if shared is None else shared)
        began = getattr(event, "began", None)
        self.timed.append(timed if shared is None else turns is None or began is None or turns.clear(began, shared))
        self.shared.append(getattr(event, "shared", 1))
        return event

    def close(self) -> None:
        """End the stream now (Stop): events a scheduler ran ahead are not shown, and it takes the request out."""
        self.finished = True
        close = getattr(self.events, "close", None)
        if close is not None:
            close()

    def typical(self) -> float | None:
        """The lane's typical forward: the mean of its timed forwards after the first (which also reads the prompt);
        None while there is none."""
        kept = [s for s, timed in zip(self.spent[1:], self.timed[1:]) if timed]
        return sum(kept) / len(kept) if kept else None

    def clocked(self) -> list[float]:
        """Each forward's seconds as the lane's clock counts them: as measured when timed (and the first), else the
        lane's typical forward (as measured while it has none)."""
        typical = self.typical()
        return [s if timed or i == 0 or typical is None else typical
                for i, (s, timed) in enumerate(zip(self.spent, self.timed))]

    @property
    def own_seconds(self) -> float:
        """The lane's own seconds: its clock over all its forwards (not the other lanes' turns between them)."""
        return sum(self.clocked())

    def pieces(self, ids: list[int], text: str) -> list[str]:
        """A forward's committed tokens as text pieces, one per token; a character split over tokens makes them one
        piece (the forward's text)."""
        pieces = [self.tokenizer.decode([i], skip_special_tokens=True) for i in ids]
        return pieces if "".join(pieces) == text else [text]

    def per_second(self, tokens: int) -> float:
        """Tokens per second of this stream's own forward time."""
        return tokens / self.own_seconds if self.own_seconds > 0 else 0.0


# ----------------------------------------------------------------------------- the token colours


# Background of a forward's tokens by how many tokens that forward committed: (most tokens, colour, legend).
COUNT_COLOURS = (
    (1, "#e8ebf0", "1"), (2, "#c9e2ff", "2"), (3, "#93c5fd", "3"), (4, "#60a5fa", "4"),
    (8, "#c4b5fd", "5–8"), (10**9, "#f9a8d4", "9+"),
)


def count_colour(count: int) -> str:
    """Background colour for a forward that committed `count` tokens."""
    return next(colour for most, colour, _ in COUNT_COLOURS if count <= most)


def count_class(count: int) -> str:
    """The CSS class of that colour (PANE_CSS): a class per token keeps a long answer's HTML small."""
    return f"n{next(i for i, (most, _, _) in enumerate(COUNT_COLOURS) if count <= most)}"


PANE_CSS = (  # the panes' token styles, in the page's CSS once instead of inline on every token
    ".mars-pane .tk{padding:2px 0;box-decoration-break:clone;-webkit-box-decoration-break:clone}"
    ".mars-pane .fs{border-top-left-radius:4px;border-bottom-left-radius:4px;margin-left:2px}"
    ".mars-pane .ls{border-top-right-radius:4px;border-bottom-right-radius:4px}"
    ".mars-pane .dep{outline:2px solid #dc2626}.mars-pane .low{border-bottom:2px dotted #dc2626}"
    + "".join(f".mars-pane .n{i}{{background:{colour}}}" for i, (_, colour, _) in enumerate(COUNT_COLOURS))
)


def chip(label: str, colour: str) -> str:
    """A legend chip: the label on its colour."""
    return (f'<span style="background:{colour};display:inline-block;padding:1px 8px;margin:0 3px;border-radius:4px">'
            f"{label}</span>")


def legend_html(lead: str, rest: str, style: str = "") -> str:
    """A colour legend: `lead`, a chip per count colour, then `rest`."""
    chips = "".join(chip(label, colour) for _, colour, label in COUNT_COLOURS)
    return f'<div style="font-size:0.9em{style}">{lead}: {chips} &nbsp;·&nbsp; {rest}</div>'


# ----------------------------------------------------------------------------- Run, Stop and the trace


def run_and_stop(tab: str, run_label: str) -> tuple[gr.Button, gr.Button]:
    """The Run and Stop buttons in a column beside a tab's prompt box (elem_ids <tab>-run and <tab>-stop)."""
    with gr.Column(scale=1, min_width=120):
        return (gr.Button(run_label, variant="primary", elem_id=f"{tab}-run"),
                gr.Button("Stop", variant="stop", elem_id=f"{tab}-stop"))


def trace_json() -> gr.JSON:
    """The per-forward data of a run, folded away (clients and tests read the same JSON)."""
    with gr.Accordion("Per-forward data (JSON)", open=False):
        return gr.JSON(label="trace", show_label=False)


def wire(run: gr.Button, stop: gr.Button, *, handlers: tuple[Callable, Callable], inputs: list, outputs: list,
         api_names: tuple[str, str]) -> None:
    """A streaming tab's Run and Stop: `handlers` and `api_names` are (run, stop), the session State last of
    `inputs`. No Gradio concurrency limit: the run handler takes an app-wide generation slot itself
    (models.in_a_slot), so a run exists from the moment it is submitted and a /set_threshold sent with it is not
    lost. Stop ends the run from inside (its controls): Gradio's `cancels` would mark every output as an error."""
    run.click(models.gpu(handlers[0]), inputs, outputs, api_name=api_names[0], show_progress="minimal",
              concurrency_limit=None, js=typed_js(inputs, True))
    stop.click(handlers[1], inputs[-1], None, api_name=api_names[1], **QUICK)


# ----------------------------------------------------------------------------- the error guard


def guarded(work: Iterator[T], failure: Callable[[str], T], what: str) -> Iterator[T]:
    """`work`'s frames; an error ends it with one failure frame instead of a traceback in the UI: a ValueError (an
    input mars_core refused, a model that did not load) with its own message, anything else as "<what> failed: …"
    (the server log has the traceback)."""
    try:
        yield from work
    except ValueError as err:
        yield failure(str(err))
    except Exception as err:
        log.exception("%s failed", what)
        yield failure(f"{what} failed: {type(err).__name__}: {err}")
