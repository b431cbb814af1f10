"""A forward captured once as a CUDA graph and replayed: one graph per width a static-shape decoder feeds.

At batch 1 a small model's forward on a GPU is kernel launches and Python (docs/speed.md): a graph replays all of
them as one launch. Capturing needs fixed shapes and fixed addresses: the inputs are copied into buffers the graph
reads, the cache is one allocated once (runtime/slots.py) and written at a slot held on the device. A graph's output
buffer is overwritten by its next replay; callers read it first. A capture that fails is said once per width (a
warning), its width kept, and that width runs eagerly from then on; graph_counts() says how many graphs were captured,
replayed and failed in this process (mars-bench keeps it in its JSON).
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

WARMUP = 2  # eager runs on a side stream before capture (lazy initialisation, cuBLAS workspaces)
EAGER = None  # what a key whose capture failed holds: its forward runs eagerly
_COUNTS: Counter = Counter()  # captures, replays, failures: this process's
_FAILED: dict[int, str] = {}  # width -> why its first capture failed (warned once)


class Captured:
    """forward(*inputs) captured as one CUDA graph over copies of `inputs`; calling it copies new inputs of the same
    shapes in and replays."""

    def __init__(self, forward: Callable[..., torch.Tensor], inputs: tuple[torch.Tensor, ...],
                 pool: tuple | None = None) -> None:
        self.inputs = tuple(x.clone() for x in inputs)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP):
                forward(*self.inputs)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool):
            self.output = forward(*self.inputs)

    def __call__(self, *inputs: torch.Tensor) -> torch.Tensor:
        for buffer, x in zip(self.inputs, inputs):
            buffer.copy_(x)
        self.graph.replay()
        return self.output


def capturable(device: torch.device) -> bool:
    """Whether forwards on `device` can be captured (CUDA only)."""
    return device.type == "cuda" and torch.cuda.is_available()


def replayed(graphs: dict, key: Any, forward: Callable[..., Any], *inputs: torch.Tensor) -> Any:
    """forward(*inputs) through the graph kept in `graphs` under key, captured on first use; where the capture failed,
    forward(*inputs) eagerly (inputs[0]: the fed ids [b, W], whose W the failure is said by)."""
    if key not in graphs:
        graphs[key] = captured(graphs, forward, inputs)
    graph = graphs[key]
    if graph is EAGER:
        return forward(*inputs)
    _COUNTS["replays"] += 1
    return graph(*inputs)


def captured(graphs: dict, forward: Callable[..., Any], inputs: tuple[torch.Tensor, ...]) -> Captured | None:
    """A new graph of forward over inputs, in the memory pool of the cache's other graphs; EAGER where capturing
    fails (warned once per width, counted)."""
    pool = next((g.graph.pool() for g in graphs.values() if g is not EAGER), None)
    try:
        graph = Captured(forward, inputs, pool)
    except Exception as err:  # noqa: BLE001 -- whatever failed, the forward still runs, eagerly
        failed(inputs[0].shape[-1], err)
        return EAGER
    _COUNTS["captures"] += 1
    return graph


def failed(width: int, err: BaseException) -> None:
    """Count a failed capture and keep its width; the first at a width is said as a warning."""
    _COUNTS["failures"] += 1
    if width not in _FAILED:
        _FAILED[width] = f"{type(err).__name__}: {err}"[:300]
        warnings.warn(f"CUDA graph capture failed at width {width} ({_FAILED[width]}): that width runs eagerly",
                      RuntimeWarning, stacklevel=4)


def graph_counts() -> dict[str, Any]:
    """Graphs captured, replayed and failed in this process, and the widths that failed (why, each): what a
    measurement on a GPU ran (mars-bench's JSON)."""
    return {"captures": _COUNTS["captures"], "replays": _COUNTS["replays"], "failures": _COUNTS["failures"],
            "failed_widths": {str(w): why for w, why in sorted(_FAILED.items())}}
