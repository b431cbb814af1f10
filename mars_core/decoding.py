"""Pieces every decoder shares: the per-forward record, the KV-cache mask, one model forward."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from .masks import as_model_mask


@dataclass
class DecodeSpec:
    block_size: int  # B: the most tokens one forward may commit (1 = plain AR)
    max_new_tokens: int  # per sample
    stop_ids: torch.Tensor  # token ids that end a sample (EOS, chat end), committed then cut after
    pad_id: int  # fills left padding and slots that mean nothing
    mask_id: int | None  # the mask token (needed when block_size > 1)
    generator: torch.Generator | None = None  # seeds sampling


@dataclass
class Step:
    """What one forward committed, per sample: tokens[i, start[i]:end[i]] (tensors stay on the device)."""

    tokens: torch.Tensor  # [b, k] the token chosen for each slot
    confidence: torch.Tensor  # [b, k] its confidence
    start: torch.Tensor  # [b] first committed slot
    end: torch.Tensor  # [b] one past the last committed slot
    done: list[bool]  # sample finished (stop token, max_new_tokens or stop request)
    threshold: float  # the threshold this forward used
    out: torch.Tensor  # [b, max_new_tokens + k] all tokens committed so far (row i valid up to lengths[i])
    lengths: torch.Tensor  # [b] tokens committed so far


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


def write_out(out: torch.Tensor, lengths: torch.Tensor, tokens: torch.Tensor, start: torch.Tensor, end: torch.Tensor):
    """Append tokens[i, start:end] to row i of out at lengths[i], with one scatter (no loop over samples).

    Slots outside the run go to scratch columns past max_new_tokens, one per slot, so nothing collides.
    """
    k = tokens.shape[1]
    slots = torch.arange(k, device=tokens.device)
    in_run = (slots >= start[:, None]) & (slots < end[:, None])
    scratch = out.shape[1] - k + slots
    dest = torch.where(in_run, (lengths[:, None] + slots - start[:, None]).clamp_max(out.shape[1] - k - 1), scratch)
    out.scatter_(1, dest, tokens)
    lengths += end - start
