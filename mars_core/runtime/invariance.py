"""Width and batch invariance, checked: new tokens fed w at a time to a batch, against each sample fed alone, one token
a forward, through the forward the decoders serve (forward.feed, the slot cache).

Bit-identical logits and cache entries for every row mean that verified decoding's answer is one-token decoding's
by construction (the rows it reads were computed as a one-token forward computes them), and that a sample's answer
in a batch is its answer alone. An Engine (llama.cpp) is checked the same way on its own forward: its logits (its
cache is its own), as many samples as its forward takes.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .cost import vocab_size
from .engine import Engine
from .forward import causal_seen, feed, head, keep, new_cache
from .runtime import Runtime, WidthCheck
from .slots import decode_slots
from .timing import kept
from .watch import make_key, make_of

PREFILL_MASKS = 3  # verified's prefill feeds the prompt and G_0 (B - 1 masks, B = 4); one-token's the prompt alone


@torch.inference_mode()
def fed_rows(model: torch.nn.Module | Engine, runtime: Runtime, context: torch.Tensor, lengths: torch.Tensor,
             new: torch.Tensor, width: int, *, masks: int = 0) -> tuple[torch.Tensor, list[torch.Tensor], int]:
    """Logits [b, 1+k, V] of each context's last token and of the new tokens [b, k], each layer's keys and values for
    the new tokens ([b, heads, k, d]; an Engine: none) and the cache's length: each sample's context (its first
    lengths[i] tokens of context [b, n]) fed in one forward, with `masks` more columns after it (verified's prefill:
    seen by nothing before them, never kept), then the new tokens `width` at a time, into a cache of the length the
    decoders give this many tokens (slots.decode_slots)."""
    (b, n), k, dev = context.shape, new.shape[1], context.device
    slots = decode_slots(n + k, max(width, masks), runtime.static)
    with new_cache(model, b, slots) as cache:
        real = torch.arange(n, device=dev) < lengths[:, None]
        stand_in = new[:, :1].expand(b, masks)  # any token: the bits under test do not depend on which
        prefill = torch.cat([context, stand_in], 1), torch.cat([real, torch.ones_like(stand_in, dtype=torch.bool)], 1)
        runs = [prefill] + [(run, torch.ones_like(run, dtype=torch.bool)) for run in new.split(width, 1)]
        start, logits = torch.zeros_like(lengths), []
        for run, (ids, fed) in enumerate(runs):
            w = ids.shape[1]
            seen = causal_seen(fed)
            at = start[:, None] + torch.arange(w, device=dev)
            if not run:  # the masks at the positions after each context
                at = torch.cat([at[:, :n], lengths[:, None] + torch.arange(masks, device=dev)], 1)
            hidden = feed(model, cache, ids, at, seen, fed, runtime=runtime, capture=run > 0)
            rows = hidden if run else hidden.gather(1, (lengths - 1)[:, None, None].expand(-1, 1, hidden.shape[-1]))
            logits.append(head(model, rows, runtime))
            advance = lengths if not run else fed.sum(1)  # the masks are scratch
            keep(cache, advance)
            start = start + advance
        at = lengths[:, None] + torch.arange(k, device=dev)  # the new tokens' slots: their positions
        layers = [] if isinstance(model, Engine) else cache.kv.layers
        entries = [t.gather(2, at[:, None, :, None].expand(-1, t.shape[1], -1, t.shape[-1])).clone()
                   for layer in layers for t in (layer.keys, layer.values)]
    return torch.cat(logits, 1), entries, slots


def compare_widths(model: torch.nn.Module | Engine, runtime: Runtime, context: torch.Tensor, lengths: torch.Tensor,
                   new: torch.Tensor, widths: tuple[int, ...], *, masks: int = 0) -> WidthCheck:
    """Feed `new` [b, k] after each sample's context (its first lengths[i] tokens of context [b, n]): alone and one
    token per forward after the context alone (one-token decoding), then the whole batch `w` per forward for each w in
    widths after the context and `masks` masks (verified's prefill: PREFILL_MASKS); count the rows (sample, token: the
    context's last and each new one) whose logits or cache entries differ in any bit."""
    alone = [fed_rows(model, runtime, context[i : i + 1], lengths[i : i + 1], new[i : i + 1], 1)
             for i in range(context.shape[0])]
    want = torch.cat([a[0] for a in alone])
    want_cache = [torch.cat(layer) for layer in zip(*(a[1] for a in alone))]
    rows = differing = 0
    worst = 0.0
    slots = {a[2] for a in alone}
    for w in widths:
        got, got_cache, length = fed_rows(model, runtime, context, lengths, new, w, masks=masks)
        slots.add(length)
        bad = (got != want).flatten(2).any(-1)  # [b, 1+k]
        for a, c in zip(got_cache, want_cache):  # [b, heads, k, d]: the new tokens' rows
            bad[:, 1:] |= (a != c).transpose(1, 2).flatten(2).any(-1)
        rows, differing = rows + bad.numel(), differing + int(bad.sum())
        worst = max(worst, float((got.float() - want.float()).abs().max()))
    return WidthCheck(tuple(widths), new.shape[0], rows, differing, worst, tuple(sorted(slots)), masks)


CHECK_WIDTHS = (2, 3, 8, 16, 32)  # widths the check at prepare() feeds: a verified tree's up to the widest lookup
# makes (32), and one kernel switch seen at 3-4
# a static runtime's: every width its buckets feed at B <= 4 (verified 4, 8, .., 32 with prompt lookup; threshold 2..7)
STATIC_WIDTHS = (2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24, 28, 32)
CONTEXTS = (24, 17)  # the check's batch: two samples of other lengths (a sample alone is the reference)
# a static runtime's rows read every slot, so its check also feeds a batch after longer contexts, at the next cache
# length (256 slots: what a chat prompt and its answer mostly take)
LONG_CONTEXTS = (152, 145)


def width_check(model: torch.nn.Module | Engine, runtime: Runtime, cache_dir: str | Path | None = None, *,
                widths: tuple[int, ...] | None = None, contexts: tuple[int, ...] = CONTEXTS, new: int | None = None,
                fresh: bool = False) -> WidthCheck:
    """The check prepare() runs (a few seconds): random tokens, a batch of two samples of other lengths against each
    alone (an Engine: as many as its forward takes), at CHECK_WIDTHS (a static runtime: STATIC_WIDTHS, and a second
    batch after LONG_CONTEXTS), 32 new tokens, the batch's prefill with verified's masks (PREFILL_MASKS; an Engine:
    none), at the cache length the decoders give those tokens; kept in cache_dir/width-<key>.json, taken once per
    model and kernels (a kept check of fewer widths is taken again; fresh: taken again and the kept one replaced, as
    for a forward compiled anew)."""
    widths = widths or (STATIC_WIDTHS if runtime.static else CHECK_WIDTHS)
    new = new or max(8, *widths)
    masks = 0 if isinstance(model, Engine) else PREFILL_MASKS
    contexts = contexts[: model.max_batch] if isinstance(model, Engine) else contexts
    # kept by the kernels and by the model's make (a LoRA-wrapped model's forward is another forward than the merged)
    make = "" if isinstance(model, Engine) else f"-{make_key(make_of(model))[:16]}"
    path = Path(cache_dir) / f"width-{runtime.key(model)}{make}.json" if cache_dir is not None else None

    def check() -> WidthCheck:
        batches = (contexts, LONG_CONTEXTS) if runtime.static else (contexts,)
        return joined([random_batch(model, runtime, lengths, new, widths, masks) for lengths in batches])

    return kept(path, WidthCheck.from_dict, check, WidthCheck.to_dict, timed=False,  # bits: always kept
                holds=lambda found: found.covers(widths, masks), fresh=fresh)


def random_batch(model: torch.nn.Module | Engine, runtime: Runtime, contexts: tuple[int, ...], new: int,
                 widths: tuple[int, ...], masks: int) -> WidthCheck:
    """compare_widths on random tokens (seed 0): a batch of contexts of these lengths, `new` tokens after each."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(vocab_size(model), (len(contexts), max(contexts) + new), generator=gen).to(model.device)
    lengths = torch.tensor(contexts, device=model.device)
    after = lengths[:, None] + torch.arange(new, device=model.device)
    return compare_widths(model, runtime, ids[:, : max(contexts)], lengths, ids.gather(1, after), widths, masks=masks)


def joined(checks: list[WidthCheck]) -> WidthCheck:
    """Checks of the same widths on other batches as one: their rows and differing rows summed, every cache length."""
    first = checks[0]
    return WidthCheck(first.widths, first.batch, sum(c.rows for c in checks), sum(c.differing for c in checks),
                      max(c.max_abs for c in checks), tuple(sorted({s for c in checks for s in c.slots})),
                      first.prefill_masks)
