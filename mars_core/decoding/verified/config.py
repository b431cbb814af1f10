"""VerifiedConfig: how verified decoding shapes each forward's tree; read by verified decoding alone."""

from __future__ import annotations

from dataclasses import dataclass

from ...runtime.curve import CostCurve


@dataclass(frozen=True)
class VerifiedConfig:
    """How verified decoding shapes each forward's tree: what is worth its width. It never changes the answer.

    With a cost curve, each forward feeds the drafts, groups and siblings that maximise expected committed tokens per
    second of forward (plan.plan_by_cost); without one, the fixed rules below (drafts while confident, G_j while
    P(exactly j match) >= group_floor, the sibling e_a while P(it is used) >= sibling_floor)."""

    cost: CostCurve | None = None  # seconds per forward by batch and width; None: the runtime's (prepare() measures it)
    use_cost: bool = True  # False: the fixed rules alone, whatever curve there is
    group_floor: float = 0.1  # fixed rule: feed G_j when P(exactly j drafts match) >= this
    # fixed rule: feed the sibling e_a (d_a's second choice, with its group) when P(it is used) >= this; by cost,
    # those at or above this floor are priced like groups; None (the default): no siblings, a chain. A matched
    # sibling's bonus token is read at a row that sees the cache, then a gap, then itself: width-invariant kernels
    # make rows that see a prefix identical to a one-token forward, not that one, so with siblings the answer is
    # one-token decoding's up to rounding only
    # (docs/speed.md#width-invariance-verified-is-one-token-decoding-bit-for-bit)
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


TreeLayout = VerifiedConfig  # the name it had before it moved here (mars_core exports both)
