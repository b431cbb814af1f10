"""The batch side of the KV cache: prompts left-padded, with the mask of which slots are real."""

from __future__ import annotations

import torch


def left_pad(prompts: list[list[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts as a right-aligned [b, n] id tensor and its validity mask (padding on the left)."""
    n = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), n), pad_id, dtype=torch.long)
    valid = torch.zeros((len(prompts), n), dtype=torch.bool)
    for i, p in enumerate(prompts):
        ids[i, n - len(p) :] = torch.tensor(p, dtype=torch.long)
        valid[i, n - len(p) :] = True
    return ids.to(device), valid.to(device)
