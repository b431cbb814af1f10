"""One cached forward under a runtime's kernels: the seam every decoder and every timing reads its forward through."""

from __future__ import annotations

import inspect
from functools import cache as once
from typing import TYPE_CHECKING, Any

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


@once
def _cache_keyword(cls: type) -> str:
    """The KV cache's keyword in cls.forward: `cache` in newer transformers (`past_key_values` warns there and is
    removed in 5.40), `past_key_values` before."""
    return "cache" if "cache" in inspect.signature(cls.forward).parameters else "past_key_values"


def with_cache(model: torch.nn.Module, cache: DynamicCache) -> dict[str, Any]:
    """The keyword arguments that pass `cache` to model's forward and keep it growing, whatever its version."""
    return {_cache_keyword(type(model)): cache, "use_cache": True}


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
                    logits_to_keep=keep, **with_cache(model, cache))
    return out.logits


def hidden_states(model: torch.nn.Module, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                  cache: DynamicCache, runtime: Runtime) -> torch.Tensor:
    """One cached forward through the decoder alone: the last hidden states [b, W, H] (logits are read later, only
    where needed, with head())."""
    if isinstance(model, Engine):
        return model.hidden_states(ids, positions, mask, cache)
    with runtime.active():
        decoder = model.get_decoder()
        return decoder(input_ids=ids, position_ids=positions, attention_mask=as_model_mask(mask, model),
                       **with_cache(decoder, cache)).last_hidden_state


def head(model: torch.nn.Module, hidden: torch.Tensor, runtime: Runtime) -> torch.Tensor:
    """Logits of hidden rows [..., H] through the model's output head, under the runtime's kernels."""
    if isinstance(model, Engine):
        return model.head(hidden)
    with runtime.active():
        return model.get_output_embeddings()(hidden)
