"""The compiled graph replayed without dynamo (runtime/replay.py) and the backend that keeps each make's replay
(runtime/compiled.py): the replay reads its inputs as dynamo does, on every call, and answers as the compiled
function does; a second graph of one key turns that key's replay off."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from mars_core.runtime import compiled as compiled_module
from mars_core.runtime.replay import Replay, replay_of

pytestmark = pytest.mark.skipif(not hasattr(torch, "compile"), reason="needs torch.compile")


def kept(replays: list) -> Callable:
    """A backend that runs dynamo's graph as it is and keeps its replay."""

    def backend(gm: torch.fx.GraphModule, example_inputs: list):
        replays.append(replay_of(gm, gm.forward))
        return gm.forward

    return backend


def test_a_replay_answers_as_the_compiled_function_and_reads_its_inputs_anew():
    """Tensors, a module's weight and a size: read from the locals each call, so a weight changed in place after the
    graph was built, or a call of another length, is answered as the function answers it; a call that brings an
    input of another kind than traced (dtype, dims, contiguity), or lacks one, is not replayed (None)."""
    import torch._dynamo

    torch._dynamo.reset()
    layer = torch.nn.Linear(4, 3)

    def f(x, scale, layer):
        return (layer(x) * scale).sum(-1) + x.shape[0]

    replays: list[Replay | None] = []
    g = torch.compile(f, backend=kept(replays), dynamic=True)
    x, scale = torch.randn(5, 4), torch.randn(3)
    frame = {"x": x, "scale": scale, "layer": layer}
    with torch.no_grad():
        g(x, scale, layer)
        replay = replays[0]
        assert replay is not None and {place for place, _ in replay.checks} != set()
        for n in (5, 2, 9):
            y = torch.randn(n, 4)
            assert torch.equal(replay({**frame, "x": y})[0], f(y, scale, layer))
        layer.weight.mul_(2)  # the graph reads the weight it is handed: the one the function holds now
        assert torch.equal(replay(frame)[0], f(x, scale, layer))
        assert replay({"x": x, "scale": scale}) is None  # a local it reads is missing
        assert replay({**frame, "x": x.double()}) is None  # another dtype than traced
        assert replay({**frame, "x": x[0]}) is None  # other dims
        assert replay({**frame, "x": torch.randn(4, 5).t()}) is None  # not contiguous


def test_a_second_graph_of_one_key_turns_its_replay_off():
    """Dynamo compiles a second graph for one backend key in one frame (here for another dtype): it must choose
    between the two, which a replay cannot, so that key is not replayed; the frame compiled afresh (after a reset)
    starts over."""
    import torch._dynamo

    torch._dynamo.reset()
    key = ("test", "one key")
    backend = compiled_module._Backend(key, lambda gm, inputs: gm.forward)

    def double(x):
        return x * 2

    g = torch.compile(double, backend=backend, dynamic=True)
    g(torch.ones(3))
    assert isinstance(compiled_module._REPLAYS[key], Replay)
    g(torch.ones(3, dtype=torch.float64))
    assert compiled_module._REPLAYS[key] is None
    torch._dynamo.reset()
    torch.compile(double, backend=backend, dynamic=True)(torch.ones(3))
    assert isinstance(compiled_module._REPLAYS[key], Replay)
