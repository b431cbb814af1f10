"""benchmarks/threshold_trace.py: its per-forward marks explain every departure from the one-token answer."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from threshold_trace import trace  # noqa: E402

from trained import ANSWERS, mars_trained  # noqa: E402


@pytest.fixture(scope="module")
def trained(tokenizer):
    return mars_trained("qwen2", tokenizer)


@pytest.mark.parametrize("threshold", [1.0, 0.3, 0.02])
def test_a_departure_follows_a_wrong_draft_and_only_then(trained, tokenizer, threshold):
    """In fp32 threshold mode leaves the one-token answer only through a committed draft that is not the model's
    own token (✗): so a trace says "departs" exactly when it marks a ✗, and never before that ✗."""
    departures = 0
    for prompt in ANSWERS:
        lines = trace(trained, tokenizer, prompt, threshold, block_size=4, max_new_tokens=30)
        forwards, verdict = lines[:-2], lines[-2]
        assert all(line.split()[1].startswith("+") for line in forwards)
        wrong = [i for i, line in enumerate(forwards) if "✗" in line]
        if threshold >= 1.0:
            assert all(line.split()[1] == "+1" for line in forwards)
        assert verdict.startswith("departs") == bool(wrong), (prompt, lines)
        departures += bool(wrong)
        if wrong:  # the first wrong draft is committed no later than the departing token
            at = int(re.search(r"at token (\d+):", verdict).group(1))
            before = sum(int(line.split()[1][1:]) for line in forwards[: wrong[0]])
            assert before < at
    if threshold == 0.02:
        assert departures  # so low a threshold commits drafts the model would not have written
