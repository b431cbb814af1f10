"""From logits to committed tokens: choose a token per slot, score its confidence, accept a prefix."""

from __future__ import annotations

import math

import torch

from .control import DecodeControl


def top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches top_p, renormalised."""
    if top_p >= 1.0:
        return probs
    sorted_p, order = probs.sort(dim=-1, descending=True)
    drop = sorted_p.cumsum(-1) - sorted_p > top_p  # mass before this token already reaches top_p
    sorted_p = sorted_p.masked_fill(drop, 0.0)
    kept = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
    return kept / kept.sum(-1, keepdim=True)


def confidence_of(probs: torch.Tensor, tokens: torch.Tensor, kind: str) -> torch.Tensor:
    """Confidence in [0, 1] per slot: p(token), 1 - H(p)/log V, or the top-1 minus top-2 margin."""
    if kind == "prob":
        return probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    if kind == "entropy":
        entropy = -(probs * probs.clamp_min(1e-30).log()).sum(-1)
        return (1.0 - entropy / math.log(probs.shape[-1])).clamp(0.0, 1.0)
    top2 = probs.topk(2, dim=-1).values
    return top2[..., 0] - top2[..., 1]


def first_argmax(x: torch.Tensor) -> torch.Tensor:
    """Index of the first of equal maxima along the last dim, as torch.argmax and so transformers' greedy search break
    ties. On the CPU in float32 numpy's argmax does it: 10x faster than torch's max(-1) on a 2-core AVX2 machine,
    0.04 against 0.42 ms for 7 rows of a 49152-token vocabulary (docs/speed.md#where-a-forwards-time-goes)."""
    if x.device.type == "cpu" and x.dtype == torch.float32 and x.shape[-1] > 0:
        return torch.from_numpy(x.detach().numpy().argmax(-1))
    return x.max(-1).indices


def greedy(logits: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Argmax tokens [..., k] (the first of equal maxima: first_argmax) and their confidences for logits [..., k, V]."""
    logits = logits.float()
    tokens = first_argmax(logits)
    return tokens, confidence_of(logits.softmax(-1), tokens, kind)


def distribution(logits: torch.Tensor, ctl: DecodeControl) -> torch.Tensor:
    """The distribution tokens are drawn from: softmax(logits / temperature), top-p filtered (greedy: softmax)."""
    logits = logits.float()
    if ctl.temperature == 0:
        return logits.softmax(-1)
    return top_p_filter((logits / ctl.temperature).softmax(-1), ctl.top_p)


def draw(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of probs [..., V] (multinomial)."""
    flat = probs.reshape(-1, probs.shape[-1])
    return torch.multinomial(flat, 1, generator=generator).view(probs.shape[:-1])


def select(
    logits: torch.Tensor, ctl: DecodeControl, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens [..., k] and their confidences for logits [..., k, V]: argmax when greedy, else sampled."""
    if ctl.temperature == 0:
        return greedy(logits, ctl.confidence)
    probs = distribution(logits, ctl)
    tokens = draw(probs, generator)
    return tokens, confidence_of(probs, tokens, ctl.confidence)


def accept_prefix(confidence: torch.Tensor, first: torch.Tensor, threshold: float | torch.Tensor) -> torch.Tensor:
    """End (exclusive) of the accepted run per row of confidence [b, k].

    Slot first[i] is always accepted (its prediction is the exact AR one); slots after it are accepted
    left to right while confidence >= threshold (a float, or one per row [b]). threshold >= 1 accepts exactly one
    slot, even where a softmax rounds to 1.0.
    """
    slots = torch.arange(confidence.shape[1], device=confidence.device)
    each = isinstance(threshold, torch.Tensor)
    if not each and threshold >= 1.0:
        return first + 1
    ok = (slots <= first[:, None]) | (confidence >= (threshold[:, None] if each else threshold))  # earlier slots
    run = ok.long().cumprod(-1).sum(-1).clamp_min(first + 1)  # count as already filled
    return torch.where(threshold >= 1.0, first + 1, run) if each else run


def cap_at_stop(tokens: torch.Tensor, start: torch.Tensor, end: torch.Tensor, stop_ids: torch.Tensor) -> tuple[
    torch.Tensor, torch.Tensor
]:
    """Cut each accepted run [start, end) just after its first stop token; also say which rows hit one."""
    slots = torch.arange(tokens.shape[1], device=tokens.device)
    in_run = (slots >= start[:, None]) & (slots < end[:, None])
    is_stop = torch.isin(tokens, stop_ids) & in_run
    hit = is_stop.any(-1)
    first_stop = torch.where(is_stop, slots, tokens.shape[1]).min(-1).values
    return torch.where(hit, first_stop + 1, end), hit
