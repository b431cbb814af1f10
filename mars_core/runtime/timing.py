"""Timing a piece of work on a shared CPU, and keeping what was measured on disk.

The fastest of interleaved rounds is a forward's own cost: other work on the machine only ever adds time. A value
measured once per machine and model (a cost curve, a kernel choice, a width check) is kept as JSON, written
atomically so that two processes measuring at once never leave half a file.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def busy() -> bool:
    """Whether other work holds the cores (1-minute load average above their count): timings taken now overstate."""
    try:
        return os.getloadavg()[0] > (os.cpu_count() or 1)
    except OSError:  # no load average on this platform
        return False


def seconds(work: Callable[[], Any], device: torch.device | None = None) -> float:
    """Seconds of one call of work (CUDA work is waited for)."""
    cuda = device is not None and device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    work()
    if cuda:
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0


def fastest_seconds(work: Callable[[], Any], rounds: int = 5, device: torch.device | None = None) -> float:
    """The fastest of `rounds` timed calls, after one call that warms up."""
    work()
    return min(seconds(work, device) for _ in range(max(rounds, 1)))


def read_json(path: Path | None) -> dict | None:
    """A kept JSON value, or None where there is none or it is damaged (it is measured again)."""
    if path is None or not path.is_file():
        return None
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def write_json(path: Path | None, value: dict) -> None:
    """Keep value at path, atomically (a temporary file beside it, then a rename)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(value, indent=1))
    tmp.replace(path)


def cache_root() -> Path:
    """Where converted models and measured values are kept: $MARS_CACHE or ~/.cache/mars_studio."""
    env = os.environ.get("MARS_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "mars_studio"
