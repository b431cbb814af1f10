"""A KV cache allocated once and written by index: the slots a static-shape decoder feeds into.

transformers' StaticCache holds [b, heads, T, d] per layer; RowSlots writes each forward's keys and values from a slot
per sample, at[i] .. at[i]+W-1, so the next forward may start anywhere, overwriting what verification rejected.
Nothing is ever cropped: which slots hold real tokens lives on the device (`valid`), and the mask hides the rest. A
decoder writes each sample's tokens at their positions (slot = position), so a sample's cache is laid out in a batch
exactly as it is alone: no holes between samples of other lengths, the same keys at the same slots.

Decodes borrow their cache (borrowed()): a finished decode's cache, reset, serves the next one of the same model and
shape, with the CUDA graphs captured over it (runtime/graphs.py), so a graph is captured once, not once a decode.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import StaticCache

KEEP = 2  # free caches kept for the next decodes, all models and shapes together (the oldest go first)


class RowSlots(StaticCache):
    """A StaticCache written at the slots `index` [b, W] names, one row of slots per sample (set before a forward)."""

    index: torch.Tensor

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        layer = self.layers[layer_idx]
        at = self.index[:, None, :, None].expand(-1, key_states.shape[1], -1, key_states.shape[-1])
        layer.keys.scatter_(2, at, key_states.to(layer.keys.dtype))
        layer.values.scatter_(2, at, value_states.to(layer.values.dtype))
        return layer.keys, layer.values


class SlotCache:
    """RowSlots plus where each sample's next forward writes (`at`, on the device), which slots are real (`valid`)
    and the graphs captured over it (by bucket)."""

    def __init__(self, model: torch.nn.Module, batch: int, slots: int) -> None:
        config = model.config
        heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.kv = RowSlots(config=config, max_cache_len=slots)
        self.kv.early_initialization(batch, heads, head_dim, model.dtype, model.device)
        self.slots = slots
        self.at = torch.zeros(batch, dtype=torch.long, device=model.device)  # each sample's next forward's first slot
        self.valid = torch.zeros((batch, slots), dtype=torch.bool, device=model.device)  # slots holding real tokens
        self.graphs: dict[Any, Any] = {}  # captured forwards over this cache, by what they feed (runtime/graphs.py)

    def reset(self) -> None:
        """Empty for a new decode: no slot real, writing from slot 0 (the old keys and values stay, masked)."""
        self.at.zero_()
        self.valid.zero_()

    def place(self, width: int) -> None:
        """Make the next forward, of `width` slots per sample, write sample i's from slot at[i]."""
        self.kv.index = self.at[:, None] + torch.arange(width, device=self.at.device)

    def keep(self, kept: torch.Tensor, advance: torch.Tensor) -> None:
        """Mark slot at[i] + j valid where kept[i, j] ([b, W] bool), then move at[i] on by advance[i] ([b] long)."""
        index = self.at[:, None] + torch.arange(kept.shape[1], device=kept.device)  # from at on: never kept yet
        self.valid.scatter_(1, index, kept)
        self.at += advance


_FREE: list[tuple[weakref.ref, int, int, SlotCache]] = []  # (model, batch, slots, cache) not in use, newest last
_FREE_LOCK = threading.Lock()


@contextmanager
def borrowed(model: torch.nn.Module, batch: int, slots: int) -> Iterator[SlotCache]:
    """An empty SlotCache for one decode: a free one of this model and shape (reset), else a new one; given back
    when the decode ends (KEEP are kept)."""
    with _FREE_LOCK:
        found = next((i for i, (m, b, s, _) in enumerate(_FREE) if m() is model and (b, s) == (batch, slots)), None)
        cache = _FREE.pop(found)[3] if found is not None else None
    if cache is None:
        cache = SlotCache(model, batch, slots)
    else:
        cache.reset()
    try:
        yield cache
    finally:
        with _FREE_LOCK:
            _FREE.append((weakref.ref(model), batch, slots, cache))
            del _FREE[:-KEEP]


def slot_mask(cache: SlotCache, template: torch.Tensor, fed: torch.Tensor) -> torch.Tensor:
    """[b, W, T] boolean mask for a forward of W slots per sample written from at[i]: every row sees its sample's
    valid slots before at[i], and the fed slots its template [W, W] allows and that are real (fed [b, W]); each row
    always sees itself (an all-masked row gives NaN in SDPA)."""
    width, dev = template.shape[0], fed.device
    rel = torch.arange(cache.slots, device=dev)[None, :] - cache.at[:, None]  # [b, T] a slot's column in the tree
    inside = (rel >= 0) & (rel < width)
    col = rel.clamp(0, width - 1)
    seen = (template[:, col].transpose(0, 1) & fed.gather(1, col)[:, None, :]) | (
        torch.arange(width, device=dev)[None, :, None] == col[:, None, :])
    return torch.where(inside[:, None, :], seen, (cache.valid & (rel < 0))[:, None, :])
