"""A forward captured once as a CUDA graph and replayed: one graph per width a static-shape decoder feeds.

At batch 1 a small model's forward on a GPU is kernel launches and Python (docs/speed.md): a graph replays all of
them as one launch. Capturing needs fixed shapes and fixed addresses: the inputs are copied into buffers the graph
reads, the cache is one allocated once (runtime/slots.py) and written at a slot held on the device. A graph's output
buffer is overwritten by its next replay; callers read it first.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

WARMUP = 2  # eager runs on a side stream before capture (lazy initialisation, cuBLAS workspaces)


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


def replayed(graphs: dict, key, forward: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> torch.Tensor:
    """forward(*inputs) through the graph kept in `graphs` under key, captured on first use."""
    if key not in graphs:
        pool = next(iter(graphs.values())).graph.pool() if graphs else None  # one memory pool for a cache's graphs
        graphs[key] = Captured(forward, inputs, pool)
    return graphs[key](*inputs)
