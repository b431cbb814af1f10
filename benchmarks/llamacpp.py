"""MARS on llama.cpp, measured: forward cost by width, one-token decoding and verified decoding, per weight type.

    python benchmarks/llamacpp.py [--weights f32,bf16,q8_0] [--threads 2] [--prompts 6] [--max-new-tokens 64]
                                  [--split heldout] [--invariant] [--fixed-trees]

For each weight type it loads the embedded model on llama.cpp (mars_core.engines.llamacpp.load_llamacpp; the GGUF is
written once and kept), times one cached forward by width after a 30-token cache (the fastest of interleaved rounds,
every slot's logits read, as verified does), then decodes the split's first prompts greedily with one-token decoding
(strategy "ar") and with verified decoding sized by llama.cpp's own cost curve (kept on disk per machine), and prints
tokens/s (prefill included; each prompt's fastest of --repeats alternated runs), tokens per forward and how many
answers are identical token for token. The load average is printed before
and after: on a shared machine the times overstate.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mars_core.engines.llamacpp import llamacpp_runtime, load_llamacpp  # noqa: E402
from mars_core.engines.llamacpp.cost import time_widths  # noqa: E402
from mars_core.evaluation.prompts import load_split  # noqa: E402
from mars_core.generate import generate  # noqa: E402
from mars_core.machine import cpu_name  # noqa: E402
from mars_core.runtime.runtime import Runtime  # noqa: E402

WIDTHS = (1, 2, 4, 8, 16, 24, 32)


def decode_pair(engine, tokenizer, prompt: str, max_new: int, runtime, repeats: int) -> dict:
    """Greedy one-token ("ar") and verified decoding of one prompt, alternated `repeats` times: the fastest run of
    each (so a burst of other work on the machine hits both alike), with its tokens, forwards and ids."""
    best: dict = {}
    for _ in range(repeats):
        for strategy in ("ar", "verified"):
            t0 = time.perf_counter()
            out = generate(engine, tokenizer, prompt, strategy=strategy, block_size=4, max_new_tokens=max_new,
                           runtime=runtime if strategy == "verified" else None)
            took = time.perf_counter() - t0
            if strategy not in best or took < best[strategy]["seconds"]:
                best[strategy] = {"seconds": took, "tokens": out.generated_tokens, "forwards": out.forwards,
                                  "ids": out.token_ids[0]}
    return best


def shared_prefix(a: list[int], b: list[int]) -> float:
    """Fraction of the longer answer that both share from the start."""
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return n / max(len(a), len(b), 1)


def run(weights: str, args: argparse.Namespace, prompts: list[str]) -> None:
    engine, tokenizer = load_llamacpp(weights=weights, threads=args.threads, invariant=args.invariant)
    times = time_widths(engine, WIDTHS, rounds=args.rounds)
    ratios = " / ".join(f"{t / times[0]:.2f}" for t in times[1:])
    print(f"\n{weights}: forward after a 30-token cache, {times[0] * 1e3:.1f} ms for 1 new token; x that for "
          f"{' / '.join(map(str, WIDTHS[1:]))}: {ratios}")
    runtime = llamacpp_runtime(engine, tokenizer)
    print(f"{weights}: verified is {runtime.guarantee()}")
    if args.fixed_trees:  # no curve: verified's fixed rules
        runtime = Runtime(width_check=runtime.width_check)
    generate(engine, tokenizer, prompts[0], strategy="ar", max_new_tokens=8)  # warm-up
    pairs = [decode_pair(engine, tokenizer, p, args.max_new_tokens, runtime, args.repeats) for p in prompts]
    total = {s: {k: sum(p[s][k] for p in pairs) for k in ("seconds", "tokens", "forwards")} for s in ("ar", "verified")}
    same = sum(p["ar"]["ids"] == p["verified"]["ids"] for p in pairs)
    prefix = sum(shared_prefix(p["ar"]["ids"], p["verified"]["ids"]) for p in pairs) / len(pairs)
    ar_tps = total["ar"]["tokens"] / total["ar"]["seconds"]
    ver_tps = total["verified"]["tokens"] / total["verified"]["seconds"]
    print(f"{weights}: one-token decoding {ar_tps:.1f} tokens/s; verified {ver_tps:.1f} "
          f"tokens/s = {ver_tps / ar_tps:.2f}x, {total['verified']['tokens'] / total['verified']['forwards']:.2f} "
          f"tokens per forward (prefill counted); answers identical {same}/{len(pairs)}, mean shared prefix "
          f"{prefix:.0%}")
    engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--weights", default="f32,bf16,q8_0")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--split", default="heldout")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=2, help="runs per prompt and method, the fastest kept")
    parser.add_argument("--fixed-trees", action="store_true",
                        help="verified by its fixed rules, not llama.cpp's curve: wide trees, to check identity")
    parser.add_argument("--invariant", action="store_true", help="every forward at two rows or more (engine.py)")
    args = parser.parse_args()
    # the decoders' torch work beside llama.cpp is bookkeeping on rows of logits: on two busy cores torch's thread
    # pool only adds sync (a 49152-float gather took 2.5-25 ms with 2 threads under load, against well under 1 ms)
    torch.set_num_threads(1)
    prompts = [r["prompt"] for r in load_split(args.split, args.prompts)]
    print(f"{cpu_name()}, {args.threads or os.cpu_count()} threads, load average {os.getloadavg()[0]:.2f}; "
          f"{len(prompts)} {args.split} prompts, {args.max_new_tokens} new tokens, greedy, B = 4"
          f"{', invariant (>= 2 rows per forward)' if args.invariant else ''}"
          f"{', verified by its fixed rules' if args.fixed_trees else ''}")
    for weights in args.weights.split(","):
        run(weights, args, prompts)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
