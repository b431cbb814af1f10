"""The KV-cache side of a forward: left padding, the cache's validity mask, one cached forward."""

from __future__ import annotations

import torch
from transformers import DynamicCache

from ..attention import as_model_mask


def left_pad(prompts: list[list[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts as a right-aligned [b, n] id tensor and its validity mask (padding on the left)."""
    n = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), n), pad_id, dtype=torch.long)
    valid = torch.zeros((len(prompts), n), dtype=torch.bool)
    for i, p in enumerate(prompts):
        ids[i, n - len(p) :] = torch.tensor(p, dtype=torch.long)
        valid[i, n - len(p) :] = True
    return ids.to(device), valid.to(device)


def new_cache(model: torch.nn.Module) -> DynamicCache:
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


def forward(
    model: torch.nn.Module,
    ids: torch.Tensor,
    positions: torch.Tensor,
    mask: torch.Tensor,
    cache: DynamicCache,
    keep: int,
) -> torch.Tensor:
    """One cached forward; returns the logits of the last `keep` slots only (the lm_head is the costly part)."""
    out = model(
        input_ids=ids,
        position_ids=positions,
        attention_mask=as_model_mask(mask, model),
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=keep,
    )
    return out.logits
