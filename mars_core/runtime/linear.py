"""Linear layers on an x86 CPU through oneDNN with weights packed once, for inference, held by the runtime.

torch sends an fp32 `F.linear` to MKL's sgemm, which is slow for the few rows a decoding forward feeds and computes
one row with another kernel than several (its result for a row depends on how many rows travel with it). oneDNN
with each weight reordered once for it (as inductor's freezing pass does for bf16) is faster at every width on the
machines measured, makes width nearly free, and gives each row the same bits at every row count. bf16 runs oneDNN
already but reorders the weight on every call. (Numbers by machine: docs/speed.md#packed-linear-layers.)

    linears = pack_linears(model)          # the packed copies, by weight; the model itself is left as it was
    with LinearKernels(linears, rows=1):   # inside, every F.linear on a packed weight runs the packed kernel
        model(...)

On a CPU with AMX or AVX512-BF16, bf16 weights are packed for the rows kernel instead (runtime/rows.py,
kernels/rows.cpp): the weights stream from memory once a call, up to 16 rows (AMX) or 8 (AVX512-BF16) cost what one
costs, and each row's bits are its own at any row count.

Nothing is set on the model: inside LinearKernels, `F.linear` calls whose weight has a packed copy are answered from
it (routed_linear). Whether a copy answers a call is decided in one place per kernel: for oneDNN's copies here
(LinearKernels.serves), for the rows kernel's in C++ (kernels/rows.cpp `serving`, which the compiled graph and the
eager forward both call: pack_linears registers its copies there; with grad on, the op computes torch's linear and
has F.linear's gradients). Either way, with grad enabled (training), on another device or dtype, or once the
weight's version counter, storage or layout moved (an optimizer step, `copy_`, `.data = ...`), the call computes
F.linear as before; a weight changed by any route, `.data` writes included, is packed anew before the next decode
(runtime/watch.py).
"""

from __future__ import annotations

import platform
from contextvars import ContextVar, Token
from dataclasses import dataclass, replace
from itertools import accumulate

import torch
import torch.nn.functional as F
from torch import nn

from .block import Block, span
from .rows import rows_kernel
from .slots import give_back_memory
from .timing import fastest_seconds

BATCH_HINT = 16  # rows oneDNN packs the weight for (how it was chosen: docs/speed.md#packed-linear-layers)
PROBE_ROWS = 32  # rows one_row_differs compares alone and together (bf16 rounds most differences away)
# the most rows one packed call computes: oneDNN computes rows 2..32 alike and blocks more rows otherwise (bf16 with
# AMX: a row among 33 or more can take other bits), so wider inputs run as calls of at most this many rows
CHUNK_ROWS = 32
DTYPES = (torch.float32, torch.bfloat16)  # bf16 F.linear runs oneDNN already, but reorders W on every call
# the packed kernels: oneDNN's, and ours (the rows kernel) on CPUs with AMX or AVX512-BF16 (bf16 only)
ONEDNN, ROWS = "onednn_packed", "rows"


def packed_dtypes(ours: bool = True) -> tuple[torch.dtype, ...]:
    """The dtypes packed on this CPU: fp32 on any x86 CPU (oneDNN's), bf16 with oneDNN's bf16 kernels (AVX-512 or
    AVX-NE-CONVERT; on an AVX2-only CPU oneDNN refuses to reorder a bf16 weight) or, where `ours` allows it, where the
    rows kernel serves (it packs its own, AVX2 included)."""
    bf16 = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return tuple(d for d in DTYPES
                 if d is not torch.bfloat16 or (bf16 is not None and bf16()) or (ours and rows_kernel()))


def packing_pays(model: nn.Module, ours: bool = True) -> bool:
    """Whether pack_linears has work: an x86 CPU with oneDNN, a model on the CPU in a dtype packed there."""
    x86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")
    param = next(model.parameters(), None)
    return (x86 and torch.backends.mkldnn.is_available() and param is not None and param.device.type == "cpu"
            and param.dtype in packed_dtypes(ours))


# sibling layers that read the same input, packed as one matrix: one call (and one pass over the input) for their
# outputs, each the slice of its columns (fewer, wider calls: docs/speed.md#the-forward-compiled)
FUSED = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


class Fused:
    """The packed matrix of sibling layers: the first sibling called on an input computes every sibling's columns, the
    others read theirs (the input is the same object) from the forward's LinearKernels, which holds that one product
    until the forward ends (oneDNN's; a rows kernel matrix is registered with that kernel, whose op computes each
    sibling's own columns). The biases are the layers' own, read at each call (a bias changed in place is served)."""

    def __init__(self, packed: torch.Tensor, layers: tuple[nn.Linear, ...], shape: tuple, kernel: str = ONEDNN) -> None:
        self.packed, self.layers, self.shape, self.kernel = packed, layers, shape, kernel
        self.pair = False  # a lone row is fed as two (decided for its shape once every weight is probed)

    def bias(self) -> torch.Tensor | None:
        """The siblings' biases side by side, as they are now (None: the layers have none)."""
        if self.layers[0].bias is None:
            return None
        return torch.cat([lin.bias.detach() for lin in self.layers])

    def product(self, x: torch.Tensor) -> torch.Tensor:
        """x through the whole fused matrix: every sibling's columns."""
        return packed_rows(x, self.packed, self.bias(), self.pair)


@dataclass(frozen=True)
class Packed:
    """One weight's packed copy, and what it was packed from (a changed weight is never answered from it)."""

    weight: torch.Tensor  # the model's own weight (kept to check identity and its version)
    packed: torch.Tensor | None  # oneDNN's reordered copy (None: its columns of a fused matrix)
    version: int  # weight._version when packed
    ptr: int  # weight.data_ptr() when packed (another storage, as `.data = ...` or `.to()` gives: not served)
    pair: bool = False  # a lone row is fed beside a copy of itself (one_row_differs on this CPU)
    fused: Fused | None = None  # the matrix of it and its siblings, which answers it
    cols: slice | None = None  # its columns there
    kernel: str = ONEDNN  # the kernel it was packed for (ONEDNN or ROWS)


PackedLinears = dict[int, Packed]  # by id() of the weight


def version(w: torch.Tensor) -> int:
    """The weight's version counter (moved by every in-place update through autograd); -1 for an inference tensor,
    which has none (and cannot be updated in place outside inference mode)."""
    return -1 if w.is_inference() else w._version


def linear_kernel(dtype: torch.dtype, ours: bool = True) -> str:
    """The kernel a packed weight of this dtype runs: the rows kernel for bf16 where it serves (and `ours` allows
    it), oneDNN's otherwise."""
    return ROWS if ours and dtype == torch.bfloat16 and rows_kernel() else ONEDNN


def pack_linears(model: nn.Module, ours: bool = True, only: set[int] | None = None) -> PackedLinears:
    """Packed copies of every CPU nn.Linear weight of a packed dtype (a tied lm_head included), sibling layers that
    read the same input as one matrix (FUSED), each for the kernel linear_kernel picks (ours=False: oneDNN's); {}
    where packing does not apply (packing_pays) or this torch build lacks the oneDNN ops. only: just the layers (and
    their siblings) whose weight has one of these ids (runtime/watch.py repacks what changed). The rows kernel's
    copies lie in one block and are registered with it (rows_in_one_block): its ops answer from them; a repack's
    (`only`) are placed and registered by its caller, beside the rest."""
    if not packing_pays(model, ours):
        return {}
    found, pairs = {}, {}  # found: id(weight) -> (weight, copy or fused, columns, shape)
    try:
        with torch.no_grad():
            for layers in linear_groups(model):
                if only is not None and not any(id(lin.weight) in only for lin in layers):
                    continue
                if len(layers) > 1:
                    found.update(_fused(layers, pairs, ours))
                    continue
                w = layers[0].weight
                kernel = linear_kernel(w.dtype, ours)
                copy = _reorder(w, kernel)
                found[id(w)] = (w, copy, None, _probe(pairs, copy, w, kernel))
    except (AttributeError, RuntimeError):  # a torch build without these oneDNN ops
        return {}
    for fused in {id(f): f for _, f, cols, _ in found.values() if cols is not None}.values():
        fused.pair = pairs[fused.shape]
    linears = {key: Packed(w, None, version(w), w.data_ptr(), pairs[shape], what, cols, what.kernel)
               if cols is not None else Packed(w, what, version(w), w.data_ptr(), pairs[shape], kernel=shape[-1])
               for key, (w, what, cols, shape) in found.items()}
    del found
    if only is None:  # a repack's copies join the rest there (watch._repack), which registers them
        rows_in_one_block(linears)
    return linears


def rows_in_one_block(linears: PackedLinears) -> None:
    """The rows kernel's copies in `linears` moved, in place, into one new Block in linears' order (pack_linears':
    linear_groups', the model's modules' and so a forward's; one stream a forward, on 2 MB pages where Linux gives
    them: runtime/block.py), each old copy freed as soon as it is moved (the memory given back to the system after),
    then registered with the kernel. watch.py calls it again after a repack, so the copies packed anew join the rest
    and the old block is freed."""
    keys = [k for k, e in linears.items() if e.kernel == ROWS]
    fused = {id(linears[k].fused): linears[k].fused for k in keys if linears[k].fused is not None}
    block = Block(sum(span(f.packed) for f in fused.values()) +
                  sum(span(linears[k].packed) for k in keys if linears[k].fused is None))
    for k in keys:
        e = linears[k]
        if e.fused is None:
            linears[k] = replace(e, packed=block.hold(e.packed))
        elif fused.pop(id(e.fused), None) is not None:  # its siblings share it: moved once, with the first of them
            e.fused.packed = block.hold(e.fused.packed)
        del e
    give_back_memory()
    register_rows(linears)


def packed_bits(linears: PackedLinears) -> int:
    """The bits a weight of the rows kernel's copies: 8 where any is an int8 copy (runtime/grid.py), else 16."""
    copies = (e.fused.packed if e.fused is not None else e.packed for e in list(linears.values()) if e.kernel == ROWS)
    return 8 if any(c.dtype == torch.int8 for c in copies) else 16


def linear_groups(model: nn.Module) -> list[tuple[nn.Linear, ...]]:
    """The model's packable linear layers as pack_linears packs them: siblings that read one input together (FUSED:
    same in-features, all with or all without a bias), every other layer alone, each weight once."""
    dtypes, groups, seen = packed_dtypes(), [], set()
    for module in model.modules():
        for names in FUSED:
            layers = tuple(module._modules.get(n) for n in names)
            if all(_packable(lin, dtypes) for lin in layers) and len(
                    {(lin.in_features, lin.bias is None) for lin in layers}) == 1:
                groups.append(layers)
                seen.update(id(lin.weight) for lin in layers)
        w = getattr(module, "weight", None)
        if _packable(module, dtypes) and id(w) not in seen:
            groups.append((module,))
            seen.add(id(w))
    return groups


def _packable(module: nn.Module | None, dtypes: tuple[torch.dtype, ...]) -> bool:
    """An nn.Linear on the CPU in a dtype oneDNN packs here."""
    return type(module) is nn.Linear and module.weight.device.type == "cpu" and module.weight.dtype in dtypes


def _reorder(w: torch.Tensor, kernel: str = ONEDNN) -> torch.Tensor:
    """w's packed copy for `kernel`."""
    if kernel == ROWS:
        return torch.ops.mars_rows.pack(w.detach())
    return torch.ops.mkldnn._reorder_linear_weight(w.detach(), BATCH_HINT)


def _probe(pairs: dict, copy: torch.Tensor, w: torch.Tensor, kernel: str = ONEDNN) -> tuple:
    """The weight's shape key (its output features first, its kernel last), probed for oneDNN's one-row difference
    unless a weight of that shape showed it already: the kernel oneDNN picks depends on the shape alone, but whether
    its one-row bits differ shows on some weights only, so each weight is probed until one of its shape does
    (docs/speed.md#packed-linear-layers). The rows kernel computes a row alike at every row count: never probed."""
    key = (*w.shape, w.dtype, kernel)
    if not pairs.get(key):
        pairs[key] = kernel == ONEDNN and one_row_differs(copy, w.shape[1], w.dtype)
    return key


def _fused(layers: tuple[nn.Linear, ...], pairs: dict, ours: bool = True) -> dict:
    """Sibling layers as one packed matrix: each layer found as its columns of it."""
    weight = torch.cat([lin.weight.detach() for lin in layers])
    kernel = linear_kernel(weight.dtype, ours)
    copy = _reorder(weight, kernel)
    fused = Fused(copy, layers, _probe(pairs, copy, weight, kernel), kernel)
    bounds = [0, *accumulate(lin.out_features for lin in layers)]
    return {id(lin.weight): (lin.weight, fused, slice(a, b), fused.shape)
            for lin, a, b in zip(layers, bounds, bounds[1:])}


_ROWS_AUTOGRAD: list[bool] = []  # mars_rows::routed's autograd formula registered (once a process)


def register_rows(linears: PackedLinears) -> None:
    """The rows kernel's packed copies registered with it (kernels/rows.cpp, by the weight's data pointer): its ops
    (mars_rows::routed, routed_siblings) find a weight's copy there, decide whether it answers the call and compute it,
    for the compiled graph and the eager forward alike; a weight registered again replaces its entry."""
    if any(e.kernel == ROWS for e in linears.values()) and not _ROWS_AUTOGRAD:
        # gradients where an eager forward with grad on reaches the op (it computes torch's linear then): F.linear's
        torch.library.register_autograd("mars_rows::routed", _linear_backward, setup_context=_linear_context)
        _ROWS_AUTOGRAD.append(True)
    for e in linears.values():
        if e.kernel != ROWS:
            continue
        if e.fused is None:
            torch.ops.mars_rows.register(e.weight, e.packed, e.weight.shape[0], 0, e.weight.shape[0])
        else:
            torch.ops.mars_rows.register(e.weight, e.fused.packed, e.fused.shape[0], e.cols.start, e.cols.stop)


def one_row_differs(packed: torch.Tensor, inputs: int, dtype: torch.dtype) -> bool:
    """Whether oneDNN gives a row fed alone other bits than the same row fed beside another, for this packed weight
    on this CPU (an AMD EPYC with AVX512-BF16 does at 1536 inputs, in fp32 and bf16; no shape of the embedded model
    does on an AVX2-only EPYC)."""
    x = torch.randn(PROBE_ROWS, inputs, generator=torch.Generator().manual_seed(0)).to(dtype)
    return not torch.equal(torch.cat([pointwise(row[None], packed) for row in x]), pointwise(x, packed))


def pointwise(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """oneDNN's x W^T + b over a packed W, as it comes (no pairing)."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def packed_linear(x: torch.Tensor, entry: Packed, bias: torch.Tensor | None,
                  kernels: LinearKernels | None = None) -> torch.Tensor:
    """y = x W^T + b from oneDNN's packed W, unchecked (the rows kernel's copies answer through its own op,
    mars_rows::routed; a fused matrix's columns where the layer has siblings: the product
    the forward's `kernels` computed last for this input and matrix, else computed now)."""
    if entry.fused is None:
        return packed_rows(x, entry.packed, bias, entry.pair)
    product = kernels.product(x, entry.fused) if kernels is not None else entry.fused.product(x)
    return product[..., entry.cols].contiguous()


def packed_rows(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, pair: bool) -> torch.Tensor:
    """x W^T + b over a W oneDNN packed, in calls of at most CHUNK_ROWS rows, so a row's bits do not depend on how
    many rows share its forward
    (docs/speed.md#one-decoder); where this CPU's oneDNN kernel for one row differs from its kernel for two (pair), a
    lone row is fed beside a copy of itself; two rows cost about 10% more than one in that layer
    (docs/speed.md#packed-linear-layers)."""
    rows = x.numel() // x.shape[-1]
    if rows > CHUNK_ROWS:
        flat = x.reshape(rows, -1)
        parts = [packed_rows(flat[i : i + CHUNK_ROWS], packed, bias, pair) for i in range(0, rows, CHUNK_ROWS)]
        return torch.cat(parts).view(*x.shape[:-1], -1)
    if pair and rows == 1:
        two = x.reshape(1, -1).expand(2, -1).contiguous()
        return pointwise(two, packed, bias)[:1].view(*x.shape[:-1], -1)
    return pointwise(x, packed, bias)


_TORCH_LINEAR = F.linear  # torch's own, which every call that a runtime does not route goes to
_ACTIVE: ContextVar[LinearKernels | None] = ContextVar("mars_linear_kernels", default=None)


# routed_linear as one op of a compiled graph: the compiler fuses the work around it, never into it, so a row's bits
# are the runtime's kernel's, as in an eager forward (runtime/compiled.py). A plain library op: torch.library's
# custom_op wrapper costs several microseconds a call more, and a forward makes a hundred of these calls.
OPS = torch.library.Library("mars", "FRAGMENT")
OPS.define("linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor")
OPS.impl("linear", lambda x, weight, bias: routed_linear(x, weight, bias), "CompositeExplicitAutograd")
torch.library.register_fake("mars::linear", lambda x, weight, bias: x.new_empty(*x.shape[:-1], weight.shape[0]))


def _linear_context(ctx, inputs: tuple, output: torch.Tensor) -> None:
    ctx.save_for_backward(inputs[0], inputs[1])
    ctx.bias = inputs[2] is not None


def _linear_backward(ctx, grad: torch.Tensor) -> tuple:
    """y = x W^T + b: dx = dy W, dW = dy^T x (over every row), db = the sum of dy over every row."""
    x, weight = ctx.saved_tensors
    rows = grad.reshape(-1, grad.shape[-1])
    return (grad @ weight, rows.t() @ x.reshape(-1, x.shape[-1]), rows.sum(0) if ctx.bias else None)


# gradients through the op, wherever a graph that holds it is run with grad on (routed_linear traces torch's own
# linear where grad is on, so this is a second line)
torch.library.register_autograd("mars::linear", _linear_backward, setup_context=_linear_context)


def routed_linear(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear, answered from a packed copy when the LinearKernels active in this context serve the call (traced by
    the compiler: the op that decides so when the graph runs)."""
    # dynamo's own flag, True only inside its trace: is_compiling() is one flag for the whole process, which another
    # thread's compile sets while this one runs eagerly (the op then called itself without end). A trace with grad on
    # (a compiled training step) gets torch's own linear: the op serves inference, and dynamo guards on grad mode
    if torch.compiler.is_dynamo_compiling():
        if torch.is_grad_enabled():
            return _TORCH_LINEAR(input, weight, bias)
        return torch.ops.mars.linear(input, weight, bias)
    kernels = _ACTIVE.get()
    entry = kernels.serves(input, weight) if kernels is not None else None
    if entry is None:
        return _TORCH_LINEAR(input, weight, bias)
    if entry.kernel == ROWS:  # the rows kernel decides and computes (its copy, else torch's linear), as compiled
        return torch.ops.mars_rows.routed(input, weight, bias)
    return packed_linear(input, entry, bias, kernels)


class LinearKernels:
    """Inside this context, F.linear on a weight with a packed copy runs the packed kernel for inputs of at least
    `rows` rows (fewer: torch's own kernel; the rows kernel serves every row count), unless grad is on, the input is
    elsewhere or of another dtype, or the weight changed since packing. Entering routes `torch.nn.functional.linear`
    (which nn.Linear calls) through routed_linear, once per process: every call outside such a context, in this
    thread or another, goes to torch's own as before. (A TorchFunctionMode would route it too, but it sees every op
    of the forward, which cost more than packing saves.)"""

    def __init__(self, linears: PackedLinears, rows: int = 1):
        self.linears, self.rows = linears, rows
        self._tokens: list[Token] = []
        self._by_storage: dict[int, Packed] | None = None
        self._last: tuple[Fused, torch.Tensor, torch.Tensor] | None = None  # (matrix, input, product): this context's

    def product(self, x: torch.Tensor, fused: Fused) -> torch.Tensor:
        """x through a fused matrix, computed once for its siblings: the last product is kept until the next one or
        the context's end (a forward's), never beyond it."""
        last = self._last
        if last is None or last[0] is not fused or last[1] is not x:
            last = self._last = (fused, x, fused.product(x))
        return last[2]

    def by_storage(self) -> dict[int, Packed]:
        """The packed copies by their weight's data pointer (made on first use)."""
        if self._by_storage is None:  # a copy of the dict first: watch.refresh may change it in another thread
            self._by_storage = {e.ptr: e for e in self.linears.copy().values()}
        return self._by_storage

    def serves(self, x: torch.Tensor, w: torch.Tensor) -> Packed | None:
        """The packed copy that answers x W^T, or None (torch's kernel answers); a rows kernel copy is returned as
        found: that kernel's op decides (rows.cpp). A compiled graph may hand the op an alias of the weight (the same
        storage): it is served by its storage."""
        entry = self.linears.get(id(w))
        if entry is None and w.device.type == "cpu":
            entry = self.by_storage().get(w.data_ptr())
        if entry is not None and entry.kernel == ROWS:
            return entry
        if (entry is None or entry.ptr != w.data_ptr() or torch.is_grad_enabled() or x.device.type != "cpu"
                or x.dtype != w.dtype or version(w) != entry.version or x.numel() < self.rows * x.shape[-1]):
            return None
        return entry

    def __enter__(self) -> LinearKernels:
        if F.linear is not routed_linear:
            F.linear = routed_linear
        self._tokens.append(_ACTIVE.set(self))
        return self

    def __exit__(self, *exc: object) -> None:
        _ACTIVE.reset(self._tokens.pop())
        if not self._tokens:
            self._last = None


ROW_COUNTS = (1, 2, 3, 4, 6, 8)  # row counts fewest_packed_rows times both kernels at


@torch.inference_mode()
def kernel_seconds(linears: PackedLinears, rows: tuple[int, ...] = ROW_COUNTS, rounds: int = 5
                   ) -> dict[str, list[float]]:
    """Seconds of one pass over every packed layer, each fed r rows as a forward feeds them (so the weights stream
    from memory as they do there), with torch's F.linear and with oneDNN's packed weight, by r in rows (the rows
    kernel's copies serve from one row: not timed)."""
    entries = [e for e in linears.values() if e.kernel == ONEDNN]
    gen = torch.Generator().manual_seed(0)
    inputs = {r: [torch.randn(r, e.weight.shape[1], generator=gen).to(e.weight.dtype) for e in entries] for r in rows}
    kernels = {"torch": lambda e, x: F.linear(x, e.weight), "packed": lambda e, x: packed_linear(x, e, None)}
    return {name: [fastest_seconds(lambda: [run(e, x) for e, x in zip(entries, inputs[r])], rounds) for r in rows]
            for name, run in kernels.items()}


def fewest_packed_rows(linears: PackedLinears, rows: tuple[int, ...] = ROW_COUNTS, rounds: int = 5) -> int:
    """The fewest rows R from which the packed kernel is at least as fast as torch's at every count timed: the
    fastest choice by rows, when one kernel for every width is not asked for (what it picks by machine:
    docs/speed.md#packed-linear-layers)."""
    if not any(e.kernel == ONEDNN for e in linears.values()):
        return 1
    seconds = kernel_seconds(linears, rows, rounds)
    wins = [p <= t for p, t in zip(seconds["packed"], seconds["torch"])]
    first = next((i for i in range(len(rows)) if all(wins[i:])), len(rows))
    return rows[first] if first < len(rows) else rows[-1] + 1
