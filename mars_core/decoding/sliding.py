"""MARS sliding-window decoding (and, at threshold 1 or block size 1, one-token decoding): one forward per step.

Each forward feeds the committed tokens not yet cached, then B-1 mask tokens:
    columns   [ pending c[L-k..L) | m_0 .. m_{B-2} ]      positions  L-k .. L-1 | L .. L+B-2
prediction 0 = the last pending token's (the exact AR next token, always accepted), prediction j = mask j-1's,
accepted left to right while its confidence >= threshold. The pending tokens stay in the cache (their slots are their
positions); the masks' slots are scratch, overwritten by the next forward. A forward whose threshold is >= 1 feeds no
masks (none could be accepted): one-token mode costs exactly what AR costs.

Batches: each sample's pending run starts at column 0 (the prompt at prefill); columns past its count are not fed.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

import torch

from ..runtime.forward import feed, keep, visible
from .commit import Committed, commit, decode_loop
from .control import DecodeControl
from .feed import decode_cache, logits_at, right_pad, tree_template
from .sampling import accept_prefix, select
from .spec import DecodeSpec, Step


@dataclass
class Window:
    """What the coming forward feeds, per sample."""

    pending: torch.Tensor  # [b, P] committed tokens not yet cached, from column 0 (the prompt at prefill)
    count: torch.Tensor  # [b] how many are real (0 for a finished sample)
    length: torch.Tensor  # [b] committed tokens in the sequence, pending ones included
    answer: Committed  # the answer so far
    prefill: bool = True  # the first forward (a one-off width)


def step(model: torch.nn.Module, cache, w: Window, spec: DecodeSpec, ctl: DecodeControl,
         thresholds: list[float] | None = None) -> Step:
    """One forward over [pending | B-1 masks] (no masks at threshold 1), then the commit. `thresholds`: one per
    sample instead of ctl's (samples of several requests sharing the forward: decoding/joined.py); a sample at 1
    feeds no masks, as alone."""
    (b, P), dev = w.pending.shape, w.pending.device
    tau = ctl.threshold if thresholds is None else torch.tensor(thresholds, device=dev)
    lowest = ctl.threshold if thresholds is None else min(thresholds)
    M = spec.block_size - 1 if lowest < 1.0 else 0  # mask columns this forward
    live = ~w.answer.done
    w.count = torch.where(live, w.count, 0)  # a sample stopped by the caller feeds nothing
    masked = live if thresholds is None else live & (tau < 1.0)
    fed = torch.cat([torch.arange(P, device=dev) < w.count[:, None], masked[:, None].expand(b, M)], 1)
    ids = torch.cat([w.pending, torch.full((b, M), spec.mask_id if M else spec.pad_id, device=dev)], 1)
    positions = torch.cat([(w.length - w.count)[:, None] + torch.arange(P, device=dev),
                           w.length[:, None] + torch.arange(M, device=dev)], 1)
    seen = visible(tree_template(P, 0, (0,) if M else (), M, device=dev), fed)
    hidden = feed(model, cache, ids, positions, seen, fed, runtime=spec.runtime, capture=not w.prefill)
    rows = torch.cat([(w.count - 1).clamp_min(0)[:, None], P + torch.arange(M, device=dev).expand(b, M)], 1)
    tokens, conf = select(logits_at(model, hidden, rows, spec), ctl, spec.generator)
    first = torch.zeros(b, dtype=torch.long, device=dev)  # slot 0, the AR prediction, is always accepted
    end = commit(w.answer, tokens, first, accept_prefix(conf, first, tau), spec)
    keep(cache, w.count)  # the pending tokens stay
    w.length, w.count = w.length + end, torch.where(w.answer.done, 0, end)
    ends, done = torch.stack([end, w.answer.done.long()]).tolist()  # the one host copy a forward
    w.pending, w.prefill = tokens[:, : max(max(ends), 1)], False
    return Step(tokens, conf, first, end, [bool(d) for d in done], ctl.threshold, w.answer.out, w.answer.generated)


@torch.inference_mode()
def sliding_decode(
    model: torch.nn.Module, prompts: list[list[int]], spec: DecodeSpec, control: DecodeControl
) -> Generator[Step, torch.Tensor | None, None]:
    """Yield one Step per forward. send() a bool [b] tensor to stop samples (stop strings)."""
    dev = model.device
    pending, lengths = right_pad(prompts, spec.pad_id, dev)  # prefill is the first step's pending run
    w = Window(pending, lengths, lengths, Committed.empty(len(prompts), spec, spec.block_size, dev))
    with decode_cache(model, prompts, spec, 2 * spec.block_size) as cache:
        yield from decode_loop(control, w.answer, lambda ctl: step(model, cache, w, spec, ctl),
                               lambda stop: None)
