"""The runtime: how this machine runs a model's forwards, decided once and passed to every decoder.

It holds the machine-facing decisions: which linear kernel answers how many rows (oneDNN-packed weights, or torch's),
whether attention runs row by row so that a row's numbers do not depend on the forward's width, what a forward costs
by width (the curve verified decoding sizes its trees by), and what was checked on this machine. Nothing of it is set
on the model: a decoder enters `runtime.active()` around each forward.

    runtime = prepare(model)        # packs, checks width invariance, measures the cost curve (kept on disk)
    generate(model, tokenizer, "Hi", strategy="verified", runtime=runtime)

`Runtime()` is plain: the model's own kernels, no cost curve (verified decoding uses its fixed rules), nothing
promised.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..machine import machine_info
from .attention import kernel_attention
from .curve import CostCurve
from .engine import Engine
from .linear import CHUNK_ROWS, ONEDNN, ROWS, LinearKernels, PackedLinears, packed_bits
from .rows import build_id, flavor
from .slots import KEY_ROUND

Make = tuple  # make_of's answer: compared with ==, hashed by make_key


@dataclass
class Watch:
    """What a prepared runtime's copies were made from: the model's make and each packed weight's digest."""

    make: Make | None = None  # watch.make_of(model) when prepared (None: nothing to watch, as for a plain Runtime())
    digests: dict[int, int] = field(default_factory=dict)  # id(weight) -> watch.digest() of its bytes when packed
    packs: bool = False  # the runtime packs linear layers (prepare(pack=True) on a CPU where packing pays)
    changed: str | None = None  # why the width check no longer speaks for the model (None: it does)
    groups: list = field(default_factory=list, repr=False)  # linear.linear_groups(model) for the make `grouped`
    grouped: Make | None = None  # the make those groups were found in (another make: found again)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


@dataclass(frozen=True)
class WidthCheck:
    """A width-k forward against k one-token forwards, same model, machine and kernels: rows compared, and rows whose
    logits or cache entries differ in any bit (0: width-invariant, so verified decoding is one-token decoding)."""

    widths: tuple[int, ...]  # the widths fed at once
    batch: int  # samples per forward
    rows: int  # rows compared, over every width
    differing: int  # rows whose logits or keys/values differ in any bit from the one-token forward's
    max_abs: float  # the largest difference in a logit
    slots: tuple[int, ...] = ()  # the cache lengths fed at (a static runtime's rows read every slot)
    prefill_masks: int = 0  # masks fed after the context in the batched prefill (verified's G_0), against none alone

    @property
    def identical(self) -> bool:
        return self.rows > 0 and self.differing == 0

    def covers(self, widths: tuple[int, ...], prefill_masks: int) -> bool:
        """Whether it compared every one of these widths, and the prefill as asked (a kept check of fewer: again)."""
        return set(widths) <= set(self.widths) and self.prefill_masks == prefill_masks and bool(self.slots)

    def to_dict(self) -> dict[str, Any]:
        return {"widths": list(self.widths), "batch": self.batch, "rows": self.rows, "differing": self.differing,
                "max_abs": self.max_abs, "slots": list(self.slots), "prefill_masks": self.prefill_masks}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WidthCheck:
        return cls(tuple(d["widths"]), int(d["batch"]), int(d["rows"]), int(d["differing"]), float(d["max_abs"]),
                   tuple(d.get("slots", ())), int(d.get("prefill_masks", 0)))


@dataclass(frozen=True)
class Runtime:
    """How forwards run on this machine (see the module's docstring); build it with prepare(model)."""

    linears: PackedLinears = field(default_factory=dict, repr=False, compare=False)  # packed weights, by weight
    packed_from: int = 1  # a packed layer answers inputs of at least this many rows (fewer: torch's kernel)
    rows: bool = False  # attention row by row: a row's numbers do not depend on the forward's width
    # a row's attention in an SDPA call of its own (where one call's rows came out with other bits than alone: prepare)
    units_alone: bool = False
    cost: CostCurve | None = None  # seconds of a forward by batch and width; None: verified's fixed rules
    live_cost: bool = False  # verified re-prices width by its own timed forwards (CPU; decoding/verified/pace.py)
    width_check: WidthCheck | None = None  # what a check on this machine found (None: not checked)
    static: bool = False  # fixed widths, every row reading the whole cache: the shapes CUDA graphs capture
    compiled: Callable | None = field(default=None, repr=False, compare=False)  # compiled.CompiledDecoder
    forward_note: str = "uncompiled"  # what runs the forward, in words for a page (compiled.compile_runtime says)
    # what the copies above were made from, checked before every decode (watch.refresh); shared by the runtimes that
    # replace() makes of one prepared runtime
    watch: Watch = field(default_factory=Watch, repr=False, compare=False)

    @property
    def entries(self) -> list:
        """The packed copies now, taken at once (a list made in one C call, the GIL held): another thread's decode may
        repack the model meanwhile (watch.refresh adds and drops entries of `linears` in place)."""
        return list(self.linears.values())

    @property
    def rows_linears(self) -> bool:
        """Whether linear layers run on the rows kernel (packed for it only where it serves)."""
        return any(e.kernel == ROWS for e in self.entries)

    @property
    def fed_rows_only(self) -> bool:
        """Whether a forward's linear layers compute only the rows it feeds (those on the rows kernel, every one prepare
        packs for it, told the rows where attention runs by rows: runtime/forward.py, rows.feeding): a finished
        sample's rows then cost no product there."""
        return self.rows and self.rows_linears

    @property
    def invariant(self) -> bool:
        """Checked width-invariant on this machine, for the model as it was checked: verified decoding gives one-token
        decoding's answer bit for bit."""
        return self.width_check is not None and self.width_check.identical and self.watch.changed is None

    def forward_key(self) -> tuple:
        """What makes this runtime's forward (its linear kernels, attention by rows or a call a row, static shapes,
        the compiled forward serving or not): the key of a CUDA graph captured over it (runtime/graphs.py), never an
        object's id, so a runtime made anew with the same kernels replays the graphs already captured."""
        kernels = tuple(sorted({str(entry.kernel) for entry in self.entries}))
        compiled = self.compiled is not None and bool(getattr(self.compiled, "serves", True))
        return kernels, self.packed_from, self.rows, self.units_alone, self.static, compiled

    @contextmanager
    def active(self) -> Iterator[None]:
        """Run the forwards inside with this runtime's linear kernels (attention by rows is the forward's: it needs the
        cache's key plan, runtime/forward.py)."""
        with ExitStack() as stack:
            if self.linears:
                stack.enter_context(LinearKernels(self.linears, self.packed_from))
            yield

    def record(self, model: torch.nn.Module | Engine) -> dict[str, Any]:
        """Where and how a measurement under this runtime runs: the machine record and the kernels chosen (an Engine:
        its own record)."""
        if isinstance(model, Engine):
            return model.record()
        paired = any(entry.pair for entry in self.entries)  # a lone row fed as two: other bits, other speed
        kernels = {entry.kernel for entry in self.entries}
        # the rows kernel (a model's bf16 layers) by its flavor: amx_rows, avx512_bf16_rows, avx512_rows or avx2_rows
        linear = (f"{flavor()}_rows" if ROWS in kernels else ONEDNN) if kernels else "torch"
        attention = self.attention(model)
        # which build of the rows kernel answers (its bits and speed are that source's), where it serves
        build = {"rows_build": build_id()} if ROWS in kernels or attention == "rows_kernel" else {}
        bits = {"weight_bits": packed_bits(self.linears)} if ROWS in kernels else {}  # int8 copies: other bytes
        return {**machine_info(model.device, model.dtype), "linear": linear, **build, **bits,
                "packed_from_rows": self.packed_from if self.linears else 0,
                **({"one_row": "fed as two"} if paired else {}),
                "rows_per_call": CHUNK_ROWS if ONEDNN in kernels else 0,
                **({"fused": "siblings as one matrix"} if any(e.fused for e in self.entries) else {}),
                "attention": attention, "cache": "slots",
                "forward": "inductor" if self.compiled is not None else "eager",
                "keys": "whole cache" if self.static else f"slot rounded to {KEY_ROUND}"}

    def attention(self, model: torch.nn.Module) -> str:
        """How attention runs: by rows in the rows kernel (rows_kernel) or SDPA unit by unit (rows; "rows, a call
        each": each row's unit an SDPA call of its own), or SDPA."""
        if not self.rows:
            return "sdpa"
        config = model.config
        head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        query = torch.empty(0, head, device=model.device, dtype=model.dtype)  # what the kernel is asked about
        if kernel_attention(query):
            return "rows_kernel"
        return "rows, a call each" if self.units_alone else "rows"

    def key(self, model: torch.nn.Module | Engine) -> str:
        """What a measurement under this runtime depends on: the machine, the kernels, the dtype, the model's shape."""
        shape = {k: getattr(model.config, k, None) for k in ("model_type", "hidden_size", "intermediate_size",
                                                              "num_hidden_layers", "num_attention_heads",
                                                              "num_key_value_heads", "vocab_size")}
        shape["attn"] = getattr(model.config, "_attn_implementation", None)
        return hashlib.sha256(json.dumps([self.record(model), shape, code_digest()], sort_keys=True).encode()
                              ).hexdigest()[:16]

    def guarantee(self) -> str:
        """What verified decoding promises under this runtime, in words for a page."""
        check = self.width_check
        if self.watch.changed is not None and check is not None:
            return (f"identical to one-token decoding up to rounding ({self.watch.changed}; width invariance not "
                    "checked)")
        if check is None:
            return "identical to one-token decoding up to rounding (width invariance not checked on this machine)"
        if check.identical:
            return "identical to one-token decoding"
        return (f"identical to one-token decoding up to rounding: {check.differing} of {check.rows} rows differed "
                "in the width check on this machine")


@functools.cache
def code_digest() -> str:
    """The code a forward runs beyond torch and the rows kernel's build (both in Runtime.record): this folder's modules
    and mars_core/attention.py as parsed (an edited comment changes nothing), and transformers' version. In
    Runtime.key, so a width check, cost curve or compiled graph kept on disk speaks for the code that took it, not
    for the code an upgrade brought (the model's make leaves transformers' version out: its config's is the
    checkpoint's)."""
    import transformers

    here = Path(__file__).parent
    digest = hashlib.sha256(transformers.__version__.encode())
    for path in [*sorted(here.glob("*.py")), here.parent / "attention.py"]:  # the masks every forward is given too
        digest.update(path.name.encode() + ast.dump(ast.parse(path.read_text())).encode())  # code, not comments
    return digest.hexdigest()[:16]
