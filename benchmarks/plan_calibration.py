"""Is the cost plan's yield right? Per batch size, the drafts verified mode expected to get matched when it chose
each tree (sum over the checked drafts of c_1 ... c_a, from the chain's confidences) against the drafts the next
forward matched, for mask-slot and prompt-lookup chains apart, and how many forwards fed each width. Groups too:
the chance the plan gave that the match count m lands on a group it fed (sum of P(m = j) over the fed G_j; a
miss leaves the forward after with no mask drafts) against how often it did.

    python benchmarks/plan_calibration.py [--batch-sizes 1,4,8,16] [--limit 16] [--dtype fp32] [--threads 1]

Reads DecodeOptions.record (each forward's verified.Forward); tokens per forward depend on the machine's cost curve.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mars_core import generate, load, prepare  # noqa: E402
from mars_core.evaluation.prompts import prompt_set  # noqa: E402


def calibration(runs: list[list]) -> tuple[dict[str, list[float]], collections.Counter]:
    """{"mask"|"lookup": [chains checked, expected matched, matched], "groups": [samples, expected share of m on
    a fed group, landed on one]} over consecutive forwards of each decode in `runs` (its record), and how many
    forwards fed each width."""
    stats: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0])
    widths: collections.Counter = collections.Counter()
    for forwards in runs:
        for now, after in zip(forwards, forwards[1:]):
            widths[after.ids.shape[1]] += 1
            run, count = now.chain.conf.cumprod(-1), now.chain.count
            for i in range(run.shape[0]):
                if not bool(after.tree.pending_valid[i, 0]):
                    continue
                groups = stats["groups"]
                groups[0] += 1
                groups[1] += float((now.odds[i] * now.group_fed[i]).sum())
                groups[2] += int(now.group_fed[i, after.m[i]])
                if count[i] == 0:
                    continue
                row = stats["lookup" if bool(now.chain.looked[i]) else "mask"]
                row[0] += 1
                row[1] += float(run[i, : count[i]].sum())
                row[2] += int(min(after.m[i], count[i]))
    return stats, widths


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="a name or path load() takes (default: the embedded model)")
    p.add_argument("--dtype", default="fp32", choices=["auto", "fp32", "bf16"])
    p.add_argument("--batch-sizes", default="1,4,8,16")
    p.add_argument("--limit", type=int, default=16, help="held-out prompts")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    model, tokenizer = load(args.model, dtype=args.dtype)
    runtime = prepare(model)
    prompts = [r["prompt"] for r in prompt_set(args.limit)]
    for b in (int(x) for x in args.batch_sizes.split(",")):
        runs: list[list] = []
        for i in range(0, len(prompts), b):
            runs.append([])
            generate(model, tokenizer, prompts[i : i + b], max_new_tokens=64, block_size=4, strategy="verified",
                     threshold=0.3, record=runs[-1].append, runtime=runtime)
        stats, widths = calibration(runs)
        print(f"batch {b}: forwards by tokens fed per sample {dict(sorted(widths.items()))}")
        for kind, (n, expected, matched) in stats.items():
            if kind == "groups":
                print(f"  groups {n:4d} sample forwards: m on a fed group, expected {expected / n:.1%}, "
                      f"got {matched / n:.1%}")
                continue
            print(f"  {kind:6s} chains checked {n:4d}: drafts matched each, expected {expected / n:.2f}, "
                  f"got {matched / n:.2f}")


if __name__ == "__main__":
    main()
