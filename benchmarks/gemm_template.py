"""inductor's CPU GEMM template against the runtime's packed oneDNN kernel, on the served model's weights: the time of
one pass over every matrix a forward reads at a few row counts, and whether a row's bits depend on how many rows
share the call (the identity verified decoding needs).

    python benchmarks/gemm_template.py [--rows 1,4,8,16] [--json assets/bench_compiled/gemm_template_amx_bf16.json]

The template (torch.compile with frozen weights, max-autotune with the C++ GEMM backend, the row count symbolic:
one graph for every count) is the lever docs/speed.md names for a forward nearer the weight stream; the packed
kernel is what prepare() serves (runtime/linear.py: the model's q/k/v and gate/up as one matrix each, as there).
Milliseconds are medians of interleaved rounds; the read is the time to sum as many bytes once.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch._inductor.config as inductor_config
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mars_core import load, prepare  # noqa: E402
from mars_core.machine import machine_info, machine_line  # noqa: E402
from mars_core.runtime.linear import pointwise  # noqa: E402
from mars_core.runtime.timing import median_seconds, write_json  # noqa: E402

INVARIANCE_ROWS = (1, 2, 8, 16, 32, 33, 48, 64)  # rows per call a row's bits are compared at (192 rows in all)


class Matrices(torch.nn.Module):
    """The matrices a forward reads, as frozen parameters: forward(xs) = [x_i W_i^T]."""

    def __init__(self, weights: list[torch.Tensor]) -> None:
        super().__init__()
        self.weights = torch.nn.ParameterList([torch.nn.Parameter(w, requires_grad=False) for w in weights])

    def forward(self, xs: list[torch.Tensor]) -> list[torch.Tensor]:
        return [torch.nn.functional.linear(x, w) for x, w in zip(xs, self.weights)]


def served_matrices(model: torch.nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(weight, oneDNN-packed copy) of each matrix a one-token forward reads, in the forward's order (siblings fused
    as the runtime packs them, the head last)."""
    runtime = prepare(model, check=False, measure_cost=False)
    out, seen = [], set()
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            entry = runtime.linears[id(module.weight)]
            packed = entry.fused.packed if entry.fused is not None else entry.packed
            if id(packed) in seen:
                continue
            seen.add(id(packed))
            siblings = [e.weight for e in runtime.linears.values() if e.fused is not None and e.fused is entry.fused]
            out.append((torch.cat(siblings) if siblings else module.weight.detach(), packed))
    return out


def unbacked(xs: list[torch.Tensor]) -> list[torch.Tensor]:
    """The inputs with their row count marked symbolic (never specialised, 1 included)."""
    for x in xs:
        torch._dynamo.decorators.mark_unbacked(x, 0)
    return xs


@torch.inference_mode()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="1,4,8,16", help="row counts timed")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (each a median of 9 passes)")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    model, _ = load(dtype=args.dtype)
    pairs = served_matrices(model)
    weights, packed = [w for w, _ in pairs], [p for _, p in pairs]
    size = sum(w.numel() * w.element_size() for w in weights)
    inductor_config.freezing, inductor_config.max_autotune = True, True
    inductor_config.max_autotune_gemm_backends = "CPP,ATEN"
    compiled = torch.compile(Matrices(weights).eval(), dynamic=True)
    began = time.perf_counter()
    rows = [int(r) for r in args.rows.split(",")]
    gen = torch.Generator().manual_seed(0)
    inputs = {r: [torch.randn(r, w.shape[1], generator=gen).to(w.dtype) for w in weights] for r in rows}
    compiled(unbacked([x.clone() for x in inputs[rows[0]]]))
    compile_seconds = time.perf_counter() - began
    buffer = torch.ones(size // 4)
    times: dict[str, dict[int, list[float]]] = {"template": {r: [] for r in rows}, "onednn": {r: [] for r in rows}}
    read = []
    for _ in tqdm(range(args.rounds), desc="rounds"):
        read.append(median_seconds(lambda: buffer.sum(), 9) * 1e3)
        for r in rows:
            xs = unbacked([x.clone() for x in inputs[r]])
            times["template"][r].append(median_seconds(lambda: compiled(xs), 9) * 1e3)
            times["onednn"][r].append(median_seconds(lambda: [pointwise(x, p) for x, p in zip(inputs[r], packed)],
                                                     9) * 1e3)
    everything = [torch.randn(192, w.shape[1], generator=gen).to(w.dtype) for w in weights]
    whole = compiled(unbacked([x.clone() for x in everything]))
    same = {}
    for k in INVARIANCE_ROWS:
        parts = [compiled(unbacked([x[i : i + k].clone() for x in everything])) for i in range(0, 192, k)]
        same[k] = sum(torch.equal(torch.cat([p[j] for p in parts]), whole[j]) for j in range(len(weights)))
    record = {
        "command": "python benchmarks/gemm_template.py " + " ".join(sys.argv[1:]),
        "machine": machine_info(model.device, model.dtype), "date": time.strftime("%F"),
        "matrices": len(weights), "weight_bytes": size, "read_ms": round(statistics.median(read), 2),
        "compile_seconds": round(compile_seconds, 1),
        "pass_ms": {kind: {r: round(statistics.median(v), 2) for r, v in by.items()} for kind, by in times.items()},
        "rows_like_192_at_once": {k: f"{n} of {len(weights)} matrices" for k, n in same.items()},
    }
    print(machine_line(record["machine"]))
    print(f"{len(weights)} matrices, {size / 1e6:.0f} MB, read {record['read_ms']} ms, compiled in "
          f"{compile_seconds:.0f} s")
    for r in rows:
        t, o = record["pass_ms"]["template"][r], record["pass_ms"]["onednn"][r]
        print(f"{r:>3} rows: template {t:7.2f} ms, oneDNN packed {o:7.2f} ms ({o / t:.2f}x)")
    for k, said in record["rows_like_192_at_once"].items():
        print(f"{k:>3} rows a call: bits as 192 at once in {said}")
    if args.json:
        write_json(args.json, record, indent=1)


if __name__ == "__main__":
    main()
