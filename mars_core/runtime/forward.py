"""One cached forward under a runtime's kernels: the seam every decoder and every timing reads its forward through."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from transformers import DynamicCache

from ..attention import as_model_mask
from .engine import Engine

if TYPE_CHECKING:
    from .runtime import Runtime


def new_cache(model: torch.nn.Module | Engine) -> DynamicCache:
    """An empty cache for one decode (an Engine keeps its own)."""
    if isinstance(model, Engine):
        return model.new_cache()
    return DynamicCache(config=model.config)


def cache_mask(valid: torch.Tensor, width: int) -> torch.Tensor:
    """Boolean [b, W, T+W] mask for W new slots after T cached ones (cache order is time order).

    Query q (absolute slot T+q) sees slot k when k is valid and k <= T+q. It always sees itself,
    so padding and holes never get an empty row (an all-masked row gives NaN in SDPA).
    """
    total = valid.shape[1]
    q = torch.arange(total - width, total, device=valid.device)[:, None]
    k = torch.arange(total, device=valid.device)[None, :]
    return (valid[:, None, :] & (k <= q)) | (k == q)


def forward(model: torch.nn.Module, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
            cache: DynamicCache, keep: int, *, runtime: Runtime) -> torch.Tensor:
    """One cached forward; returns the logits of the last `keep` slots only (the lm_head is the costly part)."""
    if isinstance(model, Engine):
        return model.forward(ids, positions, mask, cache, keep)
    with runtime.active():
        out = model(input_ids=ids, position_ids=positions, attention_mask=as_model_mask(mask, model),
                    past_key_values=cache, use_cache=True, logits_to_keep=keep)
    return out.logits


def hidden_states(model: torch.nn.Module, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                  cache: DynamicCache, runtime: Runtime) -> torch.Tensor:
    """One cached forward through the decoder alone: the last hidden states [b, W, H] (logits are read later, only
    where needed, with head())."""
    if isinstance(model, Engine):
        return model.hidden_states(ids, positions, mask, cache)
    with runtime.active():
        return model.get_decoder()(input_ids=ids, position_ids=positions, past_key_values=cache,
                                   attention_mask=as_model_mask(mask, model), use_cache=True).last_hidden_state


def head(model: torch.nn.Module, hidden: torch.Tensor, runtime: Runtime) -> torch.Tensor:
    """Logits of hidden rows [..., H] through the model's output head, under the runtime's kernels."""
    if isinstance(model, Engine):
        return model.head(hidden)
    with runtime.active():
        return model.get_output_embeddings()(hidden)
