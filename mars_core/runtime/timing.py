"""Timing a piece of work on a shared CPU, and keeping what was measured on disk.

Every timed loop in the package goes through `round_seconds` (the cost curve, the kernel choice, mars-bench's bound,
the app's forward estimate): warm-up calls, then timed calls, each followed by an untimed `after` (a forward that
grew the KV cache crops it back, so every round feeds the same context). The fastest of the rounds is a forward's own
cost: other work on the machine only ever adds time; the median says what a caller typically waits. A value measured
once per machine and model (a cost curve, a kernel choice, a width check) or a measurement run's report is kept as
JSON with `write_json`, written atomically so that two processes measuring at once never leave half a file.

(torch.utils.benchmark.Timer does not fit here: it runs its setup once per measurement, not between calls, so a
cached forward's KV cache would grow with every call, and it times one thread unless told otherwise.)
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch


def machine_busy() -> bool:
    """Whether other work holds the cores (1-minute load average above their count): timings taken now overstate."""
    try:
        return os.getloadavg()[0] > (os.cpu_count() or 1)
    except OSError:  # no load average on this platform
        return False


Work = Callable[[], Any]


def seconds(work: Work, device: torch.device | None = None, after: Work | None = None) -> float:
    """Seconds of one call of work (CUDA work is waited for); `after` runs once it is timed, untimed."""
    cuda = device is not None and device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    work()
    if cuda:
        torch.cuda.synchronize(device)
    took = time.perf_counter() - t0
    if after is not None:
        after()
    return took


def round_seconds(work: Work, rounds: int = 5, *, device: torch.device | None = None, after: Work | None = None,
                  warmup: int = 1) -> list[float]:
    """Seconds of each of `rounds` calls of work, after `warmup` untimed calls (first-use setup, caches)."""
    for _ in range(warmup):
        seconds(work, device, after)
    return [seconds(work, device, after) for _ in range(max(rounds, 1))]


def fastest_seconds(work: Work, rounds: int = 5, device: torch.device | None = None, after: Work | None = None
                    ) -> float:
    """The fastest of `rounds` timed calls after one that warms up: the work's own cost on a shared machine."""
    return min(round_seconds(work, rounds, device=device, after=after))


def median_seconds(work: Work, rounds: int = 5, device: torch.device | None = None, after: Work | None = None
                   ) -> float:
    """The median of `rounds` timed calls after one that warms up: what a caller typically waits."""
    return statistics.median(round_seconds(work, rounds, device=device, after=after))


def read_json(path: Path | None) -> dict | None:
    """A kept JSON value, or None where there is none or it is damaged (it is measured again)."""
    if path is None or not path.is_file():
        return None
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def write_json(path: str | os.PathLike | None, value: dict, indent: int = 1) -> None:
    """Keep value at path, atomically (a temporary file beside it, then a rename), its folder made if missing."""
    if path is None:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(value, indent=indent) + "\n")
    tmp.replace(path)


T = TypeVar("T")


BUSY = "timed_busy"  # in a kept timing's JSON: it was measured while other work held the cores


def kept(path: Path | None, read: Callable[[dict], T], measure: Callable[[], T], write: Callable[[T], dict], *,
         timed: bool = True, holds: Callable[[T], bool] | None = None, fresh: bool = False) -> T:
    """The value kept at path, else measured now and kept there (path None: measured, never kept): every measurement
    prepare() keeps (kernel rows, width check, cost curve) goes through here.

    read turns the kept JSON back into the value (one it cannot read, KeyError/TypeError/ValueError, is measured
    again); write turns a value into JSON; holds, where given, says whether a kept value still holds on this machine
    now (one that does not is measured again and rewritten); fresh: measured again whatever is kept. A timed value
    measured while the machine was busy is kept marked so (BUSY): other work inflated it, so it is read back only
    while the machine is busy (a timing taken then would be no cleaner) and timed again once the machine is quiet."""
    if not fresh:
        found = read_kept(path, read)
        if found is not None and (holds is None or holds(found)):
            return found
    crowded = timed and machine_busy()  # asked before measuring: the timing itself loads the cores
    measured = measure()
    write_json(path, {**write(measured), BUSY: True} if crowded else write(measured))
    return measured


def read_kept(path: Path | None, read: Callable[[dict], T]) -> T | None:
    """The value kept at path, unchecked; None where there is none, read cannot read it (KeyError/TypeError/
    ValueError: a damaged or older file), or it was timed on a busy machine and this machine is quiet now."""
    value = read_json(path)
    if value is None or (value.get(BUSY) and not machine_busy()):
        return None
    try:
        return read(value)
    except (KeyError, TypeError, ValueError):
        return None


def cache_root() -> Path:
    """Where converted models and measured values are kept: $MARS_CACHE or ~/.cache/mars_studio."""
    env = os.environ.get("MARS_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "mars_studio"
