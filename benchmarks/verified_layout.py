"""Where verified decoding's width pays: tokens per forward and forward width over a grid of draft thresholds and
group floors, and the speed over one-token decoding that a measured cost curve t(width)/t(1) predicts.

    python benchmarks/verified_layout.py [--limit 27] [--max-new-tokens 96] [--thresholds 0.05,0.2,0.5]
                                         [--floors 0,0.05,0.1,0.2] [--lookups 0,7] [--odds 0.6] [--block-size 4]
                                         [--split heldout] [--slope 0.02]

Tokens per forward and widths are deterministic (greedy); the cost curve is timed on this machine first
(mars_core.evaluation.bench.forward_seconds, batch 1, explicit mask), so run it on a quiet machine. The predicted
speed is tokens_per_forward / mean(t(width)/t(1)): what the layout is worth before any per-step overhead.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mars_core import Runtime, TreeLayout, generate, load, prepare  # noqa: E402
from mars_core.evaluation.bench import forward_seconds  # noqa: E402
from mars_core.evaluation.prompts import load_split  # noqa: E402


def cost_curve(model, tokenizer, prompt: str, widths: list[int], rounds: int = 3) -> dict[int, float]:
    """t(width)/t(1) of a batch-1 cached forward with our explicit mask (medians over interleaved rounds)."""
    times: dict[int, list[float]] = {w: [] for w in widths}
    for _ in range(rounds):
        for w in widths:
            times[w].append(forward_seconds(model, tokenizer, [prompt], w, 160, 5, keep=1))
    one = statistics.median(times[1])
    return {w: statistics.median(t) / one for w, t in times.items()}


def decode_widths(model, tokenizer, prompts: list[str], block_size: int, threshold: float, max_new: int,
                  layout: TreeLayout, runtime: Runtime):
    """(tokens, forwards, widths of every forward after the prefill) over the prompts, one at a time."""
    widths: list[int] = []
    hook = model.get_decoder().register_forward_pre_hook(
        lambda m, a, kw: widths.append(kw["input_ids"].shape[1]), with_kwargs=True)
    tokens = forwards = 0
    try:
        for p in prompts:
            start = len(widths)
            r = generate(model, tokenizer, p, strategy="verified", block_size=block_size, threshold=threshold,
                         max_new_tokens=max_new, layout=layout, runtime=runtime)
            tokens, forwards = tokens + r.generated_tokens, forwards + r.forwards
            del widths[start]  # the prefill: the prompt's width, the same for every layout
    finally:
        hook.remove()
    return tokens, forwards, widths


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None)
    p.add_argument("--split", default="heldout")
    p.add_argument("--limit", type=int, default=27)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--block-size", type=int, default=4)
    p.add_argument("--thresholds", default="0.01,0.1,0.2,0.3,0.5,0.7")
    p.add_argument("--floors", default="0,0.05,0.1,0.2,0.3")
    p.add_argument("--lookups", default=str(TreeLayout().lookup_drafts), help="prompt-lookup chain lengths (0: none)")
    p.add_argument("--odds", default=str(TreeLayout().lookup_odds), help="a lookup draft's assumed odds")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--slope", type=float, default=None,
                   help="skip the timing: t(w)/t(1) = 1 + slope * (w - 1) (on a busy machine)")
    args = p.parse_args()
    model, tokenizer = load(args.model, dtype=args.dtype)
    runtime = prepare(model, measure_cost=False)
    prompts = [r["prompt"] for r in load_split(args.split, args.limit)]
    g = args.block_size - 1
    widest = 1 + g + (g + 1) * g
    if args.slope is None:
        curve = cost_curve(model, tokenizer, prompts[0], list(range(1, widest + 1)))
    else:
        curve = {w: 1 + args.slope * (w - 1) for w in range(1, widest + 1)}
    print(f"{model.dtype}, {torch.get_num_threads()} threads; t(w)/t(1): "
          + " ".join(f"{w}:{c:.2f}" for w, c in curve.items()))
    print(f"{'look':>4} {'odds':>5} {'τ':>5} {'floor':>6} {'tok/fwd':>8} {'width':>6} {'cost':>6} {'predicted':>10}")
    grid = [(int(look), float(odds), float(t), float(floor)) for look in args.lookups.split(",")
            for odds in args.odds.split(",") for t in args.thresholds.split(",") for floor in args.floors.split(",")]
    for look, odds, t, floor in grid:
        layout = TreeLayout(group_floor=floor, lookup_drafts=look, lookup_odds=odds)
        tokens, forwards, widths = decode_widths(model, tokenizer, prompts, args.block_size, t, args.max_new_tokens,
                                                 layout, runtime)
        cost = statistics.mean(curve.get(w, 1 + (w - 1) * (curve[widest] - 1) / (widest - 1)) for w in widths)
        tpf = tokens / forwards
        print(f"{look:>4} {odds:>5g} {t:>5g} {floor:>6g} {tpf:>8.2f} {statistics.mean(widths):>6.1f} {cost:>6.2f} "
              f"{tpf / cost:>10.2f}", flush=True)


if __name__ == "__main__":
    main()
