"""A small default prompt set for threshold sweeps and demos (a held-out set will replace it later)."""

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


def prompts_in(categories: list[str] | tuple[str, ...] | None = None) -> list[dict[str, str]]:
    """The default prompts of the given categories (all of them when None)."""
    if categories is None:
        return list(DEFAULT_PROMPTS)
    unknown = set(categories) - set(CATEGORIES)
    if unknown:
        raise ValueError(f"unknown prompt categories {sorted(unknown)}; known: {list(CATEGORIES)}")
    return [p for p in DEFAULT_PROMPTS if p["category"] in categories]
