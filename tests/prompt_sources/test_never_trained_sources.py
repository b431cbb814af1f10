"""The never-trained split's sources are not training sources: no generator writes a hand-written prompt."""

from __future__ import annotations

from prompt_sources import never_trained, tasks
from prompt_sources.sources import SOURCE_CATEGORIES, build_source_prompts


def test_its_sources_are_not_training_sources():
    assert never_trained.GSM_TASK not in tasks.RG_TASKS  # reasoning-gym tasks the training prompts draw from
    hand = {r["prompt"] for r in never_trained.user_prompts()}
    assert len(hand) == 100
    generated = {r["prompt"] for r in build_source_prompts({c: 300 for c in SOURCE_CATEGORIES}, seed=0)}
    generated |= {r["prompt"] for r in tasks.build_prompts({c: 60 for c in tasks.GENERATORS}, seed=0)}
    assert not hand & generated  # written by hand, not by the generators
