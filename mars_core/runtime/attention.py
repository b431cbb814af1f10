"""Attention whose result for a row does not depend on how many rows share its forward (width invariance).

A forward of w new tokens after T cached ones normally computes attention as one kernel call over [w, T+w]; the
kernels block their work by the number of queries and keys, so a row's numbers change in the last bits with w
(and transformers packs a lone query's heads as rows). Row by row, row i attends over keys [0, T+i] only, with its
own mask row, as one SDPA call whose shapes are exactly those of a forward feeding that row alone: the same bits
by construction, in every dtype. It costs one small call per row and layer (docs/speed.md#width-invariance).

Models loaded by mars_core.load() use the attention registered here under ATTENTION ("mars"). It is transformers'
SDPA, except inside a runtime that asks for rows (rows_attention(True)): training and transformers' own generate
see plain SDPA.

A cache allocated once (decoding/static) holds T slots, the new rows among them and the rest masked: there every row
attends all T keys (full_keys()), so a row's call has the same shapes at every width and at every step.
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

ATTENTION = "mars"  # the attn_implementation name load() gives models
_ROWS: ContextVar[bool] = ContextVar("mars_rows_attention", default=False)
_FULL: ContextVar[bool] = ContextVar("mars_full_keys", default=False)


@contextmanager
def rows_attention(on: bool = True) -> Iterator[None]:
    """Inside, models with the "mars" attention compute it row by row (on) or as SDPA (off)."""
    token = _ROWS.set(on)
    try:
        yield
    finally:
        _ROWS.reset(token)


@contextmanager
def full_keys() -> Iterator[None]:
    """Inside, attention row by row reads every key slot of the cache (a static cache: the new rows are not its last
    ones; the mask says which slots a row sees)."""
    token = _FULL.set(True)
    try:
        yield
    finally:
        _FULL.reset(token)


def attention_by_rows(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                      scaling: float | None) -> torch.Tensor:
    """softmax(q k^T * scaling + mask) v for each of the w new rows alone: query [b, Hq, w, d], key and value
    [b, Hkv, T+w, d], mask bool [b, 1, w, T+w] (True = attend) or None (causal); returns [b, w, Hq, d]. Row i's
    Hq/Hkv query heads that share a key head are that call's rows, as transformers feeds a lone query. Inside
    full_keys() every row reads all T+w keys."""
    b, hq, w, d = query.shape
    hkv, total = key.shape[1], key.shape[2]
    cached, full = total - w, _FULL.get()
    out = query.new_empty(b, w, hq, d)
    for i in range(w):
        end = total if full else cached + i + 1  # row i sees nothing after itself
        q = query[:, :, i].reshape(b, hkv, hq // hkv, d)
        m = None if mask is None else mask[:, :, i : i + 1, :end]
        out[:, i] = F.scaled_dot_product_attention(q, key[:, :, :end], value[:, :, :end], attn_mask=m,
                                                   scale=scaling).reshape(b, hq, d)
    return out


def mars_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: torch.Tensor | None, *, dropout: float = 0.0, scaling: float | None = None,
                   is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention interface: rows (attention_by_rows) inside rows_attention(), SDPA elsewhere.
    transformers passes everything after attention_mask by keyword."""
    if not _ROWS.get() or (attention_mask is not None and attention_mask.dtype != torch.bool):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    return attention_by_rows(query, key, value, attention_mask, scaling), None


AttentionInterface.register(ATTENTION, mars_attention)
AttentionMaskInterface.register(ATTENTION, sdpa_mask)
