"""The batch side of the KV cache: prompts left-padded, with the mask of which slots are real (the dynamic decoders),
or left-aligned with their lengths (the static ones: a token's slot is its position)."""

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


def right_pad(prompts: list[list[int]], pad_id: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompts left-aligned in [b, S] (a row's tokens take slots 0..len-1, as one-by-one) and their lengths."""
    S = max(len(p) for p in prompts)
    ids = torch.tensor([p + [pad_id] * (S - len(p)) for p in prompts], dtype=torch.long)
    return ids.to(dev), torch.tensor([len(p) for p in prompts], device=dev)
