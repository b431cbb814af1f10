"""What every decoder is asked (DecodeSpec) and what each forward reports (Step); a decoder's own settings live
beside it (verified: verified/config.py), the live ones in control.py."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..runtime.runtime import Runtime


@dataclass
class DecodeSpec:
    """What every decoder is asked: the limits of one decode and how its forwards run (generate() builds it)."""

    block_size: int  # B: the most tokens one forward may commit (1 = plain AR)
    max_new_tokens: int  # per sample
    stop_ids: torch.Tensor  # token ids that end a sample (EOS, chat end), committed then cut after
    pad_id: int  # fills left padding and slots that mean nothing
    mask_id: int | None  # the mask token (needed when block_size > 1)
    generator: torch.Generator | None = None  # seeds sampling
    runtime: Runtime = field(default_factory=Runtime)  # how forwards run: kernels, width invariance, cost curve


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
    # verified decoding only: the drafts this forward checked, how many were real per sample, how many it committed
    drafts: torch.Tensor | None = None  # [b, K]
    drafted: torch.Tensor | None = None  # [b]
    matched: torch.Tensor | None = None  # [b] accepted drafts among the committed tokens (the rest is the bonus)
    looked_up: torch.Tensor | None = None  # [b] the drafts came from prompt lookup (else from the mask slots)
