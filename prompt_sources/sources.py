"""The prompt sources that look like use: code, writing, everyday requests, translation (self-distillation prompts).

Each category is a `gen_<category>(rng) -> record` generator in its own module, its words and templates in
banks/<category>.json; records are {"prompt", "category"} plus "gold" where an answer is certain and "kind" (the
sub-kind). Standard library only; the word banks, paragraphs and phrase lists are written for this project.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from mars_core.evaluation.tasks import SOURCE_CATEGORIES

from .code import gen_code
from .everyday import gen_everyday
from .phrasing import Record
from .translation import gen_translation
from .writing import gen_writing

__all__ = ["SOURCE_CATEGORIES", "SOURCES", "build_source_prompts", "distinct", "distinct_counts"]

SOURCES: dict[str, Callable[[random.Random], Record]] = {
    "code": gen_code,
    "writing": gen_writing,
    "everyday": gen_everyday,
    "translation": gen_translation,
}


def distinct(gen: Callable[[random.Random], Record], rng: random.Random, n: int) -> list[Record]:
    """n records with distinct prompts from a generator (fewer if it runs dry within 50 draws a record)."""
    seen: dict[str, Record] = {}
    for _ in range(n * 50):
        rec = gen(rng)
        seen.setdefault(rec["prompt"], rec)
        if len(seen) >= n:
            break
    return list(seen.values())


def build_source_prompts(counts: dict[str, int], seed: int = 0) -> list[Record]:
    """Distinct prompt records per category (counts[category] each, fewer if a generator runs dry), drawn from one
    seeded RNG as prompt_sources.tasks.build_prompts draws them."""
    rng = random.Random(seed)
    records: list[Record] = []
    for cat, n in counts.items():
        if n <= 0:
            continue
        if cat not in SOURCES:
            raise ValueError(f"unknown category {cat!r}; known: {SOURCE_CATEGORIES}")
        records.extend(distinct(SOURCES[cat], rng, n))
    return records


def distinct_counts(draws: int = 20000, seed: int = 0) -> dict[str, int]:
    """How many distinct prompts each generator yields over `draws` calls with one seeded RNG."""
    out = {}
    for cat, gen in SOURCES.items():
        rng = random.Random(seed)
        out[cat] = len({gen(rng)["prompt"] for _ in range(draws)})
    return out
