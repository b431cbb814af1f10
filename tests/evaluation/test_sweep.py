"""mars_core.sweep and mars_core.prompts on tiny models."""

from __future__ import annotations

import json

import pytest

from mars_core import generate
from mars_core.evaluation.metrics import agreement
from mars_core.evaluation.prompts import CATEGORIES, DEFAULT_PROMPTS, prompt_categories, prompt_set, prompts_in
from mars_core.evaluation.sweep import SWEEP_COLUMNS, threshold_sweep

PROMPTS = ["Count from one to ten", "What is the capital of France?", "hello"]


def test_agreement_is_the_shared_prefix_fraction():
    assert agreement([1, 2, 3, 4], [1, 2, 3, 4]) == 1.0
    assert agreement([1, 2, 3, 4], [1, 2, 9, 4]) == 0.5
    assert agreement([1, 2], [1, 2, 3, 4]) == 0.5  # longer answers are penalised too
    assert agreement([5], [6]) == 0.0
    assert agreement([], []) == 1.0


def test_default_prompts_cover_the_categories():
    assert 10 <= len(DEFAULT_PROMPTS) <= 16
    assert {p["category"] for p in DEFAULT_PROMPTS} == set(CATEGORIES)
    assert all(p["prompt"].strip() for p in DEFAULT_PROMPTS)
    with pytest.raises(ValueError, match="unknown"):
        prompts_in(["poetry"])


def test_prompt_set_is_the_heldout_set_when_it_ships(tmp_path, monkeypatch):
    heldout = tmp_path / "heldout.jsonl"
    lines = [{"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}],
              "category": c} for i, c in enumerate(["tables", "tables", "chat", "tables"])]
    heldout.write_text("\n".join(json.dumps(x) for x in lines))
    monkeypatch.setenv("MARS_HELDOUT", str(heldout))
    assert [p["prompt"] for p in prompt_set()] == ["q0", "q2", "q1", "q3"]  # round-robin over categories
    assert prompt_categories() == ["tables", "chat"]
    assert [p["prompt"] for p in prompts_in(["tables"], limit=2)] == ["q0", "q1"]
    monkeypatch.setenv("MARS_HELDOUT", str(tmp_path / "missing.jsonl"))
    assert prompt_set() == list(DEFAULT_PROMPTS) and set(prompt_categories()) == set(CATEGORIES)


def test_sweep_rows_per_threshold(model, tokenizer):
    calls = []
    rows = threshold_sweep(
        model, tokenizer, PROMPTS, [0.5, 1.0, 0.05], block_size=4, max_new_tokens=12,
        progress=lambda fraction, text: calls.append((fraction, text)),
    )
    assert [r["threshold"] for r in rows] == [1.0, 0.5, 0.05]
    assert all(set(r) == set(SWEEP_COLUMNS) for r in rows)
    top = rows[0]
    assert top["quality"] == top["exact_match"] == 1.0 and top["tokens_per_forward"] == 1.0
    assert rows[-1]["tokens_per_forward"] > 1.5  # a very low threshold accepts most mask predictions
    assert all(0.0 <= r["quality"] <= 1.0 and r["prompts"] == 3 for r in rows)
    fractions = [f for f, _ in calls]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and len(calls) == 3 * 3 + 1


def test_sweep_numbers_match_generate(model, tokenizer):
    rows = threshold_sweep(model, tokenizer, PROMPTS[:2], [1.0, 0.2], block_size=3, max_new_tokens=10)
    low = rows[1]
    ref = [generate(model, tokenizer, p, block_size=3, max_new_tokens=10, threshold=1.0) for p in PROMPTS[:2]]
    got = [generate(model, tokenizer, p, block_size=3, max_new_tokens=10, threshold=0.2) for p in PROMPTS[:2]]
    assert low["tokens"] == sum(r.generated_tokens for r in got)
    assert low["forwards"] == sum(r.forwards for r in got)
    expected = sum(agreement(a.token_ids[0], b.token_ids[0]) for a, b in zip(ref, got)) / 2
    assert low["quality"] == pytest.approx(expected)


def test_sweep_without_threshold_one_still_uses_it_as_reference(model, tokenizer):
    rows = threshold_sweep(model, tokenizer, [{"category": "x", "prompt": "hello"}], [0.5], max_new_tokens=6)
    assert [r["threshold"] for r in rows] == [0.5]


def test_sweep_defaults_to_the_default_prompts(model, tokenizer):
    rows = threshold_sweep(model, tokenizer, None, [1.0], max_new_tokens=2)
    assert rows[0]["prompts"] == len(DEFAULT_PROMPTS)


@pytest.mark.parametrize(
    "prompts, thresholds, match",
    [([], [1.0], "empty"), (["  "], [1.0], "non-empty"), (PROMPTS, [], "at least one"),
     (PROMPTS, [0.0], r"\(0, 1\]"), (PROMPTS, [1.2], r"\(0, 1\]")],
)
def test_sweep_rejects_bad_input(model, tokenizer, prompts, thresholds, match):
    with pytest.raises(ValueError, match=match):
        threshold_sweep(model, tokenizer, prompts, thresholds, max_new_tokens=4)
