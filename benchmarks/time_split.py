"""Where a decode's wall-clock goes: the model's forwards against everything else (our decoding machinery).

    python benchmarks/time_split.py [--model NAME] [--dtype fp32] [--batch-size 1] [--block-size 4] [--threshold 0.9]
    python benchmarks/time_split.py --strategies verified --profile     # torch.profiler's top operators too

Wraps the model's decoder body and LM head with timers (every strategy runs exactly these; verified calls them
directly), decodes a few held-out prompts with each strategy, and prints per forward: the total time, the time
inside the model, and the rest (masks, acceptance, drafts, prompt lookup, cache crops, host syncs).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mars_core import generate, load, prepare  # noqa: E402
from mars_core.decoding.strategies import default_threshold  # noqa: E402
from mars_core.evaluation.prompts import prompt_set  # noqa: E402


def timed_model(model: torch.nn.Module) -> tuple[list[float], list[int]]:
    """Time the decoder body and the LM head (seconds per call), and count the body's calls (the forwards)."""
    seconds: list[float] = []
    calls: list[int] = []
    for part in (model.get_decoder(), model.get_output_embeddings()):
        inner = part.forward

        def forward(*args, _inner=inner, _body=part is model.get_decoder(), **kwargs):
            t0 = time.perf_counter()
            out = _inner(*args, **kwargs)
            seconds.append(time.perf_counter() - t0)
            calls.extend([1] if _body else [])
            return out

        part.forward = forward
    return seconds, calls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None)
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--block-size", type=int, default=4)
    p.add_argument("--threshold", type=float, default=0.9)
    p.add_argument("--limit", type=int, default=9, help="held-out prompts (round-robin over categories)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--strategies", default="ar,sliding,block,verified", help="comma list")
    p.add_argument("--dtype", default=None, help="auto (default), bf16 or fp32")
    p.add_argument("--profile", action="store_true", help="also print torch.profiler's top operators per row")
    args = p.parse_args()
    model, tokenizer = load(args.model, dtype=args.dtype)
    runtime = prepare(model)
    prompts = [r["prompt"] for r in prompt_set(args.limit)]
    batches = [prompts[i : i + args.batch_size] for i in range(0, len(prompts), args.batch_size)]
    seconds, calls = timed_model(model)
    checked = default_threshold("verified")
    print(f"{'strategy':<9}{'τ':>5}{'forwards':>9}{'tok/fwd':>8}{'ms/fwd':>8}{'in model':>9}{'rest':>7}")
    for strategy, threshold in (("ar", 1.0), ("sliding", 1.0), ("sliding", args.threshold), ("block", 1.0),
                                ("block", args.threshold), ("verified", 1.0), ("verified", checked)):
        if strategy not in args.strategies.split(","):
            continue
        generate(model, tokenizer, prompts[:1], strategy=strategy, block_size=args.block_size, max_new_tokens=4,
                 runtime=runtime)
        seconds.clear()
        calls.clear()
        profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) if args.profile else None
        t0, sample_forwards, tokens = time.perf_counter(), 0, 0
        with profiler or contextlib.nullcontext():
            for batch in batches:
                r = generate(model, tokenizer, batch, strategy=strategy, block_size=args.block_size,
                             threshold=threshold, max_new_tokens=args.max_new_tokens, runtime=runtime)
                sample_forwards, tokens = sample_forwards + sum(r.sample_forwards), tokens + r.generated_tokens
        total = time.perf_counter() - t0
        inside = sum(seconds)
        n = len(calls)
        print(f"{strategy:<9}{threshold:>5.2f}{n:>9}{tokens / max(sample_forwards, 1):>8.2f}"
              f"{1e3 * total / n:>8.1f}{1e3 * inside / n:>9.1f}{1e3 * (total - inside) / n:>7.1f}")
        if profiler is not None:
            print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()
