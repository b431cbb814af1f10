"""Where a llama.cpp decode's time goes between forwards: the host time after each forward (until the next
llama_decode), binned by the tokens that forward fed, for one-token decoding and for verified decoding.

    python benchmarks/llamacpp_host_time.py [--weights q8_0] [--split heldout] [--prompts 8] [--rounds 1]

It times LlamaCppEngine.decode around generate() on the embedded model's GGUF (llama.cpp's cost curve sizes the
trees, as mars-bench does), the decoders' bookkeeping on one torch thread; each decode's prefill is left out. The
table in docs/speed.md ("Bookkeeping by width") came from it; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mars_core.evaluation.bench_llamacpp import serve, torch_threads  # noqa: E402
from mars_core.evaluation.prompts import split_prompts  # noqa: E402
from mars_core.generate import generate  # noqa: E402

WIDEST = 9  # widths from here on share a bin


def timed_decodes(engine) -> list[tuple[int, float, float]]:
    """Have the engine log (tokens fed, start, end) of every llama_decode from now on; return the log."""
    log: list[tuple[int, float, float]] = []
    decode = engine.decode

    def timed() -> None:
        start = time.perf_counter()
        decode()
        log.append((engine.batch.n_tokens, start, time.perf_counter()))

    engine.decode = timed
    return log


def host_by_width(log: list[tuple[int, float, float]]) -> dict[int, list[tuple[float, float]]]:
    """(host ms after the forward, the forward's ms) by tokens fed, the prefill left out."""
    bins: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for (width, start, end), (_, following, _) in zip(log[1:-1], log[2:]):
        bins[min(width, WIDEST)].append((1000 * (following - end), 1000 * (end - start)))
    return bins


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--weights", default="q8_0", help="f32, bf16 or q8_0")
    p.add_argument("--split", default="heldout", help="heldout or never_trained")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=None, help="llama.cpp's threads (default: every core)")
    p.add_argument("--rounds", type=int, default=1, help="times over the prompts, the two decoders in turn per prompt")
    args = p.parse_args()
    served = serve(None, args.weights, args.threads)
    records = split_prompts(args.split, args.prompts)
    log = timed_decodes(served.engine)
    runs = (("ar", 1, 1.0), ("verified", 4, 0.3))
    bins: dict[str, dict[int, list[tuple[float, float]]]] = {name: defaultdict(list) for name, _, _ in runs}
    for _ in range(args.rounds):  # each prompt by each strategy in turn: a slow spell of the machine hits both
        for record in records:
            for strategy, block_size, threshold in runs:
                log.clear()
                with torch_threads(1):
                    generate(served.engine, served.tokenizer, record["prompt"], strategy=strategy,
                             block_size=block_size, threshold=threshold, max_new_tokens=args.max_new_tokens,
                             runtime=served.runtime)
                for width, pairs in host_by_width(log).items():
                    bins[strategy][width] += pairs
    for strategy, by_width in bins.items():
        every = sorted(host for pairs in by_width.values() for host, _ in pairs)
        print(f"{args.weights} {args.split} {strategy}: {len(every)} forwards, host median "
              f"{every[len(every) // 2]:.2f} mean {sum(every) / len(every):.2f} ms a forward")
        for width in sorted(by_width):
            host = sorted(h for h, _ in by_width[width])
            forward = sum(f for _, f in by_width[width]) / len(by_width[width])
            print(f"  {width if width < WIDEST else f'{WIDEST}+'} fed: {len(host):4d} forwards, host median "
                  f"{host[len(host) // 2]:.2f} mean {sum(host) / len(host):.2f} ms; forward {forward:.2f} ms")


if __name__ == "__main__":
    main()
