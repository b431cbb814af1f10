"""Verified decoding with the groups' logits read in the verify slots' head pass (the default) against a second
pass each forward (the previous decoder), interleaved in one process so that the machine's drift hits both alike.

    python benchmarks/head_passes.py [--split heldout|never_trained] [--batch-size 1] [--rounds 3] [--dtype fp32]

Prints each variant's tokens per second (median and every round) and how many answers equal our one-token decoding's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mars_core import generate, load, prepare  # noqa: E402
from mars_core.decoding.verified import tree  # noqa: E402
from mars_core.evaluation.prompts import split_prompts  # noqa: E402

VARIANTS = {"second pass": -1, "one pass": tree.SPARE_HEAD_ROWS}  # label: SPARE_HEAD_ROWS (-1: never one pass)


def decode(model, tokenizer, prompts: list[str], batch_size: int, **kw) -> tuple[list[list[int]], float]:
    """Every prompt's answer, in batches, and the seconds it took."""
    answers, t0 = [], time.perf_counter()
    for i in range(0, len(prompts), batch_size):
        answers += generate(model, tokenizer, prompts[i : i + batch_size], max_new_tokens=64, **kw).token_ids
    return answers, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="a name or path load() takes (default: the embedded model)")
    p.add_argument("--dtype", default="fp32", choices=["auto", "fp32", "bf16"])
    p.add_argument("--split", default="heldout", choices=["heldout", "never_trained"])
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--limit", type=int, default=18, help="prompts")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)

    model, tokenizer = load(args.model, dtype=args.dtype)
    runtime = prepare(model)
    records = split_prompts(args.split, args.limit)
    prompts = [r["prompt"] for r in records]
    kw = dict(strategy="verified", block_size=4, threshold=0.3, runtime=runtime)
    decode(model, tokenizer, prompts[:1], 1, **kw)  # warm-up
    speed: dict[str, list[float]] = {name: [] for name in VARIANTS}
    answers: dict[str, list[list[int]]] = {}
    for _ in range(args.rounds):
        for name, rows in VARIANTS.items():
            tree.SPARE_HEAD_ROWS = rows  # read_logits reads it at each forward
            answers[name], seconds = decode(model, tokenizer, prompts, args.batch_size, **kw)
            speed[name].append(sum(map(len, answers[name])) / seconds)
    one_token, _ = decode(model, tokenizer, prompts, args.batch_size, strategy="ar", runtime=runtime)
    print(f"{args.split}, batch {args.batch_size}, {len(prompts)} prompts, {args.dtype}, {args.rounds} rounds")
    for name in VARIANTS:
        same = sum(a == b for a, b in zip(answers[name], one_token))
        print(f"  {name:12s} {statistics.median(speed[name]):6.1f} tokens/s  (rounds: "
              f"{', '.join(f'{x:.1f}' for x in speed[name])})  same as one-token: {same}/{len(prompts)}")


if __name__ == "__main__":
    main()
