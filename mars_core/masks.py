"""Attention masks: the MARS training mask and the conversion to what a model's attention expects."""

from __future__ import annotations

import torch


def training_attention_mask(n: int, block_size: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Boolean [2n, 2n] mask over the sequence [noisy x~ | clean x] (True = may attend).

    With p = position within a stream and blk(p) = p // B:
      clean -> clean: p_k <= p_q                           (ordinary causal)
      noisy -> noisy: p_k <= p_q and blk(p_k) == blk(p_q)   (causal inside the block)
      noisy -> clean: blk(p_k) <  blk(p_q)                  (only strictly earlier blocks)
      clean -> noisy: never
    """
    if n < 1 or block_size < 1:
        raise ValueError(f"need n >= 1 and block_size >= 1, got n={n}, block_size={block_size}")
    p = torch.arange(n, device=device)
    blk = p // block_size
    causal = p[None, :] <= p[:, None]
    same_block = blk[None, :] == blk[:, None]
    earlier_block = blk[None, :] < blk[:, None]
    top = torch.cat([causal & same_block, earlier_block], dim=1)  # noisy queries
    bottom = torch.cat([torch.zeros_like(causal), causal], dim=1)  # clean queries
    return torch.cat([top, bottom], dim=0)


def training_block_mask(n: int, block_size: int, device: str = "cpu"):
    """The same rules as a flex_attention BlockMask (for models run with attn_implementation="flex_attention")."""
    from torch.nn.attention.flex_attention import create_block_mask

    def mask_mod(b, h, q, k):
        q_noisy, k_noisy = q < n, k < n
        pq, pk = torch.where(q_noisy, q, q - n), torch.where(k_noisy, k, k - n)
        bq, bk = pq // block_size, pk // block_size
        noisy_noisy = q_noisy & k_noisy & (pk <= pq) & (bk == bq)
        noisy_clean = q_noisy & ~k_noisy & (bk < bq)
        clean_clean = ~q_noisy & ~k_noisy & (pk <= pq)
        return noisy_noisy | noisy_clean | clean_clean

    return create_block_mask(mask_mod, B=None, H=None, Q_LEN=2 * n, KV_LEN=2 * n, device=device)


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
