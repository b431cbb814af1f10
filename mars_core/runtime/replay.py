"""The compiled forward called without dynamo once it is compiled: the graph the backend built, its inputs read as
dynamo reads them, and none of dynamo's per-call work (its guards, and the bytecode that gathers the graph's 466
inputs around it: about 1.4 ms of a 9-11 ms forward on a 2-core EPYC, docs/speed.md#the-forward-replayed). A CUDA
graph's replay, on the CPU.

Each input of the graph has a source, a Python expression over the compiled frame's locals L (L['kwargs']['input_ids'],
L['args'][0]._modules['norm']._parameters['weight'], L['kwargs']['cache'].layers[3].keys.size()[2], ...): the replay
evaluates them all on every call, so it reads the model's weights and the cache as they are now, as dynamo does.
What dynamo's guards would check between calls stays the caller's to keep (runtime/forward.py feeds one kind of input,
every size of which the one graph takes symbolically; compiled.py), and a make whose decoder dynamo ever compiles a
second graph for is never replayed: dynamo chooses between graphs, the replay cannot.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Replay:
    """A compiled graph and how to read its inputs from the frame's locals."""

    graph: Callable[..., Any]  # the backend's compiled graph: its flat inputs -> its outputs
    read: Callable[[dict[str, Any]], list[Any]]  # those inputs from the frame's locals L
    kinds: tuple[tuple[torch.dtype, int] | None, ...]  # each input's dtype and dims as traced (None: a size)

    def __call__(self, frame: dict[str, Any]) -> Any:
        """The graph's outputs for a call whose frame holds these locals (by name: a function f(x, w) called on
        tensors has {"x": .., "w": ..}; one f(*args, **kwargs), {"args": .., "kwargs": ..})."""
        return self.graph(*self.read(frame))

    def fits(self, frame: dict[str, Any]) -> bool:
        """Whether every input reads from these locals (no source fails) with the dtype and dims it was traced with:
        checked on a replay's first call, as a guard on how the inputs are read rather than on what they hold."""
        try:
            inputs = self.read(frame)
        except Exception:  # noqa: BLE001 - a source that does not read here: dynamo keeps the call
            return False
        return len(inputs) == len(self.kinds) and all(
            (kind is None and isinstance(x, int)) or (isinstance(x, torch.Tensor) and kind == (x.dtype, x.dim()))
            for x, kind in zip(inputs, self.kinds))


def replay_of(gm: torch.fx.GraphModule, graph: Callable[..., Any]) -> Replay | None:
    """The replay of a graph dynamo traced (gm: its placeholders, each with the source dynamo read it from) and the
    backend compiled (graph); None where an input has no source to read it by."""
    sources, kinds = [], []
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        source = getattr(node.meta.get("grapharg"), "source", None)
        example = node.meta.get("example_value")
        if source is None:
            return None
        sources.append(source.name if isinstance(source.name, str) else source.name())  # a property in newer torch
        kinds.append((example.dtype, example.dim()) if isinstance(example, torch.Tensor) else None)
    try:  # one function that reads every input: dynamo's own expressions, over L alone
        read = eval(f"lambda L: [{', '.join(sources)}]", {"__builtins__": {}})  # noqa: S307 - dynamo's sources
    except SyntaxError:
        return None
    return Replay(graph, read, tuple(kinds))
