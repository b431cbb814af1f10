"""Boolean attention masks shaped as the model's attention expects them (decoding and training share this)."""

from __future__ import annotations

import torch


def as_model_mask(mask: torch.Tensor, model: torch.nn.Module) -> torch.Tensor:
    """Shape a boolean mask [q, kv] or [b, q, kv] as the 4D mask the model's attention takes.

    SDPA reads a boolean mask as True = attend. Eager attention *adds* the mask to the scores, so a
    boolean there would be silently wrong: it gets an additive float mask (0 or the dtype's minimum).
    """
    while mask.dim() < 4:
        mask = mask.unsqueeze(0 if mask.dim() < 3 else 1)
    impl = getattr(model.config, "_attn_implementation", None) or "sdpa"
    if impl == "eager":
        dtype = model.dtype
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)
    return mask
