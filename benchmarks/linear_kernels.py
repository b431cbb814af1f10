"""Where a wide forward's time goes on this CPU, and what oneDNN-packed weights (mars_core/runtime/linear.py) change.

    python benchmarks/linear_kernels.py [--model NAME] [--dtype fp32] [--widths 1,2,3,4,8,16]

Two tables. By shape: every distinct linear layer of the model, all its copies fed `w` rows as one forward feeds
them (so the weights stream from memory as they do there), with torch's own kernel (F.linear: MKL's sgemm in fp32)
and with the weight packed once for oneDNN; milliseconds, medians of interleaved runs. Whole forward: the cost
curve (a cached forward of w new tokens after 128 of context) with plain and with packed layers, and with the
kernels prepare() chooses on this machine (runtime.linear), with what width invariance costs.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mars_core import load  # noqa: E402
from mars_core.machine import machine_info, machine_line  # noqa: E402
from mars_core.runtime import Runtime  # noqa: E402
from mars_core.runtime.cost import measure_cost  # noqa: E402
from mars_core.runtime.linear import BATCH_HINT, fewest_packed_rows, pack_linears  # noqa: E402
from mars_core.runtime.timing import median_seconds  # noqa: E402


def median_ms(fn, runs: int) -> float:
    """Milliseconds of one call of fn: the median of `runs` after a warm-up."""
    return median_seconds(fn, runs) * 1e3


@torch.inference_mode()
def by_shape(model: torch.nn.Module, widths: list[int], runs: int) -> None:
    """Per distinct (out, in) shape: ms for all its copies at each width, torch's kernel / packed oneDNN."""
    shapes = Counter(tuple(m.weight.shape) for m in model.modules() if isinstance(m, torch.nn.Linear))
    dtype = next(model.parameters()).dtype
    print("\n| layer (out × in) | copies | " + " | ".join(f"w={w}: torch / packed ms" for w in widths) + " |")
    print("|---|---|" + "---|" * len(widths))
    for (out, inp), copies in shapes.items():
        weights = [torch.randn(out, inp, dtype=dtype) * 0.02 for _ in range(copies)]
        packed = [torch.ops.mkldnn._reorder_linear_weight(w, BATCH_HINT) for w in weights]
        cells = []
        for w in widths:
            x = torch.randn(w, inp, dtype=dtype)
            plain = median_ms(lambda: [F.linear(x, weight) for weight in weights], runs)
            fast = median_ms(lambda: [torch.ops.mkldnn._linear_pointwise(x, p, None, "none", [], "") for p in packed],
                             runs)
            cells.append(f"{plain:.1f} / {fast:.1f}")
        print(f"| {out} × {inp} | {copies} | " + " | ".join(cells) + " |")


def whole_forward(model: torch.nn.Module, widths: list[int]) -> None:
    """The cost curve at batch 1 with torch's kernels, with packed layers, with the fastest kernel by rows (packed
    from fewest_packed_rows' count, torch's below: prepare(invariant=False)), and width-invariant (packed from one
    row, attention row by row: prepare()'s default): the fastest of 3 rounds each."""
    linears = pack_linears(model)
    fastest = fewest_packed_rows(linears)
    runtimes = {"torch": Runtime(), "packed": Runtime(linears=linears),
                f"fastest by rows (packed from {fastest})": Runtime(linears=linears, packed_from=fastest),
                "width-invariant (packed, attention by rows)": Runtime(linears=linears, rows=True)}
    rows = {}
    for name, runtime in runtimes.items():
        curve = measure_cost(model, runtime, batch_sizes=(1,), widths=tuple(widths))
        rows[name] = [s * 1e3 for s in curve.seconds[0]]
    print("\n| whole forward, batch 1 | " + " | ".join(f"w={w}" for w in widths) + " |")
    print("|---|" + "---|" * len(widths))
    for name, ms in rows.items():
        print(f"| {name} ms | " + " | ".join(f"{v:.1f}" for v in ms) + " |")
    for name, ms in rows.items():
        print(f"| {name}, × its one-token forward | " + " | ".join(f"{v / ms[0]:.2f}" for v in ms) + " |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None)
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--widths", default="1,2,3,4,8,16")
    p.add_argument("--runs", type=int, default=9)
    args = p.parse_args()
    widths = [int(w) for w in args.widths.split(",")]
    model, _ = load(args.model, dtype=args.dtype)
    print(f"machine: {machine_line(machine_info(model.device, model.dtype))}")
    by_shape(model, widths, args.runs)
    whole_forward(model, widths)


if __name__ == "__main__":
    main()
