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
from .forward import feed, head, keep, new_cache, visible
from .runtime import Runtime, WidthCheck
from .slots import cache_slots
from .timing import kept
from .watch import make_key, make_of


@torch.inference_mode()
def fed_rows(model: torch.nn.Module | Engine, runtime: Runtime, context: torch.Tensor, lengths: torch.Tensor,
             new: torch.Tensor, width: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits [b, k, V] of the new tokens [b, k] and each layer's keys and values for them ([b, heads, k, d]; an
    Engine: none), feeding each sample's context (its first lengths[i] tokens of context [b, n]) in one forward, then
    the new tokens `width` at a time."""
    (b, n), k, dev = context.shape, new.shape[1], context.device
    slots = cache_slots(n + k, max(width, n))
    logits = []
    with new_cache(model, b, slots) as cache:
        start = torch.zeros_like(lengths)
        runs = [(context, torch.arange(n, device=dev) < lengths[:, None])] + [
            (run, torch.ones_like(run, dtype=torch.bool)) for run in new.split(width, 1)]
        for run, (ids, fed) in enumerate(runs):
            w = ids.shape[1]
            seen = visible(torch.ones(w, w, dtype=torch.bool, device=dev).tril(), fed)
            hidden = feed(model, cache, ids, start[:, None] + torch.arange(w, device=dev), seen, fed,
                          runtime=runtime, capture=run > 0)
            keep(cache, fed.sum(1))
            start = start + fed.sum(1)
            if run:
                logits.append(head(model, hidden, runtime))
        at = lengths[:, None] + torch.arange(k, device=dev)  # the new tokens' slots: their positions
        layers = [] if isinstance(model, Engine) else cache.kv.layers
        entries = [t.gather(2, at[:, None, :, None].expand(-1, t.shape[1], -1, t.shape[-1])).clone()
                   for layer in layers for t in (layer.keys, layer.values)]
    return torch.cat(logits, 1), entries


def compare_widths(model: torch.nn.Module | Engine, runtime: Runtime, context: torch.Tensor, lengths: torch.Tensor,
                   new: torch.Tensor, widths: tuple[int, ...]) -> WidthCheck:
    """Feed `new` [b, k] after each sample's context (its first lengths[i] tokens of context [b, n]): alone and one
    token per forward, then the whole batch `w` per forward for each w in widths; count the rows (sample, token)
    whose logits or cache entries differ in any bit."""
    alone = [fed_rows(model, runtime, context[i : i + 1], lengths[i : i + 1], new[i : i + 1], 1)
             for i in range(context.shape[0])]
    want = torch.cat([a[0] for a in alone])
    want_cache = [torch.cat(layer) for layer in zip(*(a[1] for a in alone))]
    rows = differing = 0
    worst = 0.0
    for w in widths:
        got, got_cache = fed_rows(model, runtime, context, lengths, new, w)
        bad = (got != want).flatten(2).any(-1)  # [b, k]
        for a, c in zip(got_cache, want_cache):  # [b, heads, k, d]
            bad |= (a != c).transpose(1, 2).flatten(2).any(-1)
        rows, differing = rows + bad.numel(), differing + int(bad.sum())
        worst = max(worst, float((got.float() - want.float()).abs().max()))
    return WidthCheck(tuple(widths), new.shape[0], rows, differing, worst)


CHECK_WIDTHS = (2, 3, 8)  # widths the check at prepare() feeds (a verified tree's, and one kernel switch seen at 3-4)
# a static runtime's: every width its buckets feed at B <= 4 (verified 4, 8, 12, 16; threshold 2..7)
STATIC_WIDTHS = (2, 3, 4, 5, 6, 7, 8, 12, 16)
CONTEXTS = (24, 17)  # the check's batch: two samples of other lengths (a sample alone is the reference)


def width_check(model: torch.nn.Module | Engine, runtime: Runtime, cache_dir: str | Path | None = None, *,
                widths: tuple[int, ...] | None = None, contexts: tuple[int, ...] = CONTEXTS, new: int | None = None,
                fresh: bool = False) -> WidthCheck:
    """The check prepare() runs (a few seconds): random tokens, a batch of two samples of other lengths against each
    alone (an Engine: as many as its forward takes), at CHECK_WIDTHS (a static runtime: STATIC_WIDTHS, 16 new
    tokens); kept in cache_dir/width-<key>.json (fresh: taken again and the kept one replaced, as for a forward
    compiled anew)."""
    widths = widths or (STATIC_WIDTHS if runtime.static else CHECK_WIDTHS)
    new = new or max(8, *widths)
    contexts = contexts[: model.max_batch] if isinstance(model, Engine) else contexts
    # kept by the kernels and by the model's make (a LoRA-wrapped model's forward is another forward than the merged)
    make = "" if isinstance(model, Engine) else f"-{make_key(make_of(model))[:16]}"
    path = Path(cache_dir) / f"width-{runtime.key(model)}{make}.json" if cache_dir is not None else None

    def check() -> WidthCheck:
        vocab = vocab_size(model)
        gen = torch.Generator().manual_seed(0)
        ids = torch.randint(vocab, (len(contexts), max(contexts) + new), generator=gen).to(model.device)
        lengths = torch.tensor(contexts, device=model.device)
        after = lengths[:, None] + torch.arange(new, device=model.device)
        return compare_widths(model, runtime, ids[:, : max(contexts)], lengths, ids.gather(1, after), widths)

    return kept(path, WidthCheck.from_dict, check, WidthCheck.to_dict, timed=False, fresh=fresh)  # bits: always kept
