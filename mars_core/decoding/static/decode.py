"""Static-shape decoding: every forward a fixed tree (buckets.py) written by index into a cache allocated once
(slots.py), acceptance, the commit and the next tree's inputs computed on the device, one small host copy a forward
(what was committed, whether samples are done, the next bucket).

Verified (bucket k: [bonus | d_1..d_k | G_0..G_k]): the row of the bonus token and of each draft d_a predicts the
next position, so with m drafts matching the model's own argmax, d_1..d_m and the argmax after them are committed:
greedy AR's tokens. The cache keeps the bonus and the m drafts (slots at .. at+m: a token's slot is its position,
so a sample's cache is the same in a batch as alone); `at` moves on by 1 + m and the next forward overwrites the
rest. G_m's masks propose the next drafts. Threshold (bucket [pending P | G_0]): the argmax at the last pending token
and the masks' predictions while confident are committed and fed next as pending. One-token decoding is either at
threshold 1: the plain bucket, width 1.

Every row attends all T slots of the cache (attention.full_keys), so under a width-invariant runtime a row's numbers
are those of a one-token forward: verified decoding is one-token decoding bit for bit, at batch 1 and in batches.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from time import perf_counter

import torch

from ...runtime.attention import full_keys
from ...runtime.forward import head, hidden_states
from ...runtime.graphs import capturable, replayed
from ...runtime.slots import SlotCache, borrowed, slot_mask
from ..cache import right_pad
from ..commit import Committed, commit, decode_loop
from ..control import DecodeControl
from ..sampling import accept_prefix, greedy, select
from ..spec import DecodeSpec, Step
from ..verified.tree import leading
from .buckets import Bucket, choose, on_device, price_step, verify_buckets

SLACK = 128  # slots past prompt + max_new_tokens, at least: room for the widest tree twice (B = 8: 64 slots)
ROUND = 128  # the cache's length is a multiple of this, so decodes of similar lengths share shapes


def cache_slots(prompt: int, max_new_tokens: int, block_size: int) -> int:
    """The cache's length T for a decode: the prompt, the answer and twice the widest bucket, rounded up; the same for
    every strategy up to B = 8, so their rows read keys of the same shape."""
    g = block_size - 1
    widest = max(1 + g + (g + 1) * g, block_size + g)  # verified's bucket D, or threshold's [pending | G_0]
    return -(-(prompt + max_new_tokens + max(SLACK, 2 * widest)) // ROUND) * ROUND


@dataclass
class Run:
    """One static decode: what is fixed, and what each forward leaves for the next (all on the device but `bucket`)."""

    model: torch.nn.Module
    spec: DecodeSpec
    cache: SlotCache
    answer: Committed
    pending: torch.Tensor  # [b, P] committed tokens not yet cached, left-aligned (verified: the bonus alone)
    count: torch.Tensor  # [b] real pending tokens
    last: torch.Tensor  # [b] position of the last real pending token
    drafts: torch.Tensor  # [b, D] the next drafts (verified)
    conf: torch.Tensor  # [b, D] their confidences (0: none)
    seconds: torch.Tensor | None  # [D+1] seconds of a forward of verified bucket k at this batch (None: no curve)
    bucket: Bucket  # what the next forward feeds (host-side: chosen from the last forward's copy)
    verified: bool  # check drafts (else threshold decoding)
    graphs: bool = False  # replay each decode bucket's forward as a CUDA graph

    @property
    def g(self) -> int:
        return self.spec.block_size - 1


def feed(r: Run, bucket: Bucket, ids: torch.Tensor, positions: torch.Tensor, fed: torch.Tensor) -> torch.Tensor:
    """One forward of the bucket written from slot `at`: the last hidden states [b, W, H]. On a GPU each decode
    bucket's forward is one CUDA graph, captured on its first use over this cache (the prompt's runs eagerly)."""
    mask = slot_mask(r.cache, on_device(bucket, ids.device)[0], fed)

    def forward(ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        r.cache.place(ids.shape[1])
        with full_keys():
            return hidden_states(r.model, ids, positions, mask, r.cache.kv, r.spec.runtime)

    if r.graphs and bucket.pending <= r.spec.block_size:
        return replayed(r.cache.graphs, (bucket, r.spec.runtime), forward, ids, positions.clamp_min(0), mask)
    return forward(ids, positions.clamp_min(0), mask)


def rows_of(r: Run, hidden: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Logits [b, n, V] of the hidden rows at rows [b, n]."""
    picked = hidden.gather(1, rows[..., None].expand(-1, -1, hidden.shape[-1]))
    return head(r.model, picked, r.spec.runtime)


def pending_step(r: Run, ctl: DecodeControl) -> Step:
    """One forward of [pending P | G_0 (below threshold 1)]: the argmax at the last pending token, then (threshold
    decoding) the masks' predictions while confident, sampled where temperature > 0, committed and fed next as
    pending. Verified decoding's first forward (the prompt) commits the argmax alone and takes the masks'
    predictions as its first drafts."""
    bucket, b, dev = r.bucket, r.pending.shape[0], r.pending.device
    P, live = bucket.pending, ~r.answer.done
    slots = torch.arange(P, device=dev)
    pending_fed = (slots < r.count[:, None]) & live[:, None]
    ids = torch.cat([r.pending[:, :P], torch.full((b, bucket.width - P), r.spec.mask_id or 0, device=dev)], 1)
    positions = torch.cat([r.last[:, None] - r.count[:, None] + 1 + slots, r.last[:, None] + on_device(bucket, dev)[1]],
                          1)
    fed = torch.cat([pending_fed, live[:, None].expand(b, bucket.width - P)], 1)
    hidden = feed(r, bucket, ids, positions, fed)
    masks = torch.arange(P, bucket.width, device=dev)[None].expand(b, -1)
    logits = rows_of(r, hidden, torch.cat([(r.count - 1).clamp_min(0)[:, None], masks], 1))
    first = torch.zeros(b, dtype=torch.long, device=dev)
    if r.verified:
        tokens, conf = greedy(logits, ctl.confidence)
        end = commit(r.answer, tokens, first, first + 1, r.spec)
        r.drafts[:, : bucket.width - P], r.conf[:, : bucket.width - P] = tokens[:, 1:], conf[:, 1:]
        k = choose(r.conf, leading(r.conf >= ctl.threshold), ~r.answer.done, r.seconds)
    else:
        tokens, conf = select(logits, ctl, r.spec.generator)
        end = commit(r.answer, tokens, first, accept_prefix(conf, first, ctl.threshold), r.spec)
        k = first[0]
    r.cache.keep(torch.cat([pending_fed, torch.zeros_like(fed[:, P:])], 1), r.count * live)
    r.last, r.pending, r.count = r.last + end, tokens[:, :1] if r.verified else tokens, torch.where(live, end, 0)
    return finish(r, ctl, tokens, conf, end, k)


def verified_step(r: Run, ctl: DecodeControl) -> Step:
    """One forward of [bonus | d_1..d_k | G_0..G_k]: verify the confident drafts, commit d_1..d_m and the argmax
    after them, keep their slots, and take G_m's predictions as the next drafts."""
    bucket, b, dev = r.bucket, r.pending.shape[0], r.pending.device
    k, live = bucket.drafts, ~r.answer.done
    ids = torch.cat([r.pending, r.drafts[:, :k],
                     torch.full((b, len(bucket.groups) * r.g), r.spec.mask_id or 0, device=dev)], 1)
    positions = r.last[:, None] + torch.cat([torch.zeros(1, dtype=torch.long, device=dev), on_device(bucket, dev)[1]])
    hidden = feed(r, bucket, ids, positions, live[:, None].expand(b, bucket.width))
    tokens, conf = greedy(head(r.model, hidden[:, : k + 1], r.spec.runtime), ctl.confidence)
    drafted = leading(r.conf[:, :k] >= ctl.threshold)
    confident = torch.arange(k, device=dev) < drafted[:, None]
    m = leading((tokens[:, :k] == r.drafts[:, :k]) & confident) if k else torch.zeros(b, dtype=torch.long, device=dev)
    end = commit(r.answer, tokens, torch.zeros_like(m), m + 1, r.spec)
    r.cache.keep((torch.arange(bucket.width, device=dev) <= m[:, None]) & live[:, None], (1 + m) * live)
    r.last, r.pending = r.last + m + 1, tokens.gather(1, m[:, None])
    checked, matched = r.drafts[:, :k], torch.minimum(m, end)  # r.drafts is rebound below, never written into
    if bucket.groups:  # G_m's masks propose the next drafts
        start = bucket.group_start(m)[:, None] + torch.arange(r.g, device=dev)
        r.drafts, r.conf = greedy(rows_of(r, hidden, start), ctl.confidence)
        k_next = choose(r.conf, leading(r.conf >= ctl.threshold), ~r.answer.done, r.seconds)
    else:  # the plain bucket proposes nothing
        r.conf, k_next = torch.zeros_like(r.conf), torch.zeros((), dtype=torch.long, device=dev)
    return finish(r, ctl, tokens, conf, end, k_next, drafts=checked, drafted=torch.where(live, drafted, 0),
                  matched=matched)


def finish(r: Run, ctl: DecodeControl, tokens: torch.Tensor, conf: torch.Tensor, end: torch.Tensor,
           k: torch.Tensor, **verified) -> Step:
    """The forward's one host copy (what was committed, which samples are done, the next k) and the next bucket:
    verified's k-th (the plain one at threshold 1 or without masks); threshold decoding's pending run as wide as
    the longest one committed, with G_0 below threshold 1."""
    ends, done, (k,) = (v.tolist() for v in (end, r.answer.done, k[None]))
    g = r.g if ctl.threshold < 1.0 else 0
    if r.verified:
        r.bucket = Bucket(1, min(k, r.g), g) if g else Bucket(1, 0, 0)
    else:
        r.bucket = Bucket(max(max(ends), 1), 0, g)
    if verified:
        verified["looked_up"] = torch.zeros_like(end, dtype=torch.bool)
    return Step(tokens, conf, torch.zeros_like(end), end, [bool(d) for d in done], ctl.threshold, r.answer.out,
                r.answer.generated, **verified)


@torch.inference_mode()
def static_decode(model: torch.nn.Module, prompts: list[list[int]], spec: DecodeSpec, control: DecodeControl, *,
                  verified: bool = True) -> Generator[Step, torch.Tensor | None, None]:
    """Yield one Step per forward (send() a bool [b] tensor to stop samples). verified: check the mask slots' drafts
    (greedy: lossless); else threshold decoding (block_size 1 or threshold 1: one-token decoding)."""
    dev, b, g = model.device, len(prompts), spec.block_size - 1
    prompt, lengths = right_pad(prompts, spec.pad_id, dev)
    seconds = None
    if verified and g and spec.runtime.cost is not None:
        seconds = torch.tensor(spec.runtime.cost.at(b, [bk.width for bk in verify_buckets(g, g)]), device=dev)
    with borrowed(model, b, cache_slots(prompt.shape[1], spec.max_new_tokens, spec.block_size)) as cache:
        yield from decode_run(model, spec, control, cache, prompt, lengths, seconds, verified)


def decode_run(model: torch.nn.Module, spec: DecodeSpec, control: DecodeControl, cache: SlotCache,
               prompt: torch.Tensor, lengths: torch.Tensor, seconds: torch.Tensor | None, verified: bool
               ) -> Generator[Step, torch.Tensor | None, None]:
    """static_decode's loop over a borrowed cache: the prompt's forward, then one bucket a forward."""
    dev, b, g = model.device, prompt.shape[0], spec.block_size - 1
    threshold = control.snapshot().threshold
    r = Run(model=model, spec=spec, cache=cache, graphs=capturable(dev),
            answer=Committed.empty(b, spec, spec.block_size, dev), pending=prompt, count=lengths, last=lengths - 1,
            drafts=torch.full((b, g), spec.pad_id, device=dev), conf=torch.zeros((b, g), device=dev),
            seconds=seconds, bucket=Bucket(prompt.shape[1], 0, g if threshold < 1.0 else 0), verified=verified)
    first, seen = True, set()
    live = seconds is not None and (spec.runtime.live_cost or dev.type == "cuda")  # price whole steps (buckets.py)

    def forward(ctl: DecodeControl) -> Step:
        nonlocal first
        if verified and ctl.temperature > 0:
            raise ValueError("static verified decoding is greedy: temperature must be 0")
        taken = pending_step if first or not verified else verified_step
        first, bucket, began = False, r.bucket, perf_counter()
        step = taken(r, ctl)  # ends with the step's host copy: on a GPU, its work is done
        if live and taken is verified_step and bucket.groups:
            if bucket in seen:
                price_step(r.seconds, bucket.drafts, perf_counter() - began)
            seen.add(bucket)
        return step

    yield from decode_loop(control, r.answer, forward, lambda _: None)
