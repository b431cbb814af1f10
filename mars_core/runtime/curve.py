"""A forward's cost by batch size and width: the curve verified decoding sizes its trees by (runtime.cost measures it).

    curve.at(batch=4, widths=range(33))      # seconds per forward, interpolated linearly in width and batch
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any


def interpolate(x: float, xs: tuple[float, ...], ys: list[float]) -> float:
    """Piecewise-linear y(x) through the points, extended linearly past both ends (one point: a constant). Past the
    last point the slope is at least 0: a wider forward is never taken to cost less than the widest one timed."""
    if len(xs) == 1:
        return ys[0]
    i = max(1, min(len(xs) - 1, next((k for k, v in enumerate(xs) if v >= x), len(xs) - 1)))
    slope = (ys[i] - ys[i - 1]) / (xs[i] - xs[i - 1])
    if x > xs[-1]:
        return ys[-1] + max(slope, 0.0) * (x - xs[-1])
    return ys[i - 1] + slope * (x - xs[i - 1])


def shape_moved(then: list[float], now: list[float], factor: float) -> bool:
    """Whether two timings of the same widths (the narrowest first) differ in shape, t(w) / t(first), by more than
    `factor` either way at some width. The planner reads only the shape, and it moves between two hosts of one CPU
    model and under load, so a kept curve whose shape moved is timed again
    (docs/llamacpp.md#speed)."""
    return any(max(a, b) / min(a, b) > factor for a, b in zip((t / then[0] for t in then[1:]),
                                                               (n / now[0] for n in now[1:])))


@dataclass(frozen=True)
class CostCurve:
    """Seconds of one cached forward, seconds[i][j] for batch_sizes[i] samples of widths[j] new tokens each."""

    batch_sizes: tuple[int, ...]
    widths: tuple[int, ...]
    seconds: tuple[tuple[float, ...], ...]
    machine: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)  # where it was measured

    def __post_init__(self) -> None:
        if len(self.seconds) != len(self.batch_sizes) or any(len(r) != len(self.widths) for r in self.seconds):
            raise ValueError("CostCurve: seconds must have one row per batch size and one column per width")
        if list(self.widths) != sorted(set(self.widths)) or list(self.batch_sizes) != sorted(set(self.batch_sizes)):
            raise ValueError("CostCurve: widths and batch sizes must be distinct and ascending")
        if any(s <= 0 for row in self.seconds for s in row):
            raise ValueError("CostCurve: every time must be > 0")

    def at(self, batch: int, widths: Iterable[int]) -> list[float]:
        """Seconds of a forward of `batch` samples at each width (width 0 costs what width 1 does)."""
        row = [interpolate(batch, self.batch_sizes, [r[j] for r in self.seconds]) for j in range(len(self.widths))]
        return [max(interpolate(max(w, 1), self.widths, row), 1e-9) for w in widths]

    @classmethod
    def from_function(cls, seconds: Callable[[int, int], float], batch_sizes: tuple[int, ...] = (1,),
                      widths: tuple[int, ...] = tuple(range(1, 65))) -> CostCurve:
        """A curve from a formula seconds(batch, width): for tests and for reproducible benchmarks."""
        return cls(batch_sizes, widths, tuple(tuple(float(seconds(b, w)) for w in widths) for b in batch_sizes))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CostCurve:
        return cls(tuple(d["batch_sizes"]), tuple(d["widths"]), tuple(tuple(r) for r in d["seconds"]),
                   d.get("machine", {}))

    @classmethod
    def from_json(cls, text: str) -> CostCurve:
        return cls.from_dict(json.loads(text))
