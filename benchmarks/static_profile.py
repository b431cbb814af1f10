"""Where a decode step's time goes, static against dynamic: wall-clock per forward and torch.profiler's top ops.

    python benchmarks/static_profile.py [--max-new-tokens 64] [--limit 4] [--out profile.txt]

Decodes a few held-out prompts at batch 1 with one-token and verified decoding (B = 4), each with the dynamic and
the static-shape decoder (Runtime.static: fixed widths, a cache allocated once, CUDA graphs on a GPU), and prints
per row the forwards, tokens per forward, milliseconds per forward, then the profiler's top operators by self time
(device time where there is a GPU: the gap between it and the wall-clock is the host's share).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mars_core import generate, load, prepare  # noqa: E402
from mars_core.evaluation.prompts import prompt_set  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None)
    p.add_argument("--dtype", default=None, help="auto (default), bf16 or fp32")
    p.add_argument("--limit", type=int, default=4, help="held-out prompts")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--out", default=None, help="also write the report here")
    args = p.parse_args()
    model, tokenizer = load(args.model, dtype=args.dtype)
    runtime = prepare(model)
    prompts = [r["prompt"] for r in prompt_set(args.limit)]
    cuda = model.device.type == "cuda"
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    lines = [f"{model.device}, {model.dtype}, {args.limit} prompts x {args.max_new_tokens} tokens, batch 1"]
    tables = []
    for name, strategy, static in (("ar_static", "ar", True), ("verified_static", "verified", True),
                                   ("ar", "ar", False), ("verified", "verified", False)):  # static first: a cut run
        # keeps what the GPU floors are about
        rt = dataclasses.replace(runtime, static=static)
        run = lambda n: [generate(model, tokenizer, q, strategy=strategy, block_size=4,  # noqa: E731
                                  max_new_tokens=n, runtime=rt) for q in prompts]
        run(args.max_new_tokens)  # warm-up: the timed decodes themselves, so every width they feed is captured
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        outs = run(args.max_new_tokens)
        if cuda:
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        forwards, tokens = sum(o.forwards for o in outs), sum(o.generated_tokens for o in outs)
        lines.append(f"{name:<16} forwards {forwards:>5}  tok/fwd {tokens / forwards:5.2f}  "
                     f"ms/fwd {1e3 * wall / forwards:7.2f}  tok/s {tokens / wall:8.1f}")
        with torch.profiler.profile(activities=activities) as prof:
            run(min(args.max_new_tokens, 32))
        key = "self_cuda_time_total" if cuda else "self_cpu_time_total"
        tables.append(f"== {name}\n{prof.key_averages().table(sort_by=key, row_limit=15)}")
        if args.out:  # written after each variant: a run cut short keeps the ones it finished
            Path(args.out).write_text("\n".join(lines + tables) + "\n")
    print("\n".join(lines + tables))


if __name__ == "__main__":
    main()
