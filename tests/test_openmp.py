"""mars_core/openmp.py: OpenMP's wait is chosen before torch loads it, in the entry points users start, and a user's
own choice is kept. Each case runs in a fresh interpreter (the choice is made once, at import)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mars_core.openmp import WAIT

ROOT = Path(__file__).resolve().parent.parent
REPORT = ("import os; from mars_core import openmp; "
          "print(openmp.wait(), os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'), sep='|')")


def _report(first: str, **env: str) -> list[str]:
    """openmp.wait() and the two variables, in a fresh interpreter that runs `first` before asking."""
    clean = {k: v for k, v in os.environ.items() if k not in WAIT}
    done = subprocess.run([sys.executable, "-c", f"{first}; {REPORT}"], cwd=ROOT, env={**clean, **env},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1].split("|")


@pytest.mark.parametrize("first", ["import mars_core", "import app", "import mars_core.evaluation.bench"])
def test_the_entry_points_choose_the_wait_before_torch_loads(first):
    """The library, the app and mars-bench each set the wait before torch is imported (an import reordered so that
    torch came first would leave libgomp's default and fail here)."""
    said, policy, spins = _report(first)
    assert (said, policy, spins) == ("set by mars_core: OMP_WAIT_POLICY=ACTIVE, GOMP_SPINCOUNT=100000", "ACTIVE",
                                     "100000")


def test_a_users_setting_is_kept():
    said, policy, spins = _report("import mars_core", OMP_WAIT_POLICY="PASSIVE")
    assert (said, policy, spins) == ("as set: OMP_WAIT_POLICY=PASSIVE", "PASSIVE", "None")


def test_torch_imported_first_is_said_not_changed():
    """Too late to choose (libgomp read its settings as torch loaded): nothing set, and the records say so."""
    said, policy, spins = _report("import torch; import mars_core; from mars_core.machine import machine_info; "
                                  "assert machine_info()['openmp_wait'].startswith('libgomp')")
    assert (said, policy, spins) == ("libgomp's default (torch was imported before mars_core)", "None", "None")
