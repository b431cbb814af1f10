"""The programmatic prompt sources (prompt_sources.tasks): every category, golds where certain, reproducible."""

from __future__ import annotations

from mars_core.evaluation.tasks import CATEGORIES, PREDICTABLE
from prompt_sources import tasks


def test_prompts_cover_categories_with_golds():
    records = tasks.build_prompts({c: 4 for c in CATEGORIES}, seed=1)
    assert {r["category"] for r in records} == set(CATEGORIES)
    assert len({r["prompt"] for r in records}) == len(records)
    assert any("gold" in r for r in records if r["category"] in PREDICTABLE)
    assert tasks.build_prompts({"counting": 5}, seed=3) == tasks.build_prompts({"counting": 5}, seed=3)
