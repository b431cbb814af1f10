"""How torch's OpenMP threads wait between parallel regions, chosen before torch loads OpenMP (it reads it once).

A forward runs about 150 parallel regions (the rows kernel's ops), a few microseconds apart. libgomp, torch's OpenMP
on Linux, lets a worker spin 300,000 times after a region before it sleeps, but only 100 times once more of its
threads exist than CPUs: as soon as a second thread that ran a parallel torch op lives (a training beside the races, a
Batch run, any user's thread), every region wakes a sleeping worker (what it costs: `static_profile.py --openmp-wait`,
CHANGELOG.md). OMP_WAIT_POLICY=ACTIVE lets a worker spin 1,000 times there (about the gap between a forward's ops);
GOMP_SPINCOUNT keeps its spin otherwise at a few milliseconds (ACTIVE alone spins for minutes, a core busy while the
app idles). Importing mars_core sets both unless the user set either, or torch was imported first (then libgomp's own
wait serves: `wait()` says which)."""

from __future__ import annotations

import os
import sys

WAIT = {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "100000"}


def _words(settings: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items())


def _choose() -> str:
    """Sets WAIT where the user set neither and torch is not imported yet; what serves, in words."""
    mine = {k: os.environ[k] for k in WAIT if k in os.environ}
    if mine:
        return "as set: " + _words(mine)
    if "torch" in sys.modules:
        return "libgomp's default (torch was imported before mars_core)"
    os.environ.update(WAIT)
    return "set by mars_core: " + _words(WAIT)


_WAIT = _choose()


def wait() -> str:
    """How this process's OpenMP threads wait between regions (records name it: machine.machine_info)."""
    return _WAIT
