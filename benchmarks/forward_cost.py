"""What one cached forward costs: k new tokens per sample after a context, with and without an explicit mask.

    python benchmarks/forward_cost.py [--model NAME] [--batch-sizes 1,16] [--widths 1,2,4,7,8] [--context 160]
    python benchmarks/forward_cost.py --profile [--batch-sizes 1 --widths 4]    # torch.profiler's top operators

For each batch size and width k it times (mars_core.evaluation.bench.forward_seconds, in interleaved rounds so
drift hits every variant alike) the forward transformers' generate runs (no mask: the model builds its own causal
one) and the forward our decoders run (an explicit boolean [b, 1, k, T+k] mask from
mars_core.runtime.cache_mask), under the runtime prepare() gives, and prints medians in ms with the ratio to the
1-token forward: the t(k)/t(1) that bounds any multi-token method on this machine.
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
from mars_core.runtime import Runtime, new_cache  # noqa: E402
from mars_core.runtime.forward import with_cache  # noqa: E402


def timings(model, tokenizer, runtime: Runtime, batch: int, width: int, context: int, repeats: int, rounds: int = 3
            ) -> dict[str, float]:
    """Median ms of a width-k cached forward after `context` tokens: without a mask and with our explicit one."""
    prompts = [r["prompt"] for r in prompt_set(batch)]
    prompts = (prompts * batch)[:batch]
    variants = {"no mask": False, "explicit mask": True}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, explicit in variants.items():
            times[name].append(forward_seconds(model, tokenizer, prompts, width, context, max(repeats // rounds, 1),
                                               explicit_mask=explicit, runtime=runtime))
    return {name: 1000 * statistics.median(t) for name, t in times.items()}


@torch.inference_mode()
def profile(model, runtime: Runtime, batch: int, width: int, context: int, repeats: int) -> str:
    """torch.profiler's table of the operators that take the most self time in width-k cached forwards."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    cache = new_cache(model)
    model(input_ids=torch.randint(100, 1000, (batch, context)), logits_to_keep=1, **with_cache(model, cache))
    step = torch.randint(100, 1000, (batch, width))
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof, runtime.active():
        for _ in range(repeats):
            model(input_ids=step, logits_to_keep=width, **with_cache(model, cache))
            cache.crop(-width)
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
                print(profile(model, runtime, b, k, args.context, args.repeats))
        return
    print(f"{model.dtype}, {torch.get_num_threads()} threads, context {args.context}")
    print(f"{'batch':>5} {'k':>3} {'no mask ms':>11} {'mask ms':>9} {'mask/no':>8} {'t(k)/t(1)':>10}")
    for b in (int(x) for x in args.batch_sizes.split(",")):
        one = None
        for k in (int(x) for x in args.widths.split(",")):
            t = timings(model, tokenizer, runtime, b, k, args.context, args.repeats)
            one = one or t["no mask"]
            print(f"{b:>5} {k:>3} {t['no mask']:>11.1f} {t['explicit mask']:>9.1f} "
                  f"{t['explicit mask'] / t['no mask']:>8.2f} {t['no mask'] / one:>10.2f}")


if __name__ == "__main__":
    main()
