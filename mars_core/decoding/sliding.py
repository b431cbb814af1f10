"""MARS sliding-window decoding with a KV cache: one forward per step, no extra pass.

Each forward feeds the committed tokens not yet in the cache, then B-1 mask tokens:
    slots  [ pending c[L-k..L) | m_0 .. m_{B-2} ]      positions  L-k .. L-1 | L .. L+B-2
prediction 0 = argmax of the last pending token's logits (the exact AR next token, always accepted),
prediction j = from mask j-1's logits, accepted left to right while its confidence >= threshold.
The masks' keys/values are then cropped from the cache (crop(-(B-1))); accepted tokens are fed as
real tokens in the next forward. With B = 1 this is plain autoregressive decoding with a KV cache, and
a forward whose threshold is >= 1 feeds no masks at all (none could be accepted): one-token mode costs
exactly what AR costs.

Batches: samples accept different counts, so the pending run is right-aligned and padded on the left;
the padding ("holes") stays in the cache marked invalid, and positions are explicit per sample.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

import torch

from ..runtime.forward import cache_mask, forward, new_cache
from .cache import left_pad
from .commit import Committed, commit, decode_loop
from .control import DecodeControl
from .sampling import accept_prefix, select
from .spec import DecodeSpec, Step


def right_align(tokens: torch.Tensor, count: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Row i's first count[i] tokens, right-aligned in `width` slots, and which slots are real."""
    j = torch.arange(width, device=tokens.device)[None, :] - (width - count)[:, None]
    valid = j >= 0
    return tokens.gather(1, j.clamp_min(0)), valid


@dataclass
class Window:
    """What the coming forward feeds, per sample, and what the cache holds."""

    pending: torch.Tensor  # [b, P] committed tokens not yet cached, right-aligned (the prompt at prefill)
    pending_valid: torch.Tensor  # [b, P] real (not left padding, not a finished sample)
    length: torch.Tensor  # [b] committed tokens in the sequence, pending ones included
    valid: torch.Tensor  # [b, T] which cache slots hold real tokens
    answer: Committed  # the answer so far
    tokens: torch.Tensor | None = None  # [b, B] the last forward's predictions: the next pending run is a prefix
    end: torch.Tensor | None = None  # [b] how many of them it committed
    widest: int = 1  # host copy of end.max() (at least 1)


def step(model: torch.nn.Module, cache, w: Window, spec: DecodeSpec, ctl: DecodeControl) -> Step:
    """One forward over [pending | B-1 masks] (no masks at threshold 1: none could be accepted), then the commit."""
    b, B, dev = w.pending.shape[0], spec.block_size, w.pending.device
    P, M = w.pending.shape[1], (B - 1 if ctl.threshold < 1.0 else 0)  # M mask slots this forward
    masks = torch.full((b, M), spec.mask_id if M else spec.pad_id, dtype=torch.long, device=dev)
    ids = torch.cat([w.pending, masks], 1)
    positions = (w.length[:, None] + torch.arange(-P, M, device=dev)).clamp_min(0)  # pending s: L-P+s, mask m: L+m
    mask_ok = torch.ones((b, M), dtype=torch.bool, device=dev)
    mask = cache_mask(torch.cat([w.valid, w.pending_valid, mask_ok], 1), P + M)
    logits = forward(model, ids, positions, mask, cache, M + 1, runtime=spec.runtime)  # slots P-1 .. P+M-1
    if M:
        cache.crop(-M)  # drop the masks' keys/values
    w.valid = torch.cat([w.valid, w.pending_valid], 1)
    tokens, conf = select(logits, ctl, spec.generator)
    first = torch.zeros(b, dtype=torch.long, device=dev)  # slot 0, the AR prediction, is always accepted
    end = commit(w.answer, tokens, first, accept_prefix(conf, first, ctl.threshold), spec)
    w.length, w.tokens, w.end = w.length + end, tokens, end
    host = torch.stack([end, w.answer.done.long()]).tolist()  # the one host sync per forward
    w.widest = max(max(host[0]), 1)
    return Step(tokens, conf, first, end, [bool(d) for d in host[1]], ctl.threshold, w.answer.out,
                w.answer.generated)


def advance(w: Window) -> None:
    """The next forward's pending run: each live sample's committed tokens, right-aligned."""
    w.pending, w.pending_valid = right_align(w.tokens, w.end, w.widest)
    w.pending_valid &= ~w.answer.done[:, None]


@torch.inference_mode()
def sliding_decode(
    model: torch.nn.Module, prompts: list[list[int]], spec: DecodeSpec, control: DecodeControl
) -> Generator[Step, torch.Tensor | None, None]:
    """Yield one Step per forward. send() a bool [b] tensor to stop samples (stop strings)."""
    dev = model.device
    pending, pending_valid = left_pad(prompts, spec.pad_id, dev)  # prefill is the first step's pending run
    w = Window(pending, pending_valid, length=pending_valid.sum(1), valid=torch.zeros_like(pending_valid[:, :0]),
               answer=Committed.empty(len(prompts), spec, spec.block_size, dev))
    cache = new_cache(model)
    yield from decode_loop(control, w.answer, lambda ctl: step(model, cache, w, spec, ctl), lambda _: advance(w))
