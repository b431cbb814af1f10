"""lookup.py's host search against a batched torch reference: every n-gram of the text compared with its last n
tokens, the latest match whose continuation starts before the end, the longest n that matches."""

from __future__ import annotations

import random

import torch

from mars_core.decoding.lookup import lookup_rows


def reference(seq: torch.Tensor, start: torch.Tensor, end: torch.Tensor, ngrams: tuple[int, ...], width: int
              ) -> tuple[torch.Tensor, torch.Tensor]:
    b, size = seq.shape
    after = torch.full((b,), -1, dtype=torch.long)
    for n in sorted(ngrams):  # a longer match overrides a shorter one
        if size <= n:
            continue
        last = seq.gather(1, (end[:, None] - n + torch.arange(n)).clamp(0, size - 1))
        at = torch.arange(size - n + 1)
        hit = (seq.unfold(1, n, 1) == last[:, None, :]).all(-1) & (at >= start[:, None]) & (at + n < end[:, None])
        pos = torch.where(hit & (end - start > n)[:, None], at, -1).max(-1).values
        after = torch.where(pos >= 0, pos + n, after)
    count = torch.where(after >= 0, (end - after).clamp(0, width), 0)
    idx = (after.clamp_min(0)[:, None] + torch.arange(width)).clamp_max(size - 1)
    return seq.gather(1, idx), count


def test_lookup_equals_the_batched_reference_on_random_texts():
    rng = random.Random(0)
    found = 0
    for _ in range(2000):
        b, size = rng.randint(1, 4), rng.randint(1, 40)
        seq = torch.randint(0, rng.randint(1, 6), (b, size))  # small vocabularies: many repeats
        start = torch.tensor([rng.randint(0, size) for _ in range(b)])
        end = torch.tensor([rng.randint(int(s), size) for s in start])
        ngrams, width = rng.choice([(3, 2), (2,), (3, 2, 1), (1,), (4, 2)]), rng.randint(1, 8)
        drafts, count = lookup_rows(seq.tolist(), start.tolist(), end.tolist(), ngrams, width)
        want_drafts, want_count = reference(seq, start, end, ngrams, width)
        assert drafts == want_drafts.tolist() and count == want_count.tolist(), (seq, start, end, ngrams)
        found += sum(c > 0 for c in count)
    assert found > 1000  # the cases really found continuations
