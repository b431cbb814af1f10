"""What every decoder shares around its forwards: the answer buffer, the commit step, and the loop skeleton.

A forward proposes tokens[i, start[i]:end[i]] for sample i; commit() cuts that run
    end <- min(end, start + max_new_tokens - generated)     the new-token cap
    end <- one past the first stop token in [start, end)     a stop token is committed, nothing after it
    end <- start where the sample is held (finished, or waiting at a block's end)
marks the samples that are finished and appends the run to the answer. decode_loop() runs the forwards: one
snapshot of the live settings each (stop() ends the run before the next one), a Step yielded, the caller's stop
request (stop strings) merged into the done flags, and the end once every sample is done.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass

import torch

from .control import DecodeControl
from .sampling import cap_at_stop
from .spec import DecodeSpec, Step


@dataclass
class Committed:
    """The answer so far, per sample: its tokens, how many, and whether the sample is finished."""

    out: torch.Tensor  # [b, max_new_tokens + k] committed tokens, row i valid up to generated[i] (k scratch columns)
    generated: torch.Tensor  # [b] tokens committed
    done: torch.Tensor  # [b] finished: a stop token, max_new_tokens or a stop request

    @classmethod
    def empty(cls, b: int, spec: DecodeSpec, slots: int, dev: torch.device) -> Committed:
        """Nothing committed yet; `slots` is the most tokens one forward may propose (write_out's scratch columns)."""
        zero = torch.zeros(b, dtype=torch.long, device=dev)
        out = torch.full((b, spec.max_new_tokens + slots), spec.pad_id, dtype=torch.long, device=dev)
        return cls(out=out, generated=zero, done=zero.bool())


def write_out(out: torch.Tensor, lengths: torch.Tensor, tokens: torch.Tensor, start: torch.Tensor, end: torch.Tensor):
    """Append tokens[i, start:end] to row i of out at lengths[i], with one scatter (no loop over samples).

    Slots outside the run go to scratch columns past max_new_tokens, one per slot, so nothing collides.
    """
    k = tokens.shape[1]
    slots = torch.arange(k, device=tokens.device)
    in_run = (slots >= start[:, None]) & (slots < end[:, None])
    scratch = out.shape[1] - k + slots
    dest = torch.where(in_run, (lengths[:, None] + slots - start[:, None]).clamp_max(out.shape[1] - k - 1), scratch)
    out.scatter_(1, dest, tokens)
    lengths += end - start


def commit(answer: Committed, tokens: torch.Tensor, start: torch.Tensor, end: torch.Tensor, spec: DecodeSpec, *,
           hold: torch.Tensor | None = None) -> torch.Tensor:
    """Append tokens[i, start:end] to the answer, cut at max_new_tokens and after a stop token (module doc); rows in
    `hold` (default: the finished ones) commit nothing. Marks the finished samples; returns the cut end [b]."""
    hold = answer.done if hold is None else hold
    end = torch.minimum(end, start + spec.max_new_tokens - answer.generated)
    end, hit = cap_at_stop(tokens, start, end, spec.stop_ids)
    end = torch.where(hold, start, end)
    answer.done = answer.done | (hit & ~hold) | (answer.generated + end - start >= spec.max_new_tokens)
    write_out(answer.out, answer.generated, tokens, start, end)  # also advances generated
    return end


def decode_loop(control: DecodeControl, answer: Committed, forward: Callable[[DecodeControl], Step],
                advance: Callable[[torch.Tensor | None], None]) -> Generator[Step, torch.Tensor | None, None]:
    """Yield forward(settings) once per forward until stop() or every sample is done; send() a bool [b] tensor to
    stop samples (stop strings). advance(stop) readies the next forward (stop: what the caller sent, or None)."""
    while True:
        ctl = control.snapshot()  # what this forward uses, even if another thread edits the settings meanwhile
        if ctl.stopped:
            return
        stop = yield forward(ctl)
        if stop is not None:
            answer.done = answer.done | stop.to(answer.done.device)
        if bool(answer.done.all()):
            return
        advance(stop)
