"""Forward: one verified forward as a caller that asked for it sees it (DecodeOptions.record).

What it fed, down to the exact mask, what it verified, and what it chose for the next forward, with the numbers the
choice was made by, so a reader (the app's walkthrough, a debugger) never recomputes the planner's internals.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .chain import Chain
from .tree import Tree


@dataclass(kw_only=True)
class Forward:
    """One forward's record. Teaching and debugging only; the decoder never reads it back."""

    tree: Tree  # what it fed
    ids: torch.Tensor  # [b, W] the tokens fed: pending, drafts, then the masks of each group
    positions: torch.Tensor  # [b, W] their positions
    seen: torch.Tensor  # [b, W, W] which fed columns each column saw (True = attend; itself included)
    fed: torch.Tensor  # [b, W] which columns were real for the sample
    cached: torch.Tensor  # [b] the tokens in the cache, which every column also saw
    m: torch.Tensor  # [b] drafts matched
    tokens: torch.Tensor  # [b, K+1] the token chosen at each verify slot: tokens[:, :m] the drafts, tokens[m] bonus
    confidence: torch.Tensor  # [b, K+1] their confidences
    proposed: Chain  # G_m's predictions, the mask slots' chain (before prompt lookup and the threshold)
    chain: Chain  # the drafts the next forward checks: the first count[i]; from_lookup: prompt lookup's chain won
    group_fed: torch.Tensor  # [b, D+1] the groups G_j hung after them in the next forward
    odds: torch.Tensor  # [b, D+1] P(exactly j of those drafts match), the odds the groups were chosen by
    seconds: torch.Tensor | None  # seconds of a forward by tokens fed, the trees were sized by (None: fixed rules)
    by_sibling: torch.Tensor  # [b] the m-th matched token was the sibling e_m, not d_m
    sibling_fed: torch.Tensor  # [b, D] the siblings e_a (with H_a) fed beside the next drafts
    sibling_odds: torch.Tensor  # [b, D] P(e_a is used) for the next drafts (plan.sibling_odds)
    mask_kept: torch.Tensor  # [b] the mask slots' drafts that passed the threshold (before prompt lookup)
    mask_run: torch.Tensor  # [b] their expected run of matches, sum_i c_1 ... c_i
    chain_run: torch.Tensor  # [b] the expected run of the drafts the next forward checks
    floors: tuple[float, ...] | None  # the group floors the plan tried by cost (None: fixed rules)
