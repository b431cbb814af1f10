"""Prompt lookup, verified decoding's second draft source: the text that followed the last n-gram's earlier use.

A lookup token has no confidence of its own. Beside the mask slots' drafts c_1..c_k it is read as
    max(c_i, odds)        where both propose the same token (at least as likely as the mask draft)
    min(odds, 1 - c_i)    where they differ (at most what the mask draft leaves)
    odds                  past the mask drafts (c_i = 0 there)
so the two chains can be compared by their expected run of matches, sum_i c_1 ... c_i.
"""

from __future__ import annotations

import torch


def lookup_drafts(seq: torch.Tensor, start: torch.Tensor, end: torch.Tensor, ngrams: tuple[int, ...],
                  width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompt lookup per row of seq [b, S] (text in start..end-1): the `width` tokens that followed the latest
    earlier occurrence of the row's last n tokens, for the longest n in ngrams that occurs. (drafts, count)."""
    b, size = seq.shape
    after = torch.full((b,), -1, dtype=torch.long, device=seq.device)  # where the continuation starts
    for n in sorted(ngrams):  # a longer match overrides a shorter one
        if size <= n:
            continue
        last = seq.gather(1, (end[:, None] - n + torch.arange(n, device=seq.device)).clamp(0, size - 1))
        at = torch.arange(size - n + 1, device=seq.device)
        hit = (seq.unfold(1, n, 1) == last[:, None, :]).all(-1) & (at >= start[:, None]) & (at + n < end[:, None])
        pos = torch.where(hit & (end - start > n)[:, None], at, -1).max(-1).values
        after = torch.where(pos >= 0, pos + n, after)
    count = torch.where(after >= 0, (end - after).clamp(0, width), 0)
    idx = (after.clamp_min(0)[:, None] + torch.arange(width, device=seq.device)).clamp_max(size - 1)
    return seq.gather(1, idx), count


def lookup_confidence(found: torch.Tensor, drafts: torch.Tensor, conf: torch.Tensor, odds: float | torch.Tensor
                      ) -> torch.Tensor:
    """Confidence of each lookup token [b, D] against the mask drafts [b, D] and their confidences (module doc);
    odds: one number, or [b, 1] per sample."""
    odds_ = torch.as_tensor(odds, dtype=conf.dtype, device=conf.device).expand_as(conf)
    return torch.where(found == drafts, torch.maximum(conf, odds_), torch.minimum(odds_, 1 - conf))


def expected_run(conf: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Expected number of leading matches, sum_i c_1 ... c_i over the first count[i] drafts."""
    c = torch.where(torch.arange(conf.shape[1], device=conf.device) < count[:, None], conf, 0.0)
    return c.cumprod(-1).sum(-1)
