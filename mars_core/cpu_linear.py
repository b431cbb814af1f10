"""Linear layers on an x86 CPU through oneDNN with weights packed once, for inference.

torch sends an fp32 `F.linear` to MKL's sgemm, which is slow for the few rows a decoding forward feeds: on a 2-core
AMD EPYC without AMX, a cached forward of the 135M model costs 57-61 ms for one new token and 82-135 ms for 2 to 16
(2 and 3 rows are the slowest). oneDNN with each weight reordered once for it (as inductor's freezing pass does
for bf16; its fp32 path packs for MKL instead, measured no faster than sgemm here) costs 41-45 ms for one token
and 43-47 ms for 2 to 6: faster at every width, and width nearly free, which is what verified decoding's trees
need. bf16 runs oneDNN already but reorders the weight on every call: 36-40 -> 29-31 ms. On an Intel Xeon in fp32
MKL's one- and two-row kernels beat the packed weight (34 against 43 ms for one token), so inputs of fewer rows
than the measured crossover keep torch's kernel (narrow_rows; load() times it once per machine).
(`python benchmarks/linear_kernels.py` prints both by layer shape and width.)

    pack_linears(model)    # every nn.Linear on the CPU answers from its packed weight under no_grad
    unpack_linears(model)  # back to F.linear (before changing weights in place, e.g. merging an adapter)

With grad enabled (training), on another device or dtype, or once the weight was updated in place (its version
counter moved, as an optimizer step does), a packed layer computes F.linear as before, so it is never stale.
"""

from __future__ import annotations

import platform
import time
import types

import torch
import torch.nn.functional as F
from torch import nn

BATCH_HINT = 16  # rows oneDNN packs the weight for; measured as good as 1 or 4 at 1-4 rows, better from 8 rows on
DTYPES = (torch.float32, torch.bfloat16)  # bf16 F.linear runs oneDNN already, but reorders W each call: 36 -> 30 ms


def packed_dtypes() -> tuple[torch.dtype, ...]:
    """The dtypes oneDNN packs on this CPU: fp32 on any x86 CPU, bf16 only with its bf16 kernels (AVX-512 or
    AVX-NE-CONVERT; on an AVX2-only CPU oneDNN refuses to reorder a bf16 weight)."""
    bf16 = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return tuple(d for d in DTYPES if d is not torch.bfloat16 or (bf16 is not None and bf16()))


def packing_pays(model: nn.Module) -> bool:
    """Whether pack_linears has work: an x86 CPU with oneDNN, a model on the CPU in a dtype it packs there."""
    x86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")
    param = next(model.parameters(), None)
    return (x86 and torch.backends.mkldnn.is_available() and param is not None and param.device.type == "cpu"
            and param.dtype in packed_dtypes())


def _packed_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """y = x W^T + b from the packed W, unless training, elsewhere, W changed since packing, or fewer rows than
    packed_from (where torch's own kernel measured faster on this machine: narrow_rows)."""
    if (torch.is_grad_enabled() or x.device.type != "cpu" or x.dtype != self.packed_dtype
            or self.weight._version != self.packed_version or x.numel() < self.packed_from * x.shape[-1]):
        return F.linear(x, self.weight, self.bias)
    return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none", [], "")


def pack_linears(model: nn.Module) -> int:
    """Pack every CPU nn.Linear of a packed dtype (tied lm_head included: its copy is packed, the embedding keeps
    the dense one). Returns how many; 0 where packing does not apply (packing_pays)."""
    if not packing_pays(model):
        return 0
    count, dtypes = 0, packed_dtypes()
    with torch.no_grad():
        for module in model.modules():
            if type(module) is not nn.Linear or module.weight.device.type != "cpu" or module.weight.dtype not in dtypes:
                continue
            try:
                module.packed_weight = torch.ops.mkldnn._reorder_linear_weight(module.weight.detach(), BATCH_HINT)
            except (AttributeError, RuntimeError):  # a torch build without these oneDNN ops: stay as it was
                unpack_linears(model)
                return 0
            module.packed_dtype, module.packed_version = module.weight.dtype, module.weight._version
            module.packed_from = 1
            module.forward = types.MethodType(_packed_forward, module)
            count += 1
    return count


def unpack_linears(model: nn.Module) -> int:
    """Undo pack_linears (dropping the packed copies). Returns how many layers were packed."""
    count = 0
    for module in model.modules():
        if "packed_weight" in module.__dict__:
            for name in ("packed_weight", "packed_dtype", "packed_version", "packed_from", "forward"):
                module.__dict__.pop(name, None)
            count += 1
    return count


def is_packed(model: nn.Module) -> bool:
    return bool(_linears(model))


def packed_from(model: nn.Module) -> int:
    """The fewest rows a packed layer answers from its packed weight (fewer go to F.linear); 0: nothing packed."""
    return next((m.packed_from for m in _linears(model)), 0)


def set_packed_from(model: nn.Module, rows: int) -> None:
    """Every packed layer answers inputs of at least `rows` rows from its packed weight, fewer with F.linear."""
    for m in _linears(model):
        m.packed_from = rows


ROWS = (1, 2, 3, 4, 6, 8)  # row counts narrow_rows times both kernels at
ROUNDS = 5  # interleaved timing rounds; the fastest is kept (other work only ever adds time)


def _linears(model: nn.Module) -> list[nn.Linear]:
    return [m for m in model.modules() if "packed_weight" in m.__dict__]


@torch.inference_mode()
def kernel_seconds(model: nn.Module, rows: tuple[int, ...] = ROWS, rounds: int = ROUNDS) -> dict[str, list[float]]:
    """Seconds of one pass over every packed layer, each fed r rows as a forward feeds them (so the weights stream
    from memory as they do there), with torch's F.linear and with the packed weight, by r in rows."""
    layers = _linears(model)
    gen = torch.Generator().manual_seed(0)
    inputs = {r: [torch.randn(r, m.in_features, generator=gen).to(m.packed_dtype) for m in layers] for r in rows}
    kernels = {"torch": lambda m, x: F.linear(x, m.weight, m.bias),
               "packed": lambda m, x: torch.ops.mkldnn._linear_pointwise(x, m.packed_weight, m.bias, "none", [], "")}
    times = {name: {r: [] for r in rows} for name in kernels}
    for _ in range(rounds + 1):  # the first round warms up
        for r in rows:
            for name, run in kernels.items():
                t0 = time.perf_counter()
                for m, x in zip(layers, inputs[r]):
                    run(m, x)
                times[name][r].append(time.perf_counter() - t0)
    return {name: [min(t[r][1:]) for r in rows] for name, t in times.items()}


def narrow_rows(model: nn.Module, rows: tuple[int, ...] = ROWS, rounds: int = ROUNDS) -> int:
    """Time both kernels (kernel_seconds) and send inputs of fewer rows than R to F.linear, with R the fewest rows
    from which the packed kernel is at least as fast at every count timed. On a 2-core AMD EPYC (fp32, MKL's sgemm
    slow for few rows) and an AMX Xeon in bf16 packing wins from one row, R = 1; an AMX Xeon in fp32, where MKL's
    one- and two-row kernels are fast, measured 34 against 43 ms for a one-token forward, R = 4. Returns R."""
    layers = _linears(model)
    if not layers:
        return 1
    seconds = kernel_seconds(model, rows, rounds)
    wins = [p <= t for p, t in zip(seconds["packed"], seconds["torch"])]
    first = next((i for i in range(len(rows)) if all(wins[i:])), len(rows))
    fewest = rows[first] if first < len(rows) else rows[-1] + 1
    set_packed_from(model, fewest)
    return fewest
