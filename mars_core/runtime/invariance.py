"""Width invariance, checked: a forward of k new tokens against k forwards of one token each, on the same cache.

Bit-identical logits and cache entries for every row mean that verified decoding's answer is one-token decoding's
by construction: the rows it reads were computed as a one-token forward computes them.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .attention import full_keys
from .forward import cache_mask, forward, head, hidden_states, new_cache
from .runtime import Runtime, WidthCheck
from .slots import SlotCache, slot_mask
from .timing import kept


@torch.inference_mode()
def _feed(model: torch.nn.Module, runtime: Runtime, context: torch.Tensor, valid: torch.Tensor, new: torch.Tensor,
          width: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits of every new token [b, k, V] and each layer's keys and values for them, feeding the context (valid:
    which of its slots are real) and then the new tokens `width` at a time."""
    b, n = context.shape
    cache = new_cache(model)
    positions = (valid.long().cumsum(1) - 1).clamp_min(0)
    forward(model, context, positions, cache_mask(valid, n), cache, 1, runtime=runtime)
    start, logits = positions[:, -1] + 1, []
    seen = valid
    for s in range(0, new.shape[1], width):
        ids = new[:, s : s + width]
        w = ids.shape[1]
        seen = torch.cat([seen, torch.ones_like(ids, dtype=torch.bool)], 1)
        pos = start[:, None] + s + torch.arange(w, device=ids.device)
        logits.append(forward(model, ids, pos, cache_mask(seen, w), cache, w, runtime=runtime))
    entries = [t[:, :, n:] for layer in cache.layers for t in (layer.keys, layer.values)]
    return torch.cat(logits, 1), entries


@torch.inference_mode()
def _feed_static(model: torch.nn.Module, runtime: Runtime, context: torch.Tensor, valid: torch.Tensor,
                 new: torch.Tensor, width: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """_feed through the static-shape decoder's forwards: a cache of fixed length written from a slot, every row
    attending all of its slots (runtime/slots.py, attention.full_keys)."""
    b, n = context.shape
    total = n + new.shape[1]
    cache = SlotCache(model, b, -(-(total + 64) // 64) * 64)  # room past the text, as a decode leaves
    positions = (valid.long().cumsum(1) - 1).clamp_min(0)
    runs = [(context, valid, positions)] + [
        (ids, torch.ones_like(ids, dtype=torch.bool),
         positions[:, -1:] + 1 + s + torch.arange(ids.shape[1], device=ids.device))
        for s in range(0, new.shape[1], width) for ids in [new[:, s : s + width]]]
    logits = []
    for run, (ids, real, pos) in enumerate(runs):
        w = ids.shape[1]
        mask = slot_mask(cache, torch.ones(w, w, dtype=torch.bool, device=ids.device).tril(), real)
        cache.place(w)
        with full_keys():
            hidden = hidden_states(model, ids, pos, mask, cache.kv, runtime)
        cache.keep(real, torch.full((b,), w, device=ids.device))
        if run:  # the new tokens' logits (not the context's)
            logits.append(head(model, hidden, runtime))
    entries = [t[:, :, n:total] for layer in cache.kv.layers for t in (layer.keys, layer.values)]
    return torch.cat(logits, 1), entries


def compare_widths(model: torch.nn.Module, runtime: Runtime, context: torch.Tensor, valid: torch.Tensor,
                   new: torch.Tensor, widths: tuple[int, ...], *, static: bool = False) -> WidthCheck:
    """Feed `new` [b, k] after `context` [b, n] one token per forward, then `w` per forward for each w in widths;
    count the rows (sample, token) whose logits or cache entries differ in any bit. static: through the
    static-shape decoder's forwards (a cache of fixed length, every row attending all of it)."""
    feed = _feed_static if static else _feed
    want, want_cache = feed(model, runtime, context, valid, new, 1)
    rows = differing = 0
    worst = 0.0
    for w in widths:
        got, got_cache = feed(model, runtime, context, valid, new, w)
        bad = (got != want).flatten(2).any(-1)  # [b, k]
        for a, c in zip(got_cache, want_cache):  # [b, heads, k, d]
            bad |= (a != c).transpose(1, 2).flatten(2).any(-1)
        rows, differing = rows + bad.numel(), differing + int(bad.sum())
        worst = max(worst, float((got.float() - want.float()).abs().max()))
    return WidthCheck(tuple(widths), new.shape[0], rows, differing, worst)


CHECK_WIDTHS = (2, 3, 8)  # widths the check at prepare() feeds (a verified tree's, and one kernel switch seen at 3-4)
# the static decoder's: every width its buckets feed at B <= 4 (verified 4, 8, 12, 16; threshold 2..7), 16 new tokens
STATIC_WIDTHS = (2, 3, 4, 5, 6, 7, 8, 12, 16)


def width_check(model: torch.nn.Module, runtime: Runtime, cache_dir: str | Path | None = None,
                widths: tuple[int, ...] | None = None, context: int = 24, new: int | None = None) -> WidthCheck:
    """The check prepare() runs (about a second): random tokens, batch 1; kept in cache_dir/width-<key>.json. Under
    a static runtime, the static decoder's forwards at STATIC_WIDTHS with 16 new tokens (width-static-<key>.json)."""
    static = runtime.static
    widths = widths or (STATIC_WIDTHS if static else CHECK_WIDTHS)
    new = new or max(8, *widths)
    name = "width-static" if static else "width"
    path = Path(cache_dir) / f"{name}-{runtime.key(model)}.json" if cache_dir is not None else None

    def check() -> WidthCheck:
        vocab = model.get_input_embeddings().weight.shape[0]
        ids = torch.randint(vocab, (1, context + new), generator=torch.Generator().manual_seed(0)).to(model.device)
        valid = torch.ones(1, context, dtype=torch.bool, device=model.device)
        return compare_widths(model, runtime, ids[:, :context], valid, ids[:, context:], widths, static=static)

    return kept(path, WidthCheck.from_dict, check, WidthCheck.to_dict, timed=False)  # bits, not seconds: always kept
