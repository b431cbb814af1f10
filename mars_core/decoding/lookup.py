"""Prompt lookup, verified decoding's second draft source: the text that followed the last n-gram's earlier use.

A lookup token has no confidence of its own. Beside the mask slots' drafts c_1..c_k it is read as
    max(c_i, odds)        where both propose the same token (at least as likely as the mask draft)
    min(odds, 1 - c_i)    where they differ (at most what the mask draft leaves)
    odds                  past the mask drafts (c_i = 0 there)
so the two chains can be compared by their expected run of matches, sum_i c_1 ... c_i.
"""

from __future__ import annotations

import torch


def lookup_rows(rows: list[list[int]], starts: list[int], ends: list[int], ngrams: tuple[int, ...], width: int
                ) -> tuple[list[list[int]], list[int]]:
    """Prompt lookup per row (text in start..end-1): the `width` tokens that followed the latest earlier occurrence of
    the row's last n tokens, for the longest n in ngrams that occurs. (drafts, count). Rows are searched on the host,
    newest first: a few microseconds a row, where torch's batched search cost a quarter of a millisecond a forward
    (docs/llamacpp.md#speed); a caller that finds nothing (count all 0) makes no
    tensor."""
    found = [_latest(row, s, e, ngrams) for row, s, e in zip(rows, starts, ends)]
    drafts = [[row[min(max(after, 0) + j, len(row) - 1)] for j in range(width)] for row, after in zip(rows, found)]
    count = [min(max(e - after, 0), width) if after >= 0 else 0 for e, after in zip(ends, found)]
    return drafts, count


def _latest(row: list[int], start: int, end: int, ngrams: tuple[int, ...]) -> int:
    """Where the continuation of the latest earlier occurrence of row[end-n:end] starts, for the longest n in ngrams
    that occurs in row[start:end] (an occurrence ends before the last token); -1 where none does."""
    for n in sorted(ngrams, reverse=True):
        if end - start <= n or len(row) <= n:
            continue
        last = row[end - n : end]
        for at in range(end - n - 1, start - 1, -1):
            if row[at] == last[0] and row[at : at + n] == last:
                return at + n
    return -1


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
