"""The Hugging Face Space as it would be published."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRAINING_ONLY = ("datasets", "peft", "matplotlib")  # what training, evaluation plots and adapter merges import


def test_importing_the_engine_and_the_app_needs_no_training_package():
    """`import mars_core` (and the whole app, its prompt set read) loads decoding and loading only: the training
    names load on first use, so a Space that only decodes needs none of the training packages."""
    code = ("import sys, app, mars_core; from studio import explorer; explorer.prompt_set(); "
            f"print(sorted(m for m in {TRAINING_ONLY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
    code = "import mars_core; print(mars_core.MarsTrainer.__module__, mars_core.training_block_mask.__name__)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["mars_core.training.mars_trainer", "training_block_mask"], done.stderr[-3000:]
