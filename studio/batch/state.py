"""What a Batch run keeps: the visitor's session, the prompts parsed, and each side's batch generation (BatchRun)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mars_core import DecodeControl
from studio.inputs import MAX_PROMPT_CHARS
from studio.lanes import Lane, Turns

MIN_PROMPTS, MAX_PROMPTS = 4, 8


@dataclass
class BatchSession:
    """One visitor's batch state (the tab's gr.State)."""

    controls: tuple[DecodeControl, DecodeControl] | None = None  # the running batches' (block, AR); None: none runs


def parse_prompts(text: Any) -> list[str]:
    """One prompt per non-empty line; a ValueError unless there are 4 to 8, each within the prompt limit."""
    if not isinstance(text, str):
        raise ValueError("Prompts must be text: one prompt per line.")
    prompts = [line.strip() for line in text.splitlines() if line.strip()]
    if not MIN_PROMPTS <= len(prompts) <= MAX_PROMPTS:
        raise ValueError(f"Give {MIN_PROMPTS} to {MAX_PROMPTS} prompts, one per line; got {len(prompts)}.")
    for i, prompt in enumerate(prompts, 1):
        if len(prompt) > MAX_PROMPT_CHARS:
            raise ValueError(f"Prompt {i} too long: {len(prompt)} characters, the limit is {MAX_PROMPT_CHARS}.")
    return prompts


def stop_batch(session: BatchSession) -> None:
    """Stop button: both batches end before their next forward; what they generated stays."""
    for control in session.controls or ():
        control.stop()


@dataclass
class BatchRun(Lane):
    """One side's batch generation: what each forward committed per sample (the stream and its timing: lanes.Lane)."""

    size: int  # samples in the batch
    counts: list[list[int]] = field(default_factory=list)  # [forward][sample]: tokens committed
    starts: list[list[int]] = field(default_factory=list)  # [forward][sample]: accepted_from (block: first unfilled)
    chunks: list[list[tuple[int, list[str], list[float]]]] = field(init=False)  # [sample]: forward, pieces, conf
    texts: list[str] = field(init=False)
    ids: list[list[int]] = field(init=False)
    finished_at: list[int | None] = field(init=False)  # [sample]: the forward in which it finished

    def __post_init__(self) -> None:
        """Empty per-sample records."""
        self.chunks = [[] for _ in range(self.size)]
        self.texts = [""] * self.size
        self.ids = [[] for _ in range(self.size)]
        self.finished_at = [None] * self.size

    def advance(self, turns: Turns | None = None) -> None:
        """Run one forward of the whole batch (timed as `turns` says: lanes.Turns; None: timed) and record what each
        sample committed."""
        event = self.next_event(turns)
        if event is None:  # every sample done, or stopped
            return
        self.counts.append([len(ids) for ids in event.token_ids])
        self.starts.append(list(event.accepted_from))
        for i, (ids, conf, text) in enumerate(zip(event.token_ids, event.confidences, event.texts)):
            self.texts[i] += text
            self.ids[i] += ids
            if ids:
                self.chunks[i].append((event.forward, self.pieces(ids, text), conf))
            if event.done[i] and self.finished_at[i] is None:
                self.finished_at[i] = event.forward
        self.finished = all(event.done)

    def done(self) -> list[bool]:
        """Per sample: it has finished."""
        return [f is not None for f in self.finished_at]

    def waits(self, i: int) -> int:
        """Forwards in which sample i committed nothing before it finished: waiting at the block boundary."""
        end = self.finished_at[i]
        return sum(1 for f, counts in enumerate(self.counts) if counts[i] == 0 and (end is None or f <= end))

    def new_blocks(self) -> list[int]:
        """Forwards that start a new block: every sample's accepted_from is 0 again (after the first forward)."""
        # within a block every live sample has filled >= 1 slot after the block's first forward, so an
        # all-zero accepted_from happens exactly when filled was reset to 0 for the batch: a new block
        return [f for f, starts in enumerate(self.starts) if f > 0 and not any(starts)]

    def summary(self) -> dict:
        """Forwards, tokens, seconds and tokens/s of the batch, and per sample counts, texts and ids."""
        forwards, tokens = len(self.counts), sum(map(sum, self.counts))
        return {
            "forwards": forwards, "tokens": tokens, "seconds": self.own_seconds,
            "tokens_per_second": self.per_second(tokens),
            "counts": [list(c) for c in self.counts], "texts": list(self.texts), "ids": [list(i) for i in self.ids],
            "done": self.done(), "finished_at": list(self.finished_at),  # copies: a frame keeps its own state
        }

