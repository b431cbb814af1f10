"""The paper's Table 2, shaped for one model: per task, the lm-eval score and tokens per forward for one-token
decoding, threshold mode at τ = 0.95 and 0.9, and verified mode, through lm-evaluation-harness and `mars_studio`.

    python benchmarks/lm_eval_table.py --limits mars_humaneval_chat:20,mars_gsm_symbolic:30 \
        --out assets/records/lm_eval/lm_eval_smollm2.json

Each (mode, task) is one lm_eval.simple_evaluate run, the same as
    mars-lm-eval --model mars_studio --model_args pretrained=default,strategy=ar,dtype=fp32,max_new_tokens=256 \
        --tasks mars_gsm_symbolic --limit 30 --batch_size 8 --apply_chat_template --confirm_run_unsafe_code
with the model loaded once. The JSON is rewritten after every run (a stopped run keeps what it finished) and holds
each task's score, tokens per forward, seconds, and how many answers equal one-token decoding's, text for text.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

MODES = {  # label: (strategy, threshold)
    "one-token": ("ar", None),
    "tau=0.95": ("sliding", 0.95),
    "tau=0.9": ("sliding", 0.9),
    "verified": ("verified", None),
}
SCORES = {"mars_gsm_symbolic": ("exact_match", "flexible-extract")}  # task: (metric, filter); else pass@1, none


def score_of(task: str, results: dict) -> float:
    metric, filt = SCORES.get(task, ("pass@1", "none"))
    return results["results"][task][f"{metric},{filt}"]


def parse_limits(text: str) -> dict[str, int | None]:
    out = {}
    for part in text.split(","):
        name, _, n = part.strip().partition(":")
        out[name] = int(n) if n else None
    return out


def agreement(rows: dict, reference: str) -> None:
    """Per task and mode: answers (raw generated text) equal to the reference mode's, doc by doc."""
    for task, by_mode in rows["samples"].items():
        ref = by_mode.get(reference)
        if ref is None:
            continue
        for mode, answers in by_mode.items():
            common = [d for d in answers if d in ref]
            same = sum(answers[d] == ref[d] for d in common)
            rows["table"][task][mode]["same_as_one_token"] = f"{same}/{len(common)}"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="default", help="anything mars_core.load takes (default: the embedded model)")
    p.add_argument("--dtype", default="fp32", help="fp32: verified's answers then equal one-token decoding's")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {list(MODES)}")
    p.add_argument("--limits", default="mars_humaneval_chat:20,mars_gsm_symbolic:30",
                   help="task:N,... (N omitted: the whole task)")
    p.add_argument("--block-size", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--threads", type=int, default=None, help="torch threads (1 is fastest on a busy 2-core CPU)")
    p.add_argument("--out", default="assets/records/lm_eval/lm_eval_smollm2.json")
    args = p.parse_args(argv)

    import lm_eval
    import torch
    from lm_eval.tasks import TaskManager

    import mars_core
    from mars_core.evaluation.harness import MarsStudioLM
    from mars_core.evaluation.lm_eval_tasks import TASKS_DIR

    if args.threads:
        torch.set_num_threads(args.threads)
    limits = parse_limits(args.limits)
    modes = [m.strip() for m in args.modes.split(",")]
    model, tokenizer = mars_core.load(None if args.model == "default" else args.model, dtype=args.dtype)
    manager = TaskManager(include_path=str(TASKS_DIR), include_defaults=False)  # ours only: indexing is slow
    out = Path(args.out)
    rows: dict = {
        "command": "python benchmarks/lm_eval_table.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "model": args.model, "dtype": args.dtype, "block_size": args.block_size, "batch_size": args.batch_size,
        "max_new_tokens": args.max_new_tokens, "limits": limits, "torch_threads": torch.get_num_threads(),
        "lm_eval": lm_eval.__version__, "apply_chat_template": True, "table": {}, "samples": {},
    }
    started = time.time()
    for mode in modes:
        strategy, threshold = MODES[mode]
        lm = MarsStudioLM(pretrained=model, tokenizer=tokenizer, strategy=strategy, threshold=threshold,
                          block_size=args.block_size, batch_size=args.batch_size, max_new_tokens=args.max_new_tokens)
        lm.source = args.model
        for task, limit in limits.items():
            res = lm_eval.simple_evaluate(
                model=lm, tasks=[task], limit=limit, task_manager=manager, apply_chat_template=True,
                confirm_run_unsafe_code=True, log_samples=True, bootstrap_iters=0,
            )
            stats = lm.report()["tasks"][task]
            rows["table"].setdefault(task, {})[mode] = {
                "strategy": strategy, "threshold": threshold, "score": score_of(task, res),
                "n": res["results"][task].get("sample_len") or len(res["samples"][task]),
                "tokens_per_forward": stats["tokens_per_forward"], "answer_tokens": stats["answer_tokens"],
                "committed_tokens_per_forward": stats["committed_tokens_per_forward"],
                "generated_tokens": stats["generated_tokens"],
                "forwards": stats["forwards"], "sample_forwards": stats["sample_forwards"],
                "seconds": round(stats["seconds"], 1),
            }
            rows["samples"].setdefault(task, {})[mode] = {
                str(s["doc_id"]): s["resps"][0][0] for s in res["samples"][task]
            }
            agreement(rows, "one-token")
            rows["elapsed_s"] = round(time.time() - started, 1)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n")
            print(f"{mode:10s} {task:24s} {json.dumps(rows['table'][task][mode])}", flush=True)
    print(markdown(rows))


def markdown(rows: dict) -> str:
    """The table: a row per mode, per task a cell 'score / tokens per forward'."""
    tasks = list(rows["table"])
    lines = ["| mode | " + " | ".join(tasks) + " |", "|---|" + "---|" * len(tasks)]
    modes = list(dict.fromkeys(m for t in tasks for m in rows["table"][t]))
    for mode in modes:
        cells = []
        for t in tasks:
            c = rows["table"][t].get(mode)
            cells.append("" if c is None else f"{100 * c['score']:.1f} / {c['tokens_per_forward']:.2f}")
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
