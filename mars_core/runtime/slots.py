"""The KV cache every decoder writes: a token's slot is its position, in every batch and every strategy.

transformers' StaticCache holds [b, heads, T, d] per layer, allocated once; RowSlots writes each forward's keys and
values at the slots `index` [b, W] names. Sample i has kept at[i] tokens, in slots 0 .. at[i]-1, which are exactly its
positions 0 .. at[i]-1: a forward writes the columns it feeds (fed[i, c]) from slot at[i] on, in column order, and the
columns it does not feed after them. keep(advance) then marks the first advance[i] fed columns kept (at[i] moves on);
everything past at[i] is scratch, never seen and overwritten by the next forward. Nothing is cropped and there are no
holes: slot t of sample i is seen by a later forward exactly when t < at[i]. So a sample's cache is the same alone and
in any batch.

Which keys a row reads (KeyPlan): a row written at slot s reads slots 0 .. E-1 with E = s+1 rounded up to a multiple of
KEY_ROUND: one function of the slot, so a row gets the same call whatever else shares its forward (width and batch
invariance, attention.py). A static cache (Runtime.static, the shape CUDA graphs capture) reads all T slots instead.

Decodes borrow their cache (borrowed()): a finished decode's cache, reset, serves the next one of the same model and
shape, with the CUDA graphs captured over it (runtime/graphs.py).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from transformers import StaticCache

KEEP = 2  # free caches kept for the next decodes, all models and shapes together (the oldest go first)
# ... and the CPU ones at most these bytes together: a long prompt's cache is freed once its decode ends (a GPU's are
# kept by count alone: their CUDA graphs are captured over them)
KEEP_BYTES = 32 << 20
# a decode whose cache holds more than this (a long prompt) gives the memory its forwards freed back to the system
# when it ends: glibc keeps freed blocks in each thread's arena, resident with nothing using them
# (docs/speed.md#what-the-runtime-keeps-is-checked)
TRIM_BYTES = 8 << 20
KEEP_GPU = 16  # ... and a GPU's, kept by count alone: each holds the CUDA graphs captured over it (a bench's shapes)
KEY_ROUND = 64  # a row reads its keys up to its slot rounded up to this (docs/speed.md#one-decoder)
SLOT_ROUND = 128  # a cache's length is a multiple of this, so decodes of similar lengths share a cache
# a static runtime's rows read every slot, so the cache's length is part of a row's forward: its decoders' caches have
# room for at least this many columns past their tokens, so one-token and verified decoding (B <= 4: trees up to 61
# wide) of one prompt read as many keys (the width check feeds at that length too: runtime/invariance.py)
STATIC_ROOM = 64


def cache_slots(tokens: int, widest: int) -> int:
    """The cache's length for a decode of `tokens` positions (the longest prompt and the answer) whose widest forward
    feeds `widest` tokens per sample past them: room for the scratch columns, rounded up to SLOT_ROUND."""
    return -(-(tokens + widest + 1) // SLOT_ROUND) * SLOT_ROUND


def decode_slots(tokens: int, widest: int, static: bool) -> int:
    """The cache's length for a decode (cache_slots), with room for STATIC_ROOM columns at least on a static runtime:
    one length for every decoder of one prompt there."""
    return cache_slots(tokens, max(widest, STATIC_ROOM) if static else widest)


class RowSlots(StaticCache):
    """A StaticCache written at `rows` (set before a forward by SlotCache.place): fed column c of sample i, head h
    goes to slot index[i, c], row (i * H + h) * T + index[i, c] of a layer's cache seen as [b * H * T, d]."""

    rows: torch.Tensor  # [b * H * W], in the order of a layer's key_states [b, H, W, d]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        layer = self.layers[layer_idx]
        # keys[i, h, index[i, c]] = key_states[i, h, c]: one indexed write of rows into the flattened cache (index_put_,
        # rows from place()), which a compiled graph does in place; a scatter_ there became a copy of the whole cache
        # and a copy back, per layer and forward
        d = key_states.shape[-1]
        layer.keys.view(-1, d)[self.rows] = key_states.reshape(-1, d).to(layer.keys.dtype)
        layer.values.view(-1, d)[self.rows] = value_states.reshape(-1, d).to(layer.values.dtype)
        return layer.keys, layer.values


@dataclass(frozen=True)
class KeyGroup:
    """Rows that read the same keys, 0 .. keys-1, in one attention call: the columns `sel` of sample `sample` (one
    sample's rows, its keys shared by all), or column `col` of the samples `sel` (one row each)."""

    keys: int
    sel: slice | torch.Tensor
    sample: int | None = None
    col: int | None = None


KeyPlan = list[KeyGroup]


class SlotCache:
    """RowSlots plus what each sample has kept (`at`, on the device) and the graphs captured over it."""

    def __init__(self, model: torch.nn.Module, batch: int, slots: int) -> None:
        config = model.config
        heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        with torch.inference_mode():  # whoever borrows it next, the same kind of tensors (a compiled graph guards it)
            self.kv = RowSlots(config=config, max_cache_len=slots)
            self.kv.early_initialization(batch, heads, head_dim, model.dtype, model.device)
        for layer in self.kv.layers:  # the model's heads and head size: constants of a compiled graph, not symbols
            for t in (layer.keys, layer.values):
                torch._dynamo.mark_static(t, 1)
                torch._dynamo.mark_static(t, 3)
        self.slots = slots
        # host memory it holds (a GPU's: 0)
        self.bytes = sum(t.nbytes for layer in self.kv.layers for t in (layer.keys, layer.values) if not t.is_cuda)
        self.at = torch.zeros(batch, dtype=torch.long, device=model.device)  # tokens kept per sample
        self.graphs: dict[Any, Any] = {}  # captured forwards over this cache, by what they feed (runtime/graphs.py)
        self.replays: tuple | None = None  # the model its graphs replay (forward.replays_of), where captured

    def fits(self, model: torch.nn.Module) -> bool:
        """Whether it still fits the model (the dtype and device its keys are kept in: a model moved needs another)."""
        keys = self.kv.layers[0].keys
        return keys.dtype == model.dtype and keys.device == model.device

    def reset(self) -> None:
        """Empty for a new decode (the old keys and values stay, past at = 0: never seen)."""
        self.at.zero_()

    def place(self, fed: torch.Tensor) -> torch.Tensor:
        """Where the next forward writes: fed columns ([b, W] bool) from slot at[i] on in column order, the others
        after them. Returns the slots [b, W] (RowSlots writes at their rows)."""
        fed = fed.long()
        order = torch.where(fed.bool(), fed.cumsum(1) - 1, fed.sum(1, keepdim=True) + (1 - fed).cumsum(1) - 1)
        index = self.at[:, None] + order
        b, width = index.shape
        heads = self.kv.layers[0].keys.shape[1]
        sample_head = torch.arange(b * heads, device=index.device).view(b, heads, 1)  # row (i, h, t): (i H + h) T + t
        self.kv.rows = (sample_head * self.slots + index[:, None]).reshape(b * heads * width)
        return index

    def mask(self, seen: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """[b, W, T] boolean (True = attend): every row sees its sample's kept slots, and the fed columns `seen`
        [b, W, W] lets it see (itself included), at the slots `index` they are written to."""
        b, width = index.shape
        kept = torch.arange(self.slots, device=index.device)[None, :] < self.at[:, None]
        mask = kept[:, None, :].expand(b, width, self.slots).clone()
        return mask.scatter_(2, index[:, None, :].expand(b, width, width), seen)

    def keep(self, advance: torch.Tensor) -> None:
        """Keep the first advance[i] fed columns of the last forward (their slots are their positions)."""
        self.at += advance

    def repeat(self, one: SlotCache) -> None:
        """Every sample now holds what sample 0 of `one` (a cache of as many slots) kept: its keys, values and count."""
        for mine, its in zip(self.kv.layers, one.kv.layers):
            mine.keys.copy_(its.keys[:1].expand_as(mine.keys))
            mine.values.copy_(its.values[:1].expand_as(mine.values))
        self.at.fill_(int(one.at[0]))

    def key_plan(self, index: torch.Tensor, full: bool, alone: bool = False) -> KeyPlan:
        """Which keys each row of the next forward reads, grouped into attention calls (module doc): a row written at
        slot s reads up to s+1 rounded up to KEY_ROUND, or all T slots where `full`. Rows are grouped by sample or
        by column, whichever makes fewer calls; alone: a call per row (where SDPA's bits for a row depend on how
        many rows share its call: Runtime.units_alone). Read on the host, once a forward (on a CPU that is no sync)."""
        b, width = index.shape
        if full:
            keys = [[self.slots] * width for _ in range(b)]
        else:
            keys = [[min(-(-(s + 1) // KEY_ROUND) * KEY_ROUND, self.slots) for s in row] for row in index.tolist()]
        if alone:
            return [KeyGroup(e, slice(c, c + 1), sample=i) for i, row in enumerate(keys) for c, e in enumerate(row)]
        by_sample = [KeyGroup(e, _run(cols, index.device), sample=i)
                     for i, row in enumerate(keys) for e, cols in _grouped(row).items()]
        by_col = [KeyGroup(e, _run(samples, index.device), col=c)
                  for c in range(width) for e, samples in _grouped([row[c] for row in keys]).items()]
        return by_sample if len(by_sample) < len(by_col) else by_col


def _grouped(keys: list[int]) -> dict[int, list[int]]:
    """The places of each value in keys, in order."""
    places: dict[int, list[int]] = {}
    for i, e in enumerate(keys):
        places.setdefault(e, []).append(i)
    return places


def _run(items: list[int], device: torch.device) -> slice | torch.Tensor:
    """A slice where the items are consecutive (a view, no copy), else an index tensor."""
    if items == list(range(items[0], items[0] + len(items))):
        return slice(items[0], items[0] + len(items))
    return torch.tensor(items, dtype=torch.long, device=device)


_FREE: list[tuple[weakref.ref, int, int, SlotCache]] = []  # (model, batch, slots, cache) not in use, newest last
_FREE_LOCK = threading.Lock()


@contextmanager
def borrowed(model: torch.nn.Module, batch: int, slots: int, replays: tuple | None = None) -> Iterator[SlotCache]:
    """An empty SlotCache for one decode: a free one of this model and shape (reset), else a new one; given back
    when the decode ends (the newest KEEP kept while their host memory is at most KEEP_BYTES, the rest freed; a GPU's
    newest KEEP_GPU)."""
    with _FREE_LOCK:
        found = next((i for i, (m, b, s, c) in enumerate(_FREE) if m() is model and (b, s) == (batch, slots)
                      and c.fits(model)), None)
        cache = _FREE.pop(found)[3] if found is not None else None
    if cache is None:
        cache = SlotCache(model, batch, slots)
    else:
        cache.reset()
    if replays is not None:  # its graphs replay the model as captured: kept while it is still that model
        if cache.replays != replays:
            cache.graphs.clear()
        cache.replays = replays
    try:
        yield cache
    finally:
        with _FREE_LOCK:
            if cache.bytes <= KEEP_BYTES:  # a cache over the bound alone is never kept
                _FREE.append((weakref.ref(model), batch, slots, cache))
            _keep_newest()
            while sum(kept.bytes for *_, kept in _FREE) > KEEP_BYTES:  # then the oldest go first
                del _FREE[0]
        if cache.bytes > TRIM_BYTES:
            del cache
            give_back_memory()


def _keep_newest() -> None:
    """Drop the oldest free caches past KEEP on the CPU and past KEEP_GPU on a GPU."""
    drop = set()
    for gpu, most in ((False, KEEP), (True, KEEP_GPU)):
        mine = [id(entry) for entry in _FREE if entry[3].at.is_cuda == gpu]
        drop.update(mine[: max(len(mine) - most, 0)])
    _FREE[:] = [entry for entry in _FREE if id(entry) not in drop]


def give_back_memory() -> None:
    """Freed heap memory returned to the system (glibc's malloc_trim; elsewhere nothing)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:  # not glibc (macOS, Windows, musl without it)
        return None


_LIBC = _libc()
