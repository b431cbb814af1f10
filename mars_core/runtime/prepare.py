"""prepare(model): the runtime for serving a model on this machine, its decisions measured once and kept.

One pipeline, read top to bottom: pack (the linear layers' copies for this CPU's kernels), check (width invariance:
runtime/invariance.py; where attention's SDPA units fail it, a call a row), time (the cost curve: runtime/cost.py),
keep (every measurement through timing.kept, by what it depends on: Runtime.key), stamp (what the copies were made
from: runtime/watch.py). An Engine (llama.cpp) runs the same steps on its own forward; it has nothing to pack.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from dataclasses import replace
from pathlib import Path

import torch

from .attention import ATTENTION
from .cost import forward_cost
from .engine import Engine
from .invariance import width_check
from .linear import fewest_packed_rows, pack_linears
from .runtime import Runtime
from .timing import cache_root, kept
from .watch import stamp


def prepare(model: torch.nn.Module | Engine, *, invariant: bool = True, pack: bool = True, check: bool = True,
            measure_cost: bool = True, static: bool | None = None, cache_dir: str | Path | None = None) -> Runtime:
    """The runtime for serving `model` on this machine (inference only; training uses none).

    pack: on an x86 CPU, run fp32 and bf16 linear layers through oneDNN with weights packed once (runtime.linear).
    invariant: one kernel for every width (packed from one row, attention row by row for models with the "mars"
    attention that load() gives), so a row's numbers do not depend on how many rows share its forward and verified
    decoding is one-token decoding bit for bit; False: the fastest kernel by rows, timed once (numbers may then
    differ in the last bits between widths). check: run the width check on this model (runtime.invariance), whose
    verdict the app and the README state. measure_cost: time forwards by width under these kernels (runtime.cost).
    static: fixed widths, every row reading the whole cache, CUDA graphs on a GPU (docs/speed.md#static-shapes);
    None (the default): on a GPU, where it measured 1.9-3.5x faster than the dynamic path, off elsewhere.
    Each measurement is kept under cache_dir (default: cache_root()/forward_cost) by machine, kernels and model
    shape."""
    folder = Path(cache_dir) if cache_dir is not None else cache_root() / "forward_cost"
    runtime = packed(model, invariant=invariant, pack=pack, static=static, cache_dir=folder)
    if check:
        runtime = checked(model, runtime, folder)
    if measure_cost:
        runtime = replace(runtime, cost=forward_cost(model, runtime, folder))
    if not isinstance(model, Engine):
        stamp(model, runtime)  # what the copies were made from: checked before every decode (watch.refresh)
    return runtime


def packed(model: torch.nn.Module | Engine, *, invariant: bool, pack: bool, static: bool | None,
           cache_dir: Path) -> Runtime:
    """The runtime's kernels, before anything is measured: the packed linear layers (where not invariant, packed only
    from the row count kept_rows times), attention by rows, static shapes; an Engine's runtime re-prices widths as
    it decodes (Engine.live_cost)."""
    if isinstance(model, Engine):
        return Runtime(live_cost=model.live_cost)
    static = model.device.type == "cuda" if static is None else static
    rows = invariant and getattr(model.config, "_attn_implementation", None) == ATTENTION
    runtime = Runtime(linears=pack_linears(model) if pack else {}, rows=rows, static=static)
    if runtime.linears and not invariant:
        runtime = replace(runtime, packed_from=kept_rows(model, runtime, cache_dir))
    return runtime


def checked(model: torch.nn.Module | Engine, runtime: Runtime, cache_dir: Path) -> Runtime:
    """The runtime with its width check (runtime/invariance.py, kept). Where attention by SDPA units fails it on this
    machine (seen on an AMD EPYC with AVX2, Zen 3, 2 threads: a unit's bits depended on how many units shared its
    SDPA call, as they do not with MKL_NUM_THREADS=1), each row's unit as an SDPA call of its own, where that
    passes."""
    runtime = replace(runtime, width_check=width_check(model, runtime, cache_dir))
    if runtime.width_check.identical or isinstance(model, Engine) or runtime.attention(model) != "rows":
        return runtime
    alone = replace(runtime, units_alone=True)
    alone = replace(alone, width_check=width_check(model, alone, cache_dir))
    return alone if alone.width_check.identical else runtime


def kept_rows(model: torch.nn.Module, runtime: Runtime, cache_dir: Path | None) -> int:
    """The fewest rows from which the packed kernel is as fast as torch's on this machine (linear.fewest_packed_rows),
    kept in cache_dir/kernels-<key>.json (timing.kept)."""
    path = cache_dir / f"kernels-{runtime.key(model)}.json" if cache_dir is not None else None
    return kept(path, _packed_from, lambda: fewest_packed_rows(runtime.linears),
                lambda rows: {"packed_from": rows, "machine": runtime.record(model)})


def _packed_from(value: dict) -> int:
    """The kept row count (ValueError where the file holds none)."""
    rows = value.get("packed_from")
    if not isinstance(rows, int):
        raise ValueError(f"no row count kept: {value}")
    return rows


_PREPARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its runtime, this process's
_PREPARING = threading.Lock()


def prepared(model: torch.nn.Module | Engine) -> Runtime:
    """The runtime every entry point decodes under when it is given none: prepare(model), made once per model in a
    process and its measurements kept on disk, so verified decoding is one-token decoding wherever the width check
    passes. A model whose check fails is said so once, as a warning. Plain torch, without
    that promise, is runtime=Runtime()."""
    with _PREPARING:
        runtime = _PREPARED.get(model)
        if runtime is None:
            runtime = prepare(model)
            _PREPARED[model] = runtime
            if runtime.width_check is not None and not runtime.width_check.identical:
                warnings.warn(f"verified decoding on this machine: {runtime.guarantee()}", stacklevel=4)
    return runtime
