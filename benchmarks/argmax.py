"""The greedy argmax over a vocabulary on this CPU: torch's max(-1) and argmax against first_argmax (numpy's).

    python benchmarks/argmax.py [--threads 2]

Fastest of 7 rounds of 50 calls each, fp32 logits, the row shapes verified decoding reads
(docs/speed.md#the-argmax-on-the-cpu).
"""

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mars_core.decoding.sampling import first_argmax  # noqa: E402
from mars_core.machine import machine_info, machine_line  # noqa: E402
from mars_core.runtime.timing import seconds  # noqa: E402

SHAPES = [(1, 1, 49152), (1, 7, 49152), (8, 7, 49152), (4, 3, 151936)]


def fastest(work, calls: int = 50, rounds: int = 7) -> float:
    """Microseconds of one call: the fastest round's mean."""
    return min(seconds(lambda: [work() for _ in range(calls)]) for _ in range(rounds)) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(machine_line(machine_info(dtype=torch.float32)))
    print(f"{'logits':>18} {'max(-1) us':>11} {'argmax us':>10} {'first_argmax us':>16} {'x max(-1)':>10}")
    gen = torch.Generator().manual_seed(0)
    for shape in SHAPES:
        x = torch.randn(*shape, generator=gen)
        assert torch.equal(first_argmax(x), x.argmax(-1))
        t_max, t_arg, t_new = (fastest(f) for f in (lambda: x.max(-1).indices, lambda: x.argmax(-1),
                                                    lambda: first_argmax(x)))
        print(f"{'x'.join(map(str, shape)):>18} {t_max:11.1f} {t_arg:10.1f} {t_new:16.1f} {t_max / t_new:9.1f}x")


if __name__ == "__main__":
    main()
