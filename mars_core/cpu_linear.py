"""Linear layers on an x86 CPU through oneDNN with weights packed once, for inference.

torch sends an fp32 `F.linear` to MKL's sgemm, which is slow for the few rows a decoding forward feeds: on a 2-core
AMD EPYC without AMX, a cached forward of the 135M model costs 57-61 ms for one new token and 82-135 ms for 2 to 16
(2 and 3 rows are the slowest). oneDNN with each weight reordered once for it (as inductor's freezing pass does
for bf16; its fp32 path packs for MKL instead, measured no faster than sgemm here) costs 41-45 ms for one token
and 43-47 ms for 2 to 6: faster at every width, and width nearly free, which is what verified decoding's trees
need. bf16 runs oneDNN already but reorders the weight on every call: 36-40 -> 29-31 ms.
(`python benchmarks/linear_kernels.py` prints both by layer shape and width.)

    pack_linears(model)    # every nn.Linear on the CPU answers from its packed weight under no_grad
    unpack_linears(model)  # back to F.linear (before changing weights in place, e.g. merging an adapter)

With grad enabled (training), on another device or dtype, or once the weight was updated in place (its version
counter moved, as an optimizer step does), a packed layer computes F.linear as before, so it is never stale.
"""

from __future__ import annotations

import platform
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
    """y = x W^T + b from the packed W, unless training, elsewhere, or W changed since packing."""
    if (torch.is_grad_enabled() or x.device.type != "cpu" or x.dtype != self.packed_dtype
            or self.weight._version != self.packed_version):
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
            module.forward = types.MethodType(_packed_forward, module)
            count += 1
    return count


def unpack_linears(model: nn.Module) -> int:
    """Undo pack_linears (dropping the packed copies). Returns how many layers were packed."""
    count = 0
    for module in model.modules():
        if "packed_weight" in module.__dict__:
            for name in ("packed_weight", "packed_dtype", "packed_version", "forward"):
                module.__dict__.pop(name, None)
            count += 1
    return count


def is_packed(model: nn.Module) -> bool:
    return any("packed_weight" in m.__dict__ for m in model.modules())
