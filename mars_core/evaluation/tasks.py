"""Prompt categories and the scorers mars-eval applies to held-out answers.

Categories: predictable spans ("lists", "counting", "tables", "repeats", "reformatting", "arithmetic") and open
ones ("chat", "explanation", "reasoning", and the prompts that look like use: "code", "writing", "everyday",
"translation"). The prompts themselves are built outside the engine, by prompt_sources (mars-distill); a record's
"gold" is the answer the scorers check and its "task" names the reasoning-gym task whose own scorer applies.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from typing import Any

PREDICTABLE = ("lists", "counting", "tables", "repeats", "reformatting", "arithmetic")
SOURCE_CATEGORIES = ("code", "writing", "everyday", "translation")
OPEN = ("chat", "explanation", "reasoning") + SOURCE_CATEGORIES
CATEGORIES = PREDICTABLE + OPEN

Record = dict[str, Any]

_RG_CACHE: dict[str, Any] = {}


def _rg_dataset(task: str):
    if task not in _RG_CACHE:
        import reasoning_gym

        _RG_CACHE[task] = reasoning_gym.create_dataset(task, size=1, seed=0)
    return _RG_CACHE[task]


_NUM = re.compile(r"-?\d+(?:[.,]\d+)*(?:/\d+)?")


def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", s.strip().lower())


def _numbers(text: str) -> list[str]:
    return [m.replace(",", "") for m in _NUM.findall(text)]


def _candidates(text: str) -> list[str]:
    """Answer strings a scorer may try: the whole answer, its last line, a boxed/"answer is" span, the last number."""
    text = text.strip()
    cands = [text]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if lines:
        cands.append(lines[-1])
    m = re.findall(r"(?:answer is|answer:|=)\s*\**\s*([^\n*]+)", text, re.IGNORECASE)
    if m:
        cands.append(m[-1].strip().rstrip("."))
    nums = _numbers(text)
    if nums:
        cands.append(nums[-1])
    return cands


def scorer(records: list[Record]) -> str:
    """Which scorer a set of records is scored by. Records naming a reasoning-gym task use the task's own scorer
    where reasoning-gym is installed (the `data` extra) and fall back to matching where it is not, which scores
    differently: so every accuracy carries this line."""
    tasks = sum(1 for r in records if r.get("task") and r.get("gold") is not None)
    if not tasks:
        return "matching"
    if importlib.util.find_spec("reasoning_gym") is None:
        return (f"matching only: reasoning-gym is not installed, so {tasks} records are scored by matching instead "
                "of their task's scorer (pip install -e \".[data]\")")
    return f"reasoning-gym {importlib.metadata.version('reasoning_gym')} for {tasks} records, matching for the rest"


def score(record: Record, answer: str) -> float | None:
    """Task accuracy of an answer in [0, 1], or None where the record has no gold answer.

    reasoning-gym records use the task's own scorer (best over a few extracted candidates); numeric golds
    need the number to be the last number of the answer (or the 'answer is' span); list-like golds ("a|b|c")
    need every item to appear; other golds need to appear (case- and whitespace-insensitive)."""
    gold = record.get("gold")
    if gold is None:
        return None
    task = record.get("task")
    if task:
        try:
            ds = _rg_dataset(task)
            entry = {"question": record.get("prompt", ""), "answer": gold, "metadata": record.get("rg_metadata", {})}
            best = 0.0
            for cand in _candidates(answer):
                try:
                    best = max(best, float(ds.score_answer(cand, entry) or 0.0))
                except Exception:  # some scorers need metadata we do not keep: fall back to matching below
                    pass
            if best > 0:
                return best
        except Exception:
            pass
    g = _norm(gold)
    a = _norm(answer)
    if _NUM.fullmatch(gold.strip()):
        nums = _numbers(answer)
        return float(bool(nums) and nums[-1] == gold.strip().replace(",", ""))
    if "|" in gold:
        return float(all(_norm(part) in a for part in gold.split("|")))
    if g in a:
        return 1.0
    # sequences: accept the same items with other separators (newlines, bullets)
    items = [x for x in re.split(r"[,\s]+", g) if x]
    return float(len(items) > 1 and all(x in a for x in items))
