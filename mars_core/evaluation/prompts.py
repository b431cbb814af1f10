"""Prompt sets for evaluation, sweeps, benchmarks and demos: the shipped held-out split, else a small built-in set."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from .tasks import CATEGORIES as TASK_CATEGORIES

REPO_ROOT = Path(__file__).resolve().parents[2]
CATEGORIES = ("lists", "counting", "arithmetic", "explanation", "factual")

_BUILT_IN = {
    "lists": ["List the days of the week.", "Name the four seasons of the year, one per line.",
              "List five colours of the rainbow."],
    "counting": ["Count from 1 to 20, separated by commas.", "Count down from 10 to 1."],
    "arithmetic": ["What is 12 times 7? Answer with a short sentence.", "Add 45 and 38, and show the steps."],
    "explanation": ["Explain in two sentences why the sky is blue.", "Explain what a computer program is to a child."],
    "factual": ["What is the capital of France?", "Who wrote Romeo and Juliet?", "How many legs does a spider have?"],
}
DEFAULT_PROMPTS: list[dict[str, str]] = [{"category": c, "prompt": p} for c, ps in _BUILT_IN.items() for p in ps]


SPLITS = ("heldout", "never_trained")  # data/<split>.jsonl: prompts with the base model's answers, never trained on


def heldout_path() -> Path:
    """$MARS_HELDOUT, else data/heldout.jsonl next to the package (the repository checkout)."""
    env = os.environ.get("MARS_HELDOUT")
    return Path(env) if env else REPO_ROOT / "data" / "heldout.jsonl"


def split_path(name: str) -> Path:
    """The file of an evaluation split: "heldout" (same generators as training, other prompts) or "never_trained"
    (sources training never uses: prompt_sources.never_trained)."""
    if name not in SPLITS:
        raise ValueError(f"unknown split {name!r}; known: {SPLITS}")
    return heldout_path() if name == "heldout" else REPO_ROOT / "data" / f"{name}.jsonl"


def category_order(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Round-robin over categories, so any prefix covers every category."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        groups[r.get("category", "other")].append(r)
    names = [c for c in TASK_CATEGORIES if c in groups] + sorted(c for c in groups if c not in TASK_CATEGORIES)
    out, i = [], 0
    while len(out) < len(records):
        for name in names:
            if i < len(groups[name]):
                out.append(groups[name][i])
        i += 1
    return out


def load_heldout(limit: int | None = None, path: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """Held-out records (never trained on), each with "prompt", "reference" (the base greedy answer),
    "category", "messages" and optional "gold"/"task". With limit, the first N round-robin over categories."""
    from ..training.data import read_jsonl

    file = Path(path) if path is not None else heldout_path()
    if not file.is_file():
        raise FileNotFoundError(f"no held-out data at {file}: build it with python -m mars_core.distill --out data/")
    rows = []
    for r in read_jsonl(file):
        msgs = r["messages"]
        user = [m["content"] for m in msgs if m["role"] == "user"]
        answer = [m["content"] for m in msgs if m["role"] == "assistant"]
        rows.append({**r, "prompt": user[-1], "reference": answer[-1] if answer else ""})
    rows = category_order(rows)
    return rows[:limit] if limit else rows


def load_split(name: str = "heldout", limit: int | None = None) -> list[dict[str, Any]]:
    """An evaluation split's records (see load_heldout), the first `limit` round-robin over categories."""
    return load_heldout(limit, split_path(name))


def prompt_set(limit: int | None = None) -> list[dict]:
    """The held-out prompts (never trained on; round-robin over categories) when data/heldout.jsonl ships,
    else the built-in DEFAULT_PROMPTS. Each item has "prompt" and "category"."""
    try:
        return load_heldout(limit)
    except FileNotFoundError:
        return list(DEFAULT_PROMPTS)[:limit]


def split_prompts(name: str = "heldout", limit: int | None = None) -> list[dict]:
    """The prompts a benchmark runs on: prompt_set() for "heldout" (the built-ins where no data ships), else the
    split's records (load_split)."""
    return prompt_set(limit) if name == "heldout" else load_split(name, limit)


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
