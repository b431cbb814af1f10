"""Serving knobs: count concurrent generations and lower the MARS threshold as that load rises.

The policy (the paper's serving knob, made concrete):

    threshold in force = max(base - step * (active - 1), min(base, floor))

One generation alone decodes at the threshold it asked for. Every further generation running at the
same time lowers it by `step` (default 0.05), never below `floor` (default 0.5) and never above `base`:
a busy server accepts a few more mask predictions per forward, so each request needs fewer forwards
and its latency holds up, at a small cost in agreement with one-token decoding. A base already below
the floor is kept as it is. With active <= 1 the base is returned unchanged.
"""

from __future__ import annotations

import threading

__all__ = ["LoadTracker", "adaptive_threshold", "DEFAULT_STEP", "DEFAULT_FLOOR"]

DEFAULT_STEP = 0.05
DEFAULT_FLOOR = 0.5


class LoadTracker:
    """Thread-safe count of the generations running now: `with tracker:` around each one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._peak = 0
        self._total = 0

    @property
    def active(self) -> int:
        """Generations running now."""
        with self._lock:
            return self._active

    @property
    def peak(self) -> int:
        """The most generations that ran at the same time."""
        with self._lock:
            return self._peak

    @property
    def total(self) -> int:
        """Generations started since the tracker was made."""
        with self._lock:
            return self._total

    def enter(self) -> int:
        """Count one more running generation; return the count including it."""
        with self._lock:
            self._active += 1
            self._total += 1
            self._peak = max(self._peak, self._active)
            return self._active

    def exit(self) -> int:
        """Count one generation fewer; return the count left."""
        with self._lock:
            if self._active == 0:
                raise RuntimeError("LoadTracker.exit() without a matching enter()")
            self._active -= 1
            return self._active

    def __enter__(self) -> LoadTracker:
        self.enter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.exit()

    def __repr__(self) -> str:
        return f"LoadTracker(active={self.active}, peak={self.peak}, total={self.total})"


def adaptive_threshold(
    base: float, active: int, *, step: float = DEFAULT_STEP, floor: float = DEFAULT_FLOOR
) -> float:
    """The threshold to decode at when `active` generations (this one included) run at once; see the module doc."""
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not 0.0 < base <= 1.0:
        raise ValueError(f"base threshold must be in (0, 1], got {base!r}")
    if isinstance(active, bool) or not isinstance(active, int) or active < 0:
        raise ValueError(f"active must be an integer >= 0, got {active!r}")
    if not step >= 0.0:
        raise ValueError(f"step must be >= 0, got {step!r}")
    if not 0.0 < floor <= 1.0:
        raise ValueError(f"floor must be in (0, 1], got {floor!r}")
    lowered = base - step * max(active - 1, 0)
    return round(max(lowered, min(base, floor)), 6)
