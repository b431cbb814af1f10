"""Attention whose result for a row does not depend on how many rows, or which samples, share its forward.

A kernel blocks its work by the numbers of queries and keys, so a row computed among w others, or beside another
sample, or with more masked keys after it, can come out with other last bits (in fp32 even trailing masked keys
change them: docs/speed.md#one-decoder). Here every row's attention is one unit of an SDPA call of fixed shape: its
query heads that share a key head as the unit's rows (as transformers feeds a lone query), the keys 0 .. E-1 of its
own sample, E a function of the row's slot alone (slots.KeyPlan). A unit is computed on its own, so the row gets the
same bits alone, at any width and in any batch. The rows of one sample that read the same keys share one call, the
keys given once (a stride-0 view over the rows); so do one-row forwards of samples that read the same keys.

On a CPU where the rows kernel serves (runtime/rows.py), a row's attention is instead computed by that kernel's
attention (kernels/rows.cpp): each row of each head on its own, its visible keys in slot order, in one call for the
whole forward, so it needs no grouping and no Python loop (docs/speed.md#the-rows-kernel).

Models loaded by mars_core.load() use the attention registered here under ATTENTION ("mars"). It is transformers'
SDPA, except inside keys_by_rows(plan) (a runtime that asks for rows, with the plan its cache made for the forward):
training and transformers' own generate see plain SDPA.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

from .rows import rows_kernel
from .slots import KeyPlan

ATTENTION = "mars"  # the attn_implementation name load() gives models
_PLAN: ContextVar[KeyPlan | None] = ContextVar("mars_key_plan", default=None)


@contextmanager
def keys_by_rows(plan: KeyPlan | None) -> Iterator[None]:
    """Inside, models with the "mars" attention compute it row by row as `plan` groups the rows (None: SDPA)."""
    token = _PLAN.set(plan)
    try:
        yield
    finally:
        _PLAN.reset(token)


def attention_by_rows(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
                      scaling: float | None, plan: KeyPlan) -> torch.Tensor:
    """softmax(q k^T * scaling + mask) v, each row as its own unit (module doc): query [b, Hq, w, d], key and value
    [b, Hkv, T, d] (the whole cache), mask bool [b, 1, w, T] (True = attend); returns [b, w, Hq, d]. The rows
    kernel's attention where it serves (kernel_attention), else SDPA unit by unit."""
    if kernel_attention(query):
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        return torch.ops.mars_rows.attention(query, key, value, mask, scale)
    b, hq, w, d = query.shape
    hkv = key.shape[1]
    heads = query.view(b, hkv, hq // hkv, w, d)  # query head h reads key head h // (hq / hkv), as repeat_kv does
    out = query.new_empty(b, w, hq, d)
    for group in plan:
        e, sel = group.keys, group.sel
        if group.sample is None:  # column `col` of the samples `sel`: each its own keys
            c = group.col
            q, k, v, m = heads[sel, :, :, c], key[sel, :, :e], value[sel, :, :e], mask[sel, :, c : c + 1, :e]
            out[sel, c] = F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=scaling).reshape(-1, hq, d)
            continue
        i = group.sample  # the columns `sel` of sample i: its keys given once, a stride-0 view over the rows
        q = heads[i][:, :, sel].permute(2, 0, 1, 3)  # [n, Hkv, g, d]: a unit per row
        n = q.shape[0]
        k, v = key[i : i + 1, :, :e].expand(n, -1, -1, -1), value[i : i + 1, :, :e].expand(n, -1, -1, -1)
        m = mask[i, 0, sel, :e][:, None, None, :]
        out[i, sel] = F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=scaling).reshape(n, hq, d)
    return out


def kernel_attention(query: torch.Tensor) -> bool:
    """Whether the rows kernel computes attention by rows for this query: on a CPU where it serves, bf16 or fp32, heads
    of a multiple of 16 values."""
    return (query.device.type == "cpu" and query.dtype in (torch.float32, torch.bfloat16)
            and query.shape[-1] % 16 == 0 and rows_kernel())


def attention_op(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor, scaling: float
                 ) -> torch.Tensor:
    """The attention of a compiled graph ([b, w, Hq, d]): by rows under the plan active when the graph runs, else
    SDPA over the forward; one op (mars::attention), so the compiler leaves its bits alone (runtime/compiled.py)."""
    plan = _PLAN.get()
    if plan is not None:
        return attention_by_rows(query, key, value, mask, scaling, plan)
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling)
    return out.transpose(1, 2).contiguous()


OPS = torch.library.Library("mars", "FRAGMENT")
OPS.define("attention(Tensor query, Tensor key, Tensor value, Tensor mask, float scaling) -> Tensor")
OPS.impl("attention", attention_op, "CompositeExplicitAutograd")
torch.library.register_fake("mars::attention", lambda query, key, value, mask, scaling: query.new_empty(
    query.shape[0], query.shape[2], query.shape[1], query.shape[3]))


def mars_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: torch.Tensor | None, *, dropout: float = 0.0, scaling: float | None = None,
                   is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention interface: rows (attention_by_rows) inside keys_by_rows(plan), SDPA elsewhere; traced by
    the compiler, the op that decides so when the graph runs. transformers passes everything after attention_mask by
    keyword. Asks dynamo's own flag, as linear.routed_linear does; a trace with grad on (a compiled training step)
    gets SDPA, which has gradients (dynamo guards on grad mode)."""
    if (torch.compiler.is_dynamo_compiling() and not torch.is_grad_enabled() and attention_mask is not None
            and attention_mask.dtype == torch.bool):
        return torch.ops.mars.attention(query, key, value, attention_mask, scaling or query.shape[-1] ** -0.5), None
    plan = _PLAN.get()
    if plan is None or attention_mask is None or attention_mask.dtype != torch.bool:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    return attention_by_rows(query, key, value, attention_mask, scaling, plan), None


AttentionInterface.register(ATTENTION, mars_attention)
AttentionMaskInterface.register(ATTENTION, sdpa_mask)
