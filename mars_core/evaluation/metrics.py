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
