"""8-bit weights: a bf16 model's linear weights rounded onto the int8 grid in place, once, and multiplied 8 bits by 8.

The grid (kernels/rows.cpp grid()): for each block of 32 inputs of an output column, a power-of-two scale s and
integers q up to 127, the weight q s (a bf16 exactly, so the rounded model is still an ordinary bf16 model). Every build
of the rows kernel packs such a weight as int8 without loss (pack()) and multiplies it by each row of x
quantized to int8 on its own, per block of 32 inputs (integer dot products: the 8-bit arithmetic llama.cpp's Q8_0
runs; the same bits in every build). The model served is then the grid's weights times 8-bit rows in every packed
linear layer: every decoder that runs under the runtime (one-token, verified, transformers' generate) reads it, and a
row's bits stay its own. Where a weight is off the grid (trained since, or never rounded) its bf16 copy serves
(docs/speed.md#8-bit-weights).
"""

from __future__ import annotations

import torch
from torch import nn

from .linear import linear_groups
from .rows import flavor, rows_kernel

WEIGHTS = ("auto", "bf16", "int8")  # load(weights=): auto is int8 where the int8 path serves a bf16 model, else bf16


def int8_serves() -> str | None:
    """Why the int8 path does not serve on this machine, or None where it does: the rows kernel's build says whether
    it has one (rows.cpp MARS_INT8: every build, AVX2 with FMA)."""
    if not rows_kernel():
        return "no rows kernel here"
    if not torch.ops.mars_rows.int8_path():
        return f"the {flavor()} rows kernel has no int8 path"
    return None


def resolve_weights(weights: str | None, dtype: torch.dtype) -> str:
    """"bf16" or "int8" for load(weights=...): auto/None is int8 for a bf16 model where the int8 path serves, else
    bf16; int8 asked for where it cannot serve is refused with the reason."""
    key = (weights or "auto").lower()
    if key not in WEIGHTS:
        raise ValueError(f"Unknown weights {weights!r}: use {', '.join(WEIGHTS)}.")
    if key == "bf16":
        return key
    why = "the model is not bf16" if dtype != torch.bfloat16 else int8_serves()
    if key == "int8" and why is not None:
        raise ValueError(f"weights='int8' cannot serve here: {why}.")
    return "int8" if why is None else "bf16"


@torch.no_grad()
def round_to_grid(model: nn.Module) -> int:
    """Every CPU bf16 linear weight the runtime packs (a tied lm_head, and so the embeddings, included) rounded onto
    the int8 grid in place; the number of weights rounded."""
    weights = {id(lin.weight): lin.weight for group in linear_groups(model) for lin in group
               if lin.weight.dtype == torch.bfloat16 and lin.weight.device.type == "cpu"}
    for w in weights.values():
        w.copy_(torch.ops.mars_rows.grid(w))
    return len(weights)


def on_grid(w: torch.Tensor) -> bool:
    """Whether a bf16 weight lies on the int8 grid (an int8 copy of it is lossless)."""
    return torch.equal(torch.ops.mars_rows.grid(w.detach()), w.detach())
