"""docs/lm_eval.md's tables: the embedded model through lm-evaluation-harness per decoding mode, as
`benchmarks/lm_eval_table.py` records them (per task and mode: score, tokens per forward, answers the same as
one-token decoding's, seconds)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ._records import read, table

MODES = {"one-token": "one-token (AR)", "tau=0.95": "τ = 0.95", "tau=0.9": "τ = 0.9", "verified": "verified"}
TASKS = {"mars_humaneval_chat": ("HumanEval, chat", "pass@1"), "mars_gsm_symbolic": ("word problems", "accuracy")}


def harness(name: str, seconds: bool) -> Callable[[Path], str]:
    """Per mode, for each task: score in % / tokens per forward, answers the same as one-token decoding's, and the
    generation's seconds where they were measured alone."""
    def render(records_dir: Path) -> str:
        cells = read(records_dir, name)["table"]
        header, rows = ["mode"], {mode: [label] for mode, label in MODES.items()}
        for task, (title, score) in TASKS.items():
            n = cells[task]["one-token"]["n"]
            header += [f"{title} ({n}): {score} / tok/fwd", "same", *(["s"] if seconds else [])]
            for mode in MODES:
                r = cells[task][mode]
                rows[mode] += [f"{100 * r['score']:.1f} / {r['tokens_per_forward']:.2f}", r["same_as_one_token"],
                               *([f"{r['seconds']:.0f}"] if seconds else [])]
        return table(header, list(rows.values()))
    return render


TABLES: dict[str, Callable[[Path], str]] = {
    "subset": harness("lm_eval/lm_eval_smollm2.json", seconds=True),
    "whole": harness("lm_eval/lm_eval_smollm2_full.json", seconds=False),
}
