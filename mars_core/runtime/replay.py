"""The compiled forward called without dynamo once it is compiled: the graph the backend built, its inputs read as
dynamo reads them, and none of dynamo's per-call work (its guards, and the bytecode that gathers the graph's inputs
around it; docs/speed.md#the-forward-replayed-and-attention-a-key-head-at-a-time). A CUDA graph's replay, on the CPU.

Each input of the graph has a source, a Python expression over the compiled frame's locals L (L['kwargs']['input_ids'],
L['args'][0]._modules['norm']._parameters['weight'], L['kwargs']['cache'].layers[3].keys.size()[2], ...): the replay
evaluates them all on every call, so it reads the model's weights and the cache as they are now, as dynamo does, and
checks that each input a call brings (all but the model's weights and buffers) has the dtype, dims, device and
contiguity it was traced with; where one has not, the call is dynamo's. The rest of what dynamo's guards would check
between calls stays the caller's to keep (compiled.py: one kind of input, every size of it symbolic; a make with a
second graph is never replayed; a replay's first answer is compared with dynamo's, bit for bit, before it serves).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

Kind = tuple[torch.dtype, int, torch.device, bool]  # a tensor input's dtype, dims, device, contiguity


@dataclass
class Replay:
    """A compiled graph and how to read its inputs from the frame's locals."""

    graph: Callable[..., Any]  # the backend's compiled graph: its flat inputs -> its outputs
    read: Callable[[dict[str, Any]], list[Any]]  # those inputs from the frame's locals L
    checks: tuple[tuple[int, Kind], ...]  # the inputs a call brings (by place), each with its kind as traced
    checked: bool = False  # its answer was compared with dynamo's and found the same (compiled.CompiledDecoder)

    def __call__(self, frame: dict[str, Any]) -> Any | None:
        """The graph's outputs for a call whose frame holds these locals (by name: a function f(x, w) called on
        tensors has {"x": .., "w": ..}; one f(*args, **kwargs), {"args": .., "kwargs": ..}); None where an input does
        not read from them or is not of its traced kind (then the call is dynamo's)."""
        try:
            inputs = self.read(frame)
        except Exception:  # noqa: BLE001 - a source that does not read here
            return None
        for place, kind in self.checks:
            x = inputs[place]
            if not isinstance(x, torch.Tensor) or (x.dtype, x.dim(), x.device, x.is_contiguous()) != kind:
                return None
        return self.graph(*inputs)


def replay_of(gm: torch.fx.GraphModule, graph: Callable[..., Any]) -> Replay | None:
    """The replay of a graph dynamo traced (gm: its placeholders, each with the source dynamo read it from) and the
    backend compiled (graph); None where an input has no source to read it by."""
    sources, checks = [], []
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        source = getattr(node.meta.get("grapharg"), "source", None)
        if source is None:
            return None
        name = source.name if isinstance(source.name, str) else source.name()  # a property in newer torch
        example = node.meta.get("example_value")
        if isinstance(example, torch.Tensor) and "._parameters[" not in name and "._buffers[" not in name:
            checks.append((len(sources), (example.dtype, example.dim(), example.device, example.is_contiguous())))
        sources.append(name)
    try:  # one function that reads every input: dynamo's own expressions, over L alone
        read = eval(f"lambda L: [{', '.join(sources)}]", {"__builtins__": {}})  # noqa: S307 - dynamo's sources
    except SyntaxError:
        return None
    return Replay(graph, read, tuple(checks))
