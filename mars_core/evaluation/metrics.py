"""Comparing an answer with a reference answer (what sweeps, mars-eval and the app all report)."""

from __future__ import annotations

from collections.abc import Sequence


def agreement(reference: Sequence, answer: Sequence) -> float:
    """Shared-prefix fraction of two token lists (or texts): common-prefix length over the longer one's length
    (two empty answers agree)."""
    longest = max(len(reference), len(answer))
    if longest == 0:
        return 1.0
    shared = 0
    for a, b in zip(reference, answer):
        if a != b:
            break
        shared += 1
    return shared / longest


def draft_acceptance(checks: Sequence[tuple[int, int]], tokens: int = 0, forwards: int = 0) -> dict:
    """How verified decoding's drafts fared, from (drafts checked, drafts matched) per forward that checked drafts:
    the mean accepted length (drafts matched per such forward), tokens per forward over all `forwards`, and, by draft
    position a, how often d_a matched when it was checked, that is when every draft before it had matched
    (verification stops at the first mismatch): P(d_a matched | d_1 .. d_{a-1} matched)."""
    longest = max((k for k, _ in checks), default=0)
    positions = []
    for a in range(1, longest + 1):
        tried = sum(1 for k, m in checks if k >= a and m >= a - 1)
        matched = sum(1 for _, m in checks if m >= a)
        positions.append({"position": a, "checked": tried, "matched": matched,
                          "rate": matched / tried if tried else None})
    return {"forwards_checking": len(checks), "drafts_checked": sum(k for k, _ in checks),
            "mean_accepted": sum(m for _, m in checks) / len(checks) if checks else 0.0,
            "tokens_per_forward": tokens / max(forwards, 1), "positions": positions}
