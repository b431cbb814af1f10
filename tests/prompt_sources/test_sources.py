"""The prompt sources that look like use: many distinct prompts, reproducible, and golds that are right."""

from __future__ import annotations

import random
import re
import subprocess
import sys

import pytest

from prompt_sources import tasks
from prompt_sources.code import gen_code
from prompt_sources.sources import SOURCE_CATEGORIES, SOURCES, build_source_prompts


@pytest.mark.parametrize("category", SOURCE_CATEGORIES)
def test_each_source_yields_thousands_of_distinct_prompts(category):
    rng = random.Random(0)
    records = [SOURCES[category](rng) for _ in range(5000)]
    assert len({r["prompt"] for r in records}) > 3500
    assert all(r["category"] == category and r["prompt"].strip() and r.get("kind") for r in records)
    assert "task" not in records[0]  # "task" names a reasoning-gym task for mars_core's score; sub-kinds: "kind"


def test_prompts_are_reproducible_and_distinct_per_call():
    counts = {c: 40 for c in SOURCE_CATEGORIES}
    first, again = build_source_prompts(counts, seed=3), build_source_prompts(counts, seed=3)
    assert first == again and len(first) == 160 and len({r["prompt"] for r in first}) == 160
    assert build_source_prompts(counts, seed=4) != first
    assert [r["prompt"] for r in tasks.build_prompts({"code": 5}, seed=1)] == [
        r["prompt"] for r in build_source_prompts({"code": 5}, seed=1)]  # tasks draws them the same way


def python_snippet(prompt: str) -> str | None:
    """The Python code of a "what does this print" prompt (fenced or after the question), None for other languages."""
    fenced = re.search(r"```(\w*)\n(.*?)```", prompt, re.S)
    if fenced:
        return fenced.group(2) if fenced.group(1) in ("python", "py", "") else None
    return prompt.split("\n\n", 1)[1] if "\n\n" in prompt and "print" in prompt.split("\n\n", 1)[1] else None


def test_the_golds_of_what_does_this_print_are_what_python_prints():
    rng, checked = random.Random(1), 0
    while checked < 40:
        record = gen_code(rng)
        code = python_snippet(record["prompt"]) if record.get("gold") is not None else None
        if code is None or "console.log" in code or "printf" in code:
            continue
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=10)
        assert done.returncode == 0, (code, done.stderr)
        assert done.stdout.strip() == record["gold"].strip(), (code, record["gold"])
        checked += 1
