"""What the runtime keeps beside a model (packed copies of its linear weights, a compiled graph built for its
parameters' shapes) kept true to the model as it is now, checked at the start of every decode.

A write in place can pass every signal torch gives: `w.data.neg_()` or peft's merge (`weight.data += delta`) moves no
version counter and keeps the storage. So refresh() reads what the runtime holds copies of, once per decode
(decoding/feed.py), before its first forward: a 64-bit xxh3 digest of each packed weight's bytes against the one taken
when it was packed (one pass over those weights, torch's threads reading parts of it at once: digests(); its cost by
machine: docs/speed.md#what-the-runtime-keeps-is-checked).
A weight changed by any route (`.data`, `copy_`, a peft merge, an optimizer step, `load_state_dict`) is packed anew,
its siblings with it; a layer swapped in is packed, one gone is dropped. Within a decode, a write that moves the
version counter or the storage (an optimizer step, `copy_`, `.data = ...`) is served by torch's own kernel from the
next forward (linear.LinearKernels.serves); biases are always read from the model (never copied).

A model whose make changed (make_of: modules swapped, parameters resized, another dtype, device or mode) no longer
runs the compiled graph, which was built for the old one: the decode runs uncompiled, and the width check, taken on the
old make, no longer speaks for it (Runtime.guarantee says so) until the model is prepared again.
"""

from __future__ import annotations

import functools
import hashlib
import warnings
from concurrent.futures import ThreadPoolExecutor

import torch
import xxhash

from .linear import linear_groups, pack_linears, packing_pays, register_rows, rows_in_one_block, version
from .runtime import Make, Runtime


def digest(w: torch.Tensor) -> int:
    """A 64-bit xxh3 of a CPU tensor's bytes: any change of any value changes it (but for a 2^-64 chance)."""
    data = w.detach()
    if not data.is_contiguous():
        data = data.contiguous()
    return xxhash.xxh3_64_intdigest(data.view(torch.uint8).reshape(-1).numpy())


def digests(weights: list[torch.Tensor]) -> list[int]:
    """digest() of each weight, the list cut into runs of about equal bytes, one a thread of torch's (at most 4),
    hashed at once: xxh3 lets Python's lock go while it reads, and one thread alone draws not all the memory's speed."""
    parts = max(1, min(4, torch.get_num_threads(), len(weights)))
    if parts == 1:
        return [digest(w) for w in weights]
    runs = _cut(weights, parts)
    theirs = [_helpers(parts - 1).submit(lambda run: [digest(w) for w in run], run) for run in runs[1:]]
    mine = [digest(w) for w in runs[0]]
    return [*mine, *(h for f in theirs for h in f.result())]


@functools.cache
def _helpers(count: int) -> ThreadPoolExecutor:
    """`count` threads that hash beside the caller's (made once a count, idle between checks)."""
    return ThreadPoolExecutor(count, "mars-digest")


def _cut(weights: list[torch.Tensor], parts: int) -> list[list[torch.Tensor]]:
    """The weights in order, cut into `parts` runs of about equal bytes (a run may be empty)."""
    total, runs, seen = sum(w.nbytes for w in weights), [[] for _ in range(parts)], 0
    for w in weights:  # a weight joins the run its first byte falls in
        runs[min(parts - 1, seen * parts // max(total, 1))].append(w)
        seen += w.nbytes
    return runs


def make_of(model: torch.nn.Module) -> Make:
    """What a forward traced through the model takes from the model itself, beyond its weights' values: its modules'
    classes, hooks and own forwards, their plain attributes (train or eval mode, an epsilon, peft's merged adapters:
    a traced forward takes them as constants), its parameters' and buffers' names, shapes, strides, dtypes and
    devices, and its config (the checkpoint's name aside) with its attention. A few ms for a 135M model: refresh
    takes it before every decode."""
    config = {k: v for k, v in model.config.to_dict().items() if k not in ("_name_or_path", "transformers_version",
                                                                          "architectures", "_commit_hash")}
    config["attn"] = getattr(model.config, "_attn_implementation", None)  # to_dict() leaves it out
    tensors = tuple((n, t.shape, t.stride(), t.dtype, t.device)
                    for n, t in (*model.named_parameters(), *model.named_buffers()))
    modules = tuple((n, type(m), "forward" in m.__dict__, bool(m._forward_hooks or m._forward_pre_hooks),
                     _plain_attributes(m)) for n, m in model.named_modules())
    return repr(sorted(config.items())), tensors, modules


def make_key(make: Make) -> str:
    """A make as a short string (types named by repr: the same for the same code and model in every process, so a
    kept width check is named by it too)."""
    return hashlib.sha256(repr(make).encode()).hexdigest()


_SCALARS = frozenset((bool, int, float, str, type(None)))


def _plain_attributes(module: torch.nn.Module) -> tuple:
    """A module's attributes of plain values (numbers, strings, flags, and lists, tuples or dicts of them), by name,
    copied as they are now: a list changed in place later (peft's merged_adapters) must not change the make kept."""
    return tuple((k, _frozen(v)) for k, v in module.__dict__.items() if _plain(v))


def _frozen(value: object) -> object:
    """A plain value as an immutable copy (a list as a tuple, a dict as its sorted items)."""
    if type(value) is list:
        return ("list", tuple(value))
    if type(value) is dict:
        return ("dict", tuple(sorted(value.items())))
    return value


def _plain(value: object) -> bool:
    kind = type(value)
    if kind in _SCALARS:
        return True
    if kind is list or kind is tuple:
        return all(type(v) in _SCALARS for v in value)
    if kind is dict:
        return all(type(k) is str and type(v) in _SCALARS for k, v in value.items())
    return False


def stamp(model: torch.nn.Module, runtime: Runtime) -> None:
    """Take down what runtime's copies of model were made from (prepare() calls it once it has packed)."""
    watch = runtime.watch
    with watch.lock:
        watch.make = make_of(model)
        watch.packs = bool(runtime.linears)
        watch.digests = _digests_of(runtime.linears)


def refresh(model: torch.nn.Module, runtime: Runtime) -> None:
    """Before a decode: every packed copy answers as the model's weights are now (a changed weight packed anew, a new
    layer packed, a gone one dropped), and a model whose make changed is served uncompiled and said to be unchecked
    (the module's docstring)."""
    watch = runtime.watch
    if watch.make is None or not isinstance(model, torch.nn.Module):
        return
    with watch.lock:
        make = make_of(model)
        if runtime.compiled is not None:
            runtime.compiled.serves = make == runtime.compiled.make
        if make != watch.make and watch.changed is None:
            warnings.warn("the model changed since it was prepared (its modules, or its parameters' shapes, dtypes or "
                          "devices): it is served uncompiled and its width check no longer applies; prepare it again",
                          stacklevel=2)
        watch.changed = None if make == watch.make else "the model changed since it was prepared"
        if watch.packs:
            if make != watch.grouped:  # the layers as pack_linears groups them, found once a make
                watch.groups, watch.grouped = linear_groups(model) if packing_pays(model) else [], make
            _repack(model, runtime)


def _repack(model: torch.nn.Module, runtime: Runtime) -> None:
    """Pack anew the layers whose weight changed since packed (a sibling's change repacks its group), pack new ones,
    drop those the model no longer has; the rows kernel's copies then lie in one new block, registered anew
    (linear.rows_in_one_block). Registered anew even where nothing changed: the kernel holds one copy a weight for the
    whole process, and the decode about to run is served by this runtime's (two runtimes of one model decoding at
    once are each served by the copies registered last: the same bits wherever both are of the weights as they are
    now and of one kind of copy)."""
    linears, kept = runtime.linears, runtime.watch.digests
    weights = {id(lin.weight): lin.weight for layers in runtime.watch.groups for lin in layers}
    stale = {key for key, w in weights.items() if _moved(linears.get(key), w)}
    held = [key for key in weights if key not in stale]  # the same tensor, storage and version: are its bytes?
    stale |= {key for key, now in zip(held, digests([weights[key] for key in held])) if now != kept.get(key)}
    gone = [key for key in linears if key not in weights]
    if not stale and not gone:  # its copies answer: they serve (another runtime of the model may have registered its
        register_rows(linears)  # own with the rows kernel since, of weights that have changed back since)
        return
    fresh = pack_linears(model, only=stale) if stale else {}
    linears.update(fresh)
    for key in [*gone, *(stale - fresh.keys())]:  # gone, or changed and not packed again: no copy answers for it
        linears.pop(key, None)
        kept.pop(key, None)
    kept.update(_digests_of(fresh))
    rows_in_one_block(linears)  # the copies packed anew join the rest in one block (the old one is freed); registered


def _digests_of(linears: dict) -> dict[int, int]:
    """Each packed entry's weight digest, by its key (digests(): one pass over them all)."""
    return dict(zip(linears, digests([e.weight for e in linears.values()])))


def _moved(entry, w: torch.Tensor) -> bool:
    """Whether w's packed copy (entry) no longer answers for it by what torch says: none, another tensor or storage, or
    its version moved (the bytes are read after: _repack)."""
    return entry is None or entry.weight is not w or entry.ptr != w.data_ptr() or entry.version != version(w)
