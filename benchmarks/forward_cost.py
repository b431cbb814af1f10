"""What one cached forward costs: k new tokens per sample after a context, under prepare()'s runtime and plain torch.

    python benchmarks/forward_cost.py [--model NAME] [--batch-sizes 1,16] [--widths 1,2,4,7,8] [--context 160]
    python benchmarks/forward_cost.py --profile [--batch-sizes 1 --widths 4]    # torch.profiler's top operators

For each batch size and width k it times the forward our decoders run (mars_core.evaluation.bench.forward_seconds:
runtime.feed into the slot cache, in interleaved rounds so drift hits every variant alike) under the runtime
prepare() gives and under plain torch (Runtime(): SDPA, torch's linear kernels), and prints medians in ms with the
ratio to the 1-token forward: the t(k)/t(1) that bounds any multi-token method on this machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mars_core import load, prepare  # noqa: E402
from mars_core.evaluation.bench import forward_seconds  # noqa: E402
from mars_core.evaluation.prompts import prompt_set  # noqa: E402
from mars_core.runtime import Runtime  # noqa: E402


def timings(model, tokenizer, runtime: Runtime, batch: int, width: int, context: int, repeats: int, rounds: int = 3
            ) -> dict[str, float]:
    """Median ms of a width-k forward after `context` tokens, under the prepared runtime and plain torch."""
    prompts = [r["prompt"] for r in prompt_set(batch)]
    prompts = (prompts * batch)[:batch]
    variants = {"prepared": runtime, "plain": Runtime()}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, rt in variants.items():
            times[name].append(forward_seconds(model, tokenizer, prompts, width, context, max(repeats // rounds, 1),
                                               runtime=rt))
    return {name: 1000 * statistics.median(t) for name, t in times.items()}


def profile(model, tokenizer, runtime: Runtime, batch: int, width: int, context: int, repeats: int) -> str:
    """torch.profiler's table of the operators that take the most self time in width-k forwards."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    prompts = ([r["prompt"] for r in prompt_set(batch)] * batch)[:batch]
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        forward_seconds(model, tokenizer, prompts, width, context, repeats, runtime=runtime)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None)
    p.add_argument("--batch-sizes", default="1,16")
    p.add_argument("--widths", default="1,2,4,7,8")
    p.add_argument("--context", type=int, default=160)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--profile", action="store_true", help="print torch.profiler's top operators instead")
    args = p.parse_args()
    model, tokenizer = load(args.model)
    runtime = prepare(model, measure_cost=False)
    if args.profile:
        for b in (int(x) for x in args.batch_sizes.split(",")):
            for k in (int(x) for x in args.widths.split(",")):
                print(f"batch {b}, {k} new tokens, context {args.context}:")
                print(profile(model, tokenizer, runtime, b, k, args.context, args.repeats))
        return
    print(f"{model.dtype}, {torch.get_num_threads()} threads, context {args.context}")
    print(f"{'batch':>5} {'k':>3} {'prepared ms':>12} {'plain ms':>9} {'t(k)/t(1) prepared':>19}")
    for b in (int(x) for x in args.batch_sizes.split(",")):
        one = None
        for k in (int(x) for x in args.widths.split(",")):
            t = timings(model, tokenizer, runtime, b, k, args.context, args.repeats)
            one = one or t["prepared"]
            print(f"{b:>5} {k:>3} {t['prepared']:>12.1f} {t['plain']:>9.1f} {t['prepared'] / one:>19.2f}")


if __name__ == "__main__":
    main()
