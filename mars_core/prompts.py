"""Prompt sets for sweeps, benchmarks and demos: the shipped held-out prompts, else a small built-in set."""

from __future__ import annotations

CATEGORIES = ("lists", "counting", "arithmetic", "explanation", "factual")

DEFAULT_PROMPTS: list[dict[str, str]] = [
    {"category": "lists", "prompt": "List the days of the week."},
    {"category": "lists", "prompt": "Name the four seasons of the year, one per line."},
    {"category": "lists", "prompt": "List five colours of the rainbow."},
    {"category": "counting", "prompt": "Count from 1 to 20, separated by commas."},
    {"category": "counting", "prompt": "Count down from 10 to 1."},
    {"category": "arithmetic", "prompt": "What is 12 times 7? Answer with a short sentence."},
    {"category": "arithmetic", "prompt": "Add 45 and 38, and show the steps."},
    {"category": "explanation", "prompt": "Explain in two sentences why the sky is blue."},
    {"category": "explanation", "prompt": "Explain what a computer program is to a child."},
    {"category": "factual", "prompt": "What is the capital of France?"},
    {"category": "factual", "prompt": "Who wrote Romeo and Juliet?"},
    {"category": "factual", "prompt": "How many legs does a spider have?"},
]


def prompt_set(limit: int | None = None) -> list[dict]:
    """The held-out prompts (never trained on; round-robin over categories) when data/heldout.jsonl ships,
    else the built-in DEFAULT_PROMPTS. Each item has "prompt" and "category"."""
    from .eval import load_heldout

    try:
        return load_heldout(limit)
    except FileNotFoundError:
        return list(DEFAULT_PROMPTS)[:limit]


def prompt_categories() -> list[str]:
    """The categories of prompt_set(), in order of first appearance."""
    return list(dict.fromkeys(p["category"] for p in prompt_set()))


def prompts_in(categories: list[str] | tuple[str, ...] | None = None, limit: int | None = None) -> list[dict]:
    """The first `limit` prompts of prompt_set() in the given categories (all of them when None)."""
    pool = prompt_set()
    known = list(dict.fromkeys(p["category"] for p in pool))
    unknown = set(categories or ()) - set(known)
    if unknown:
        raise ValueError(f"unknown prompt categories {sorted(unknown)}; known: {known}")
    chosen = [p for p in pool if categories is None or p["category"] in categories]
    return chosen[:limit]
