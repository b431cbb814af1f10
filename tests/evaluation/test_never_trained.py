"""The never-trained split: its prompts come from sources training never uses, and none is in any training file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mars_core.evaluation.prompts import load_split, split_path

DATA = Path(__file__).resolve().parents[2] / "data"


def prompts_of(path: Path) -> set[str]:
    return {json.loads(line)["messages"][0]["content"] for line in path.read_text().splitlines() if line.strip()}


@pytest.mark.skipif(not split_path("never_trained").is_file(), reason="data/never_trained.jsonl is not built")
def test_no_never_trained_prompt_is_in_any_training_file():
    split = prompts_of(split_path("never_trained"))
    assert len(split) >= 100
    trained = [p for p in DATA.glob("train*.jsonl")]
    assert trained, "no training data next to the split"
    for path in trained:
        assert not split & prompts_of(path), path.name
    assert not split & prompts_of(split_path("heldout"))


@pytest.mark.skipif(not split_path("never_trained").is_file(), reason="data/never_trained.jsonl is not built")
def test_the_split_is_read_like_the_held_out_one():
    rows = load_split("never_trained")
    assert {r["source"] for r in rows} >= {"handwritten"}
    assert all(r["prompt"] and r["reference"] is not None for r in rows)
    first = [r["category"] for r in load_split("never_trained", 7)]
    assert len(set(first)) == 7  # round-robin over categories: any prefix covers them


@pytest.mark.skipif(not split_path("never_trained").is_file(), reason="data/never_trained.jsonl is not built")
def test_a_benchmark_names_either_split():
    """split_prompts: mars-bench's and the benchmarks' --split: held-out is prompt_set(), any other the split file."""
    from mars_core.evaluation.prompts import prompt_set, split_prompts

    assert split_prompts("heldout", 5) == prompt_set(5)
    assert split_prompts("never_trained", 5) == load_split("never_trained", 5) != prompt_set(5)
    with pytest.raises(ValueError, match="unknown split 'no_such_split'"):
        split_prompts("no_such_split", 1)
