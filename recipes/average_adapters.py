"""Average LoRA checkpoints of one run, tensor by tensor (a "soup"): one adapter of the same size and config.

    python recipes/average_adapters.py OUT CHECKPOINT [CHECKPOINT ...]

Averaging A and B apart is not the average of the products B·A, but checkpoints of one run lie close together;
round two tried checkpoints 500 and 750 of the shipped run this way (docs/model.md).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from safetensors.torch import load_file, save_file


def average(out: Path, checkpoints: list[Path]) -> None:
    """Write the mean of the checkpoints' adapter tensors, with the first one's config, to `out`."""
    states = [load_file(c / "adapter_model.safetensors") for c in checkpoints]
    if any(s.keys() != states[0].keys() for s in states):
        raise SystemExit("average_adapters: the checkpoints hold different tensors (not one run's adapters)")
    mean = {k: (sum(s[k].float() for s in states) / len(states)).to(states[0][k].dtype) for k in states[0]}
    out.mkdir(parents=True, exist_ok=True)
    save_file(mean, out / "adapter_model.safetensors", metadata={"format": "pt"})
    shutil.copy(checkpoints[0] / "adapter_config.json", out / "adapter_config.json")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    average(Path(sys.argv[1]), [Path(a) for a in sys.argv[2:]])
