"""The MARS training attention mask over [noisy | clean], as a boolean tensor and as a flex-attention BlockMask."""

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
