"""What a race keeps: a visitor's session (the slider's τ, the adapt switch, the running lanes' controls), each
lane's record of its forwards (Run), and the facts read off them (where an answer departs from AR's, the verified
lane's drafts, the changes of τ, the acceptance by draft position)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from mars_core import DecodeControl, StreamEvent
from mars_core.evaluation.metrics import draft_acceptance
from mars_core.serving import adaptive_threshold
from studio import models
from studio.lanes import Lane, Turns

LANES = ("ar", "mars", "verified")
LANE_NAMES = {"ar": "AR", "mars": "MARS τ", "verified": "MARS verified"}


@dataclass
class RaceSession:
    """One visitor's race state (the tab's gr.State): what the controls last said, and the running race's lanes."""

    threshold: float = 0.9  # the τ slider's value (or the last /set_threshold)
    threshold_at: float = -math.inf  # when set_threshold last set it (time.monotonic): a race sent with it keeps it
    adapt: bool = False  # "adapt to load": the MARS τ lane's threshold lowered while other generations run
    ar: DecodeControl | None = None  # the running race's AR lane (None: no race running)
    mars: DecodeControl | None = None  # its MARS τ lane: set_threshold changes this one's threshold mid-run
    verified: DecodeControl | None = None  # its MARS verified lane

    def running(self) -> list[DecodeControl]:
        """The running race's lanes' controls (none when no race runs)."""
        return [c for c in (self.ar, self.mars, self.verified) if c is not None]

    def threshold_in_force(self) -> float:
        """The session's threshold, lowered by the serving policy when "adapt to load" is on."""
        return adaptive_threshold(self.threshold, models.TRACKER.active) if self.adapt else self.threshold

    def apply_threshold(self) -> None:
        """The running MARS τ lane (if any) takes the threshold in force from its next forward."""
        lane = self.mars  # read once: the race's end may clear it from another thread meanwhile
        if lane is not None:
            lane.threshold = self.threshold_in_force()


@dataclass
class Run(Lane):
    """One lane's generation: what each forward committed (the stream and its timing: lanes.Lane)."""

    chunks: list[tuple[int, list[str], list[float], str]] = field(default_factory=list)  # forward, pieces, conf, note
    counts: list[int] = field(default_factory=list)  # tokens committed by each forward
    thresholds: list[float] = field(default_factory=list)  # threshold each forward used
    totals: list[int] = field(default_factory=list)  # tokens committed after each forward
    ids: list[int] = field(default_factory=list)  # every committed token id
    drafted: int = 0  # verified: drafts checked
    matched: int = 0  # verified: drafts that matched (each a token committed without a forward of its own)
    looked_up: int = 0  # verified: forwards whose drafts came from prompt lookup
    checks: list[tuple[int, int]] = field(default_factory=list)  # verified: (drafts checked, matched) per forward
    text: str = ""
    answered: bool = False  # its answer ended by itself (a stop token, the token budget), not cut by Stop

    def advance(self, turns: Turns | None = None) -> None:
        """Run one forward (timed as `turns` says: lanes.Turns; None: timed) and record what it committed."""
        event = self.next_event(turns)
        if event is None:
            return
        ids, conf, text = event.token_ids[0], event.confidences[0], event.texts[0]
        self.counts.append(len(ids))
        self.thresholds.append(event.threshold)
        self.totals.append((self.totals[-1] if self.totals else 0) + len(ids))
        self.text += text
        self.ids += ids
        note = self.count_drafts(event) if event.drafts else ""
        if ids:
            self.chunks.append((event.forward, self.pieces(ids, text), conf, note))
        self.finished = self.answered = event.done[0]  # Stop ends the stream without a done event

    def count_drafts(self, event: StreamEvent) -> str:
        """Add a verified forward's drafts to the lane's counts; the tokens' hover note on them ("" if none fed)."""
        drafts, matched = len(event.drafts[0]), event.matched[0]
        self.drafted, self.matched = self.drafted + drafts, self.matched + matched
        self.looked_up += event.draft_source[0] == "lookup"
        if not drafts:
            return ""
        self.checks.append((drafts, matched))
        return f" · {matched} of {drafts} drafts ({event.draft_source[0]}) matched"

    @property
    def times(self) -> list[float]:
        """The lane's own seconds after each forward (its clock: lanes.Lane.clocked)."""
        return list(itertools.accumulate(self.clocked()))

    def summary(self) -> dict:
        """Forwards, tokens, tokens per forward and tokens per second of this run."""
        forwards, tokens = len(self.counts), sum(self.counts)
        return {
            "forwards": forwards, "tokens": tokens, "tokens_per_forward": tokens / max(forwards, 1),
            "seconds": self.own_seconds, "tokens_per_second": self.per_second(tokens),
        }


def departure(reference: list[int], ids: list[int], both_done: bool) -> int | None:
    """Index of the first token where ids departs from reference, as far as both have gone (None: not yet)."""
    for k, (a, b) in enumerate(zip(reference, ids)):
        if a != b:
            return k
    if both_done and len(reference) != len(ids):
        return min(len(reference), len(ids))
    return None


def drafts_account(run: Run) -> dict:
    """The verified lane's drafts, counted so they add up: fed = compared + not compared (a forward stops comparing
    at its first mismatch, or at the end of the text), compared = matched + the first mismatches."""
    compared = sum(min(k, m + 1) for k, m in run.checks)
    return {"fed": run.drafted, "compared": compared, "matched": run.matched,
            "missed": compared - run.matched, "unread": run.drafted - compared}


def tau_changes(run: Run) -> list[tuple[int, float, float]]:
    """(forward, τ before, τ from then on) for each forward whose threshold differs from the forward before it."""
    t = run.thresholds
    return [(k, t[k - 1], t[k]) for k in range(1, len(t)) if t[k] != t[k - 1]]


def acceptance(run: Run | None) -> dict:
    """The verified lane's acceptance by draft position (mars_core.evaluation.metrics.draft_acceptance)."""
    if run is None:
        return draft_acceptance([])
    return draft_acceptance(run.checks, sum(run.counts), len(run.counts))
