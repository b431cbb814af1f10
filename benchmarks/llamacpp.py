"""MARS on llama.cpp, measured: forward cost by width, one-token decoding and verified decoding, per weight type.

    python benchmarks/llamacpp.py [--weights f32,bf16,q8_0] [--threads 2] [--prompts 6] [--max-new-tokens 64]
                                  [--split heldout] [--invariant]

For each weight type it loads the embedded model on llama.cpp (mars_core.engines.llamacpp.load_llamacpp; the GGUF is
written once and kept), times one cached forward by width after a 30-token cache (the fastest of interleaved rounds,
every slot's logits read, as verified does), then decodes the split's first prompts greedily with one-token decoding
(strategy "ar") and with verified decoding sized by llama.cpp's own cost curve (kept on disk per machine), and prints
tokens/s, tokens per forward and how many answers are identical token for token. The load average is printed before
and after: on a shared machine the times overstate.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mars_core.engines.llamacpp import llamacpp_runtime, load_llamacpp  # noqa: E402
from mars_core.engines.llamacpp.cost import time_widths  # noqa: E402
from mars_core.evaluation.prompts import load_split  # noqa: E402
from mars_core.generate import generate  # noqa: E402
from mars_core.machine import cpu_name  # noqa: E402

WIDTHS = (1, 2, 4, 8, 16, 24, 32)


def decode_all(engine, tokenizer, prompts: list[str], strategy: str, max_new: int, runtime=None) -> dict:
    """Tokens, seconds, forwards and token ids of greedy decoding of every prompt with one strategy."""
    ids, tokens, forwards, secs = [], 0, 0, 0.0
    for prompt in prompts:
        t0 = time.perf_counter()
        out = generate(engine, tokenizer, prompt, strategy=strategy, block_size=4, max_new_tokens=max_new,
                       runtime=runtime)
        secs += time.perf_counter() - t0
        ids.append(out.token_ids[0])
        tokens, forwards = tokens + out.generated_tokens, forwards + out.forwards
    return {"ids": ids, "tokens": tokens, "seconds": secs, "forwards": forwards}


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
    runtime = llamacpp_runtime(engine)
    generate(engine, tokenizer, prompts[0], strategy="ar", max_new_tokens=8)  # warm-up
    ar = decode_all(engine, tokenizer, prompts, "ar", args.max_new_tokens)
    ver = decode_all(engine, tokenizer, prompts, "verified", args.max_new_tokens, runtime)
    same = sum(a == v for a, v in zip(ar["ids"], ver["ids"]))
    prefix = sum(shared_prefix(a, v) for a, v in zip(ar["ids"], ver["ids"])) / len(prompts)
    ar_tps, ver_tps = ar["tokens"] / ar["seconds"], ver["tokens"] / ver["seconds"]
    print(f"{weights}: one-token decoding {ar_tps:.1f} tokens/s; verified (llama.cpp cost curve) {ver_tps:.1f} "
          f"tokens/s = {ver_tps / ar_tps:.2f}x, {ver['tokens'] / ver['forwards']:.2f} tokens per forward; answers "
          f"identical {same}/{len(prompts)}, mean shared prefix {prefix:.0%}")
    engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--weights", default="f32,bf16,q8_0")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--split", default="heldout")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--invariant", action="store_true", help="every forward at two rows or more (engine.py)")
    args = parser.parse_args()
    prompts = [r["prompt"] for r in load_split(args.split, args.prompts)]
    print(f"{cpu_name()}, {args.threads or os.cpu_count()} threads, load average {os.getloadavg()[0]:.2f}; "
          f"{len(prompts)} {args.split} prompts, {args.max_new_tokens} new tokens, greedy, B = 4"
          f"{', invariant (>= 2 rows per forward)' if args.invariant else ''}")
    for weights in args.weights.split(","):
        run(weights, args, prompts)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
