"""Prompt sources that look like use: code, writing, everyday requests, translation (self-distillation prompts).

Each category is a `gen_<category>(rng) -> record` generator in its own module; records are
{"prompt", "category"} plus "gold" where an answer is certain and "kind" (the sub-kind). Standard library only;
the word banks, paragraphs and phrase lists are written for this project. `build_source_prompts` draws distinct
prompts per category from one seeded RNG, as mars_core.evaluation.tasks.build_prompts does for its generators.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from .code import gen_code
from .everyday import gen_everyday
from .phrasing import Record
from .translation import gen_translation
from .writing import gen_writing

SOURCE_CATEGORIES = ("code", "writing", "everyday", "translation")


SOURCES: dict[str, Callable[[random.Random], Record]] = {
    "code": gen_code,
    "writing": gen_writing,
    "everyday": gen_everyday,
    "translation": gen_translation,
}


def build_source_prompts(counts: dict[str, int], seed: int = 0) -> list[Record]:
    """Distinct prompt records per category (counts[category] each, fewer if a generator runs dry)."""
    rng = random.Random(seed)
    records: list[Record] = []
    for cat, n in counts.items():
        if n <= 0:
            continue
        if cat not in SOURCES:
            raise ValueError(f"unknown category {cat!r}; known: {SOURCE_CATEGORIES}")
        seen: dict[str, Record] = {}
        for _ in range(n * 50):
            rec = SOURCES[cat](rng)
            seen.setdefault(rec["prompt"], rec)
            if len(seen) >= n:
                break
        records.extend(seen.values())
    return records


def distinct_counts(draws: int = 20000, seed: int = 0) -> dict[str, int]:
    """How many distinct prompts each generator yields over `draws` calls with one seeded RNG."""
    out = {}
    for cat, gen in SOURCES.items():
        rng = random.Random(seed)
        out[cat] = len({gen(rng)["prompt"] for _ in range(draws)})
    return out
