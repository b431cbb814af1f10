"""docs/training.md's tables: the AR-SFT control beside the first MARS adapters (their `mars-eval` reports), and the
Train tab's live runs (`benchmarks/train_live.py --json`, under `training/`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ._records import read, table

CONTROL = {  # label: the report of its τ = 1 run on the held-out split
    "base (bf16)": "model/eval_smollm2_base.json",
    "AR-SFT control (640 answers, 8 epochs)": "model/eval_smollm2_sft.json",
    "MARS, first adapter (640 answers, 8 epochs)": "model/eval_smollm2_mars_b4_first.json",
    "MARS, narrow (1,650 answers, 2.2 epochs)": "model/eval_smollm2_mars_b4_narrow.json",
}
LIVE = [  # (label, record under training/, its run: 0 the MARS run, 1 its AR-only control)
    ("MARS, the tab's default (counting, B = 4, 3 min); AMD EPYC, AVX512-BF16", "counting_epyc_avx512bf16.json", 0),
    ("AR-only control of that run (`SFTTrainer`, the same steps and data)", "counting_epyc_avx512bf16.json", 1),
    ("MARS, the same command; Intel Xeon, AMX", "counting_amx_default.json", 0),
    ("MARS, again with its control; Intel Xeon, AMX", "counting_amx_control.json", 0),
    ("AR-only control of that run", "counting_amx_control.json", 1),
    ("MARS at lr 1e-3 (`--learning-rate 0.001`); Intel Xeon, AMX", "counting_amx_lr1e-3_control.json", 0),
    ("AR-only control of that run", "counting_amx_lr1e-3_control.json", 1),
    ("MARS, LoRA on the top 15 layers, no mask row (`--lora-layers 15 --no-mask-row`); Intel Xeon, AMX",
     "counting_amx_top15_no_mask_row.json", 0),
]


def control(records_dir: Path) -> str:
    """τ = 1 on the held-out split: accuracy, and agreement with the base's stored greedy answers."""
    rows = []
    for label, name in CONTROL.items():
        ones = {r["category"]: r for r in read(records_dir, name)["rows"] if r["threshold"] == 1.0}
        rows.append([label, " / ".join(f"{100 * ones[c]['accuracy']:.1f}" for c in ("all", "predictable", "open")),
                     f"{100 * ones['all']['agreement']:.1f}%", f"{100 * ones['all']['shared_prefix']:.1f}%"])
    return table(["model, τ = 1", "accuracy all / predictable / open", "same answer as base",
                      "shared prefix with base"], rows)


def live(records_dir: Path) -> str:
    """Each run: its steps in the 3 minutes, its first chart point, when the probe first read verified ≥ 2.0, and the
    final check on 16 held-out items."""
    rows = []
    for label, name, index in LIVE:
        run = read(records_dir, f"training/{name}")["runs"][index]
        final = run["final"]
        first = f"{run['first_point_seconds']:.1f} s" if run["method"] == "mars" else "–"  # a control has no probe
        reached = "–"
        if run["verified_2_at_seconds"] is not None:
            step = next(p["step"] for p in run["stream"]
                        if p.get("probe") and p["seconds"] == run["verified_2_at_seconds"])
            reached = f"at {run['verified_2_at_seconds']:.0f} s (step {step})"
        untrained = " (slots never trained)" if run["method"] == "sft" else ""
        rows.append([label, f"{run['steps']} steps, {run['seconds']:.0f} s", first, reached,
                     f"{final['tau_tokens_per_forward']:.2f}{untrained}", f"{final['verified_tokens_per_forward']:.2f}",
                     f"{final['verified_identical']}/{final['items']}", f"{final['ar_correct']}/{final['items']}"])
    return table(["run", "steps, seconds", "first point", "held-out verified ≥ 2.0 (probe)",
                      "16 held-out: τ = 0.9 tok/fwd", "verified tok/fwd", "verified = one-token",
                      "one-token answers right"], rows)


TABLES: dict[str, Callable[[Path], str]] = {"control": control, "live": live}
