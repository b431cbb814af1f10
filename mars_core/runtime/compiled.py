"""The served forward compiled: torch.compile (inductor) of the model's decoder, one graph for every width, batch and
cache length, its artifacts kept on disk, its bits checked before it serves.

The runtime's kernels stay ops of their own (mars::linear, mars::attention): the compiler fuses what lies between them
(norms, rotary embeddings, activations, residual adds, the cache writes) into a few C++ loops and leaves their bits
alone. Where the runtime's linears run the rows kernel (runtime/rows.py: AMX or AVX512-BF16), the graph calls that
kernel's C++ ops instead (mars_rows::routed, mars_rows::attention), so a forward does not return to Python between
layers.

Every size is symbolic and none is specialised, 1 included (backed_size_oblivious), so a row runs the same code at
every width and in every batch; specialised, width 1 got a graph of its own and every row then differed between
one-token and wider forwards (docs/speed.md#the-forward-compiled).

    runtime = compile_runtime(model, prepare(model))   # minutes the first time on 2 cores, seconds once kept
    runtime.compiled                                   # None where it could not compile or failed its check
    runtime.forward_note                               # what serves, in words for a page
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from ..machine import cxx_compiler
from .forward import symbolic_sizes
from .runtime import Runtime
from .timing import cache_root
from .watch import make_key, make_of

Progress = Callable[[str], None]  # told each stage: "compiling", "checking", "timing"


def compiler_missing(device: torch.device) -> str | None:
    """Why inductor cannot build its kernels for `device` here, or None: on a CPU it needs a C++ compiler at run
    time."""
    if device.type == "cpu" and cxx_compiler() is None:
        return "no C++ compiler on this machine (inductor builds its kernels with one)"
    return None


def _cache_misses() -> int:
    """Graphs compiled so far in this process that no kept artifact answered (AOTAutograd's cache missed, or was
    bypassed: a graph it cannot keep)."""
    from torch._dynamo.utils import counters

    return counters["aot_autograd"]["autograd_cache_miss"] + counters["aot_autograd"]["autograd_cache_bypass"]


def _load_artifacts(path: Path) -> bool:
    """Whether inductor's artifacts kept at path were loaded (a damaged file is compiled anew and replaced)."""
    if not path.is_file():
        return False
    try:
        return torch.compiler.load_cache_artifacts(path.read_bytes()) is not None  # None: it could not read them
    except Exception:  # noqa: BLE001 - any unreadable artifact means: compile anew
        return False


def _inductor_cache_beside_ours() -> None:
    """inductor's own cache (the kernels it built) under cache_root(), unless the user chose a folder for it: kept
    where MARS_CACHE is kept, so a warm start loads built kernels rather than build them again from the kept
    artifacts (docs/speed.md#the-forward-compiled). torch names its default folder as soon as it is imported, so that
    one counts as not chosen."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:  # another torch: leave inductor's cache where it is
        return
    chosen = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if chosen is None or os.path.abspath(chosen) == os.path.abspath(default_cache_dir()):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_root() / "inductor")


def _inductor_graph(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """inductor's compile of dynamo's graph, its own C++ loops (norms, rotary, activations, cache writes) run by one
    thread: a decoding forward's loops are a few rows each, and an OpenMP region a loop (several a layer) cost more
    to open and join than the work they split (docs/speed.md#the-forward-compiled).
    The runtime's kernels keep every thread. Its code checks no buffer's sizes and strides as it runs (one Python call
    each, hundreds a forward): dynamo's guards check the inputs', watch.refresh the model's make (watch.make_of),
    and our ops return contiguous tensors of the shapes their fakes say
    (docs/speed.md#the-forward-compiled)."""
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx

    with config.patch({"cpp.threads": 1, "size_asserts": False, "alignment_asserts": False}):
        return compile_fx(gm, example_inputs)


def _rows_graph(gm: torch.fx.GraphModule, example_inputs: list, attention: bool) -> Callable:
    """_inductor_graph with the runtime's ops swapped for the rows kernel's own (C++, no Python between layers):
    sibling layers (mars::linear calls on one input) for one mars_rows::routed_siblings call, which computes them as
    the one packed matrix they were fused into (runtime/linear.py: FUSED) and whose columns the graph reads as views;
    a lone mars::linear for mars_rows::routed (the packed copy found by the weight, registered beforehand); and where
    the runtime computes attention by rows, mars::attention for mars_rows::attention."""
    linear = {torch.ops.mars.linear, torch.ops.mars.linear.default}
    swap = {op: torch.ops.mars_rows.routed.default for op in linear}
    if attention:
        swap |= {torch.ops.mars.attention: torch.ops.mars_rows.attention.default, torch.ops.mars.attention.default:
                 torch.ops.mars_rows.attention.default}
    readers: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in linear:
            readers.setdefault(node.args[0], []).append(node)
    for siblings in (nodes for nodes in readers.values() if len(nodes) > 1):
        _as_siblings(gm.graph, siblings)
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in swap:
            node.target = swap[node.target]
    gm.graph.lint()
    gm.recompile()
    return _inductor_graph(gm, example_inputs)


def _as_siblings(graph: torch.fx.Graph, nodes: list[torch.fx.Node]) -> None:
    """mars::linear calls x W_i^T + b_i on one x as one mars_rows::routed_siblings call [..., sum of n_i] and a slice
    of its columns each (a view: inductor's next loops read it where it lies). Left as they are where a weight or
    bias is not an input of the graph (one computed in it could come after the first call). Each new node gets the
    example value dynamo gives its own (a fake tensor; without it the compiled artifacts could not be kept)."""
    x, weights, biases = nodes[0].args[0], [n.args[1] for n in nodes], [_bias(n) for n in nodes]
    inputs = [*weights, *(b for b in biases if b is not None)]
    if not all(isinstance(a, torch.fx.Node) and a.op == "placeholder" for a in inputs) or not all(
            "example_value" in a.meta for a in (x, *inputs)):
        return
    with graph.inserting_before(nodes[0]):
        both = graph.call_function(torch.ops.mars_rows.routed_siblings.default, (x, weights, biases))
        both.meta["example_value"] = both.target(*_examples(both.args))
        start = 0
        for node, weight in zip(nodes, weights):
            stop = start + weight.meta["example_value"].shape[0]
            view = graph.call_function(torch.ops.aten.slice.Tensor, (both, -1, start, stop))
            view.meta["example_value"] = both.meta["example_value"][..., start:stop]
            node.replace_all_uses_with(view)
            start = stop
    for node in nodes:
        graph.erase_node(node)


def _examples(args: tuple) -> tuple:
    """args with each node replaced by its example value (an op called on them runs its fake: the new node's own)."""
    return torch.fx.node.map_arg(args, lambda n: n.meta["example_value"])


def _bias(node: torch.fx.Node) -> torch.fx.Node | None:
    """A mars::linear call's bias argument (positional or by name)."""
    return node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")


def _backend(runtime: Runtime, model: torch.nn.Module) -> Callable:
    """The backend for this model's decoder: _inductor_graph, or where the runtime's linears run the rows kernel,
    inductor over the rows kernel's ops, which find the packed copies pack_linears registered with them
    (kernels/rows.cpp: by the weight's data pointer, dropped once the weight is). One backend object per kind and
    model make (watch.make_of): dynamo keeps a graph per code object and backend, so models of one make share their
    graphs, and no other make ever runs them."""
    ours = runtime.rows_linears
    attention = ours and runtime.rows
    key = (ours, attention, make_key(make_of(model)))
    build = (lambda gm, inputs: _rows_graph(gm, inputs, attention)) if ours else _inductor_graph
    return _BACKENDS.setdefault(key, _Backend(build))


class _Backend:
    """One kind and make's backend (the compile it wraps): an object of its own per make, since dynamo keeps a graph
    per code object and backend object, and the graphs keep no guards on the model's modules."""

    def __init__(self, build: Callable) -> None:
        self.build = build

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        return self.build(gm, example_inputs)


_BACKENDS: dict[tuple, _Backend] = {}  # by kind and model make


class CompiledDecoder:
    """The model's decoder under torch.compile, for the make it was compiled for (watch.refresh turns it off for a
    model whose make changed: `serves`)."""

    def __init__(self, compiled: Callable, make: tuple | None = None) -> None:
        self.compiled = compiled  # torch.compile of the decoder's forward
        self.make = make  # the model's make it was compiled for (watch.make_of)
        self.serves = True  # the model's make is still that one (watch.refresh says, before every decode)

    def __call__(self, decoder: torch.nn.Module, **kwargs) -> torch.Tensor:
        """The decoder's last hidden states for these keyword inputs (those of runtime/forward.py's one forward)."""
        for name in ("input_ids", "position_ids"):  # no guard on their strides (width 1 would specialise)
            torch._dynamo.decorators.mark_unbacked(kwargs[name], 1)
        with symbolic_sizes():
            return self.compiled(**kwargs).last_hidden_state


def compile_runtime(model: torch.nn.Module, runtime: Runtime, cache_dir: str | Path | None = None,
                    progress: Progress | None = None) -> Runtime:
    """The runtime with the model's decoder compiled (runtime.compiled), its width check and cost curve taken anew
    on the compiled forward, kept in cache_dir (default: prepare()'s) with the compiled artifacts
    (inductor-<key>.bin: a warm start compiles nothing; artifacts that no longer answer the graph, as after an
    upgrade, or a damaged file are compiled anew, checked anew and replaced); the runtime unchanged, with
    forward_note saying why, where it cannot compile here, compiling fails or the compiled forward's rows differ between
    widths (then it serves uncompiled: identity comes first); it never raises. Its weights may change in place (every
    decode checks the packed copies first: watch.refresh); a model whose make changed after (watch.make_of: modules
    swapped, parameters resized, another dtype, device or mode) is served uncompiled until compiled again."""
    from .cost import forward_cost
    from .invariance import fed_rows, width_check

    say = progress or (lambda stage: None)
    folder = Path(cache_dir) if cache_dir is not None else cache_root() / "forward_cost"
    missing = compiler_missing(model.device)
    if missing:
        return replace(runtime, forward_note=f"uncompiled: {missing}")
    began = time.perf_counter()
    try:  # whatever fails here (the compiler, inductor, a kept artifact, the model's make): serve uncompiled, say why
        _inductor_cache_beside_ours()
        # no guards on the model's modules (their attributes and weights): the backend is the model's make (_backend),
        # and watch.refresh turns the graph off for a model whose make changed
        guards = {"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe}
        decoder = torch.compile(model.get_decoder().forward, dynamic=True, backend=_backend(runtime, model),
                                options=guards)
        compiled = replace(runtime, compiled=CompiledDecoder(decoder, make_of(model)), width_check=None,
                           cost=None, forward_note="compiled")
        path = folder / f"inductor-{compiled.key(model)}.bin"
        misses = _cache_misses()
        kept = _load_artifacts(path)
        say("compiling")
        ids = torch.zeros(2, 6, dtype=torch.long, device=model.device)
        fed_rows(model, compiled, ids[:, :4], torch.tensor([4, 3], device=model.device), ids[:, 4:], 2)  # compiles
        warm = kept and _cache_misses() == misses  # the kept artifacts answered every graph (else: kept anew)
        say("checking")
        check = width_check(model, compiled, folder, fresh=not warm)  # a graph compiled anew is checked anew
    except Exception as err:  # noqa: BLE001 - a compiler or inductor failure: serve uncompiled, and say why
        return replace(runtime, forward_note=f"uncompiled: compiling failed ({type(err).__name__}: {err})"[:300])
    seconds = time.perf_counter() - began
    if not check.identical:
        return replace(runtime, forward_note=f"uncompiled: the compiled forward's width check found {check.differing} "
                                             f"of {check.rows} rows differing")
    if not warm:
        saved = torch.compiler.save_cache_artifacts()
        if saved is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.with_suffix(".tmp").write_bytes(saved[0])
            path.with_suffix(".tmp").replace(path)
    cost = None
    if runtime.cost is not None:  # the curve verified's trees are sized by, timed on the compiled forward
        say("timing")
        cost = forward_cost(model, replace(compiled, width_check=check), folder, refresh=not warm)
    note = f"compiled ({'kept artifacts' if warm else 'compiled'} in {seconds:.0f} s)"
    return replace(compiled, width_check=check, cost=cost, forward_note=note)
