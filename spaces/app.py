"""Hugging Face Space entry point: a thin launcher for the repository's app.py (see README.md in this folder)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # before this folder, so `import app` finds the root app.py, not this file

# The Space serves a released MARS checkpoint unless its settings name another model from studio.models.SPACE_MODELS.
os.environ.setdefault("MARS_MODEL", "Xalphinions/MARS-Qwen2.5-0.5B-blk4")
os.environ.setdefault("MARS_CONCURRENCY", "2")

from app import main  # noqa: E402

if __name__ == "__main__":
    main()
