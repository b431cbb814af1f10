"""What a decoder is asked (DecodeSpec, TreeLayout), what each forward reports (Step), and the buffer they fill."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..runtime.curve import CostCurve
from ..runtime.runtime import Runtime


@dataclass(frozen=True)
class TreeLayout:
    """How verified decoding shapes each forward's tree: what is worth its width. It never changes the answer.

    With a cost curve, each forward feeds the drafts, groups and siblings that maximise expected committed tokens per
    second of forward (verified.plan_by_cost); without one, the fixed rules below (drafts while confident, G_j while
    P(exactly j match) >= group_floor, the sibling e_a while P(it is used) >= sibling_floor)."""

    cost: CostCurve | None = None  # seconds per forward by batch and width; None: the runtime's (prepare() measures it)
    use_cost: bool = True  # False: the fixed rules alone, whatever curve there is
    group_floor: float = 0.1  # fixed rule: feed G_j when P(exactly j drafts match) >= this
    # fixed rule: feed the sibling e_a (d_a's second choice, with its group) when P(it is used) >= this; by cost,
    # those at or above this floor are priced like groups; None (the default): no siblings, a chain. A matched
    # sibling's bonus token is read at a row that sees the cache, then a gap, then itself: width-invariant kernels
    # make rows that see a prefix identical to a one-token forward, not that one, so with siblings the answer is
    # one-token decoding's up to rounding only (docs/speed.md#width-invariance)
    sibling_floor: float | None = None
    lookup_drafts: int = 7  # longest prompt-lookup chain checked in one forward (0: mask drafts only)
    lookup_ngrams: tuple[int, ...] = (3, 2)  # n-gram sizes prompt lookup matches, the longest that matches wins
    lookup_odds: float = 0.6  # a lookup draft's assumed chance of matching (it has no confidence of its own)

    def __post_init__(self) -> None:
        if not 0.0 <= self.group_floor <= 1.0:
            raise ValueError(f"group_floor must be in [0, 1], got {self.group_floor!r}")
        if self.sibling_floor is not None and not 0.0 <= self.sibling_floor <= 1.0:
            raise ValueError(f"sibling_floor must be in [0, 1] or None (no siblings), got {self.sibling_floor!r}")
        if self.lookup_drafts < 0:
            raise ValueError(f"lookup_drafts must be >= 0 (0: no prompt lookup), got {self.lookup_drafts!r}")
        if not self.lookup_ngrams or min(self.lookup_ngrams) < 1:
            raise ValueError(f"lookup_ngrams must be n-gram sizes >= 1, got {self.lookup_ngrams!r}")
        if not 0.0 <= self.lookup_odds <= 1.0:
            raise ValueError(f"lookup_odds must be in [0, 1], got {self.lookup_odds!r}")


@dataclass
class DecodeSpec:
    block_size: int  # B: the most tokens one forward may commit (1 = plain AR)
    max_new_tokens: int  # per sample
    stop_ids: torch.Tensor  # token ids that end a sample (EOS, chat end), committed then cut after
    pad_id: int  # fills left padding and slots that mean nothing
    mask_id: int | None  # the mask token (needed when block_size > 1)
    generator: torch.Generator | None = None  # seeds sampling
    layout: TreeLayout = field(default_factory=TreeLayout)  # verified decoding: which drafts and groups are fed
    record: Callable[[Any], None] | None = None  # verified decoding: called with each forward's verified.Forward
    runtime: Runtime = field(default_factory=Runtime)  # how forwards run: kernels, width invariance, cost curve


@dataclass
class Step:
    """What one forward committed, per sample: tokens[i, start[i]:end[i]] (tensors stay on the device)."""

    tokens: torch.Tensor  # [b, k] the token chosen for each slot
    confidence: torch.Tensor  # [b, k] its confidence
    start: torch.Tensor  # [b] first committed slot
    end: torch.Tensor  # [b] one past the last committed slot
    done: list[bool]  # sample finished (stop token, max_new_tokens or stop request)
    threshold: float  # the threshold this forward used
    out: torch.Tensor  # [b, max_new_tokens + k] all tokens committed so far (row i valid up to lengths[i])
    lengths: torch.Tensor  # [b] tokens committed so far
    # verified decoding only: the drafts this forward checked, how many were real per sample, how many it committed
    drafts: torch.Tensor | None = None  # [b, K]
    drafted: torch.Tensor | None = None  # [b]
    matched: torch.Tensor | None = None  # [b] accepted drafts among the committed tokens (the rest is the bonus)
    looked_up: torch.Tensor | None = None  # [b] the drafts came from prompt lookup (else from the mask slots)


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
