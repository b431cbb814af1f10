"""docs/llamacpp.md's tables: llama.cpp's width check and cost curve per weight type, and verified against one-token
decoding on the same build, from `mars-bench`'s llama.cpp records (its `llamacpp` entry per weight type holds the
engine's width check and cost curve; its rows, per method and weight type, the speed and the answers)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._records import read, table

WEIGHTS = {"f32": "F32", "bf16": "BF16", "q8_0": "Q8_0"}
PLAIN, INVARIANT = "llamacpp/avx2_epyc_b1.json", "llamacpp/avx2_epyc_b1_invariant.json"
TINYBLAS, NO_TINYBLAS = "llamacpp/avx2_epyc_b1_tinyblas_same_session", "llamacpp/avx2_epyc_b1_no_llamafile"


def _difference(value: float) -> str:
    return "0" if value == 0 else f"{value:.1e}".replace("e-0", "e-") if value < 1e-3 else f"{value:.2g}"


def identity(records_dir: Path) -> str:
    """Rows whose logits differ from a one-token forward's when fed 2, 4, 8 and 16 at a time, plain and invariant."""
    plain, invariant = read(records_dir, PLAIN)["llamacpp"], read(records_dir, INVARIANT)["llamacpp"]
    rows = []
    for key, label in WEIGHTS.items():
        check, checked = plain[key]["width_check"], invariant[key]["width_check"]
        rows.append([label + (" (no flash attention)" if plain[key]["kv"] == "f32" else ""),
                     f"{check['differing']} of {check['rows']}", _difference(check["max_abs"]),
                     f"{checked['differing']} of {checked['rows']}"])
    return table(["weights", "plain engine: rows differing from width 1", "max abs difference",
                      "invariant engine"], rows)


def _ratios(engine: dict[str, Any], widths: tuple[int, ...] = (2, 4, 8, 16)) -> str:
    curve = engine["cost_curve"]
    seconds = dict(zip(curve["widths"], curve["seconds"][0]))
    return " / ".join(f"{seconds[w] / seconds[1]:.2f}" for w in widths)


def width(records_dir: Path) -> str:
    """One cached forward of 2 / 4 / 8 / 16 new tokens against one of 1 token, with and without tinyBLAS."""
    with_, without = (read(records_dir, f"{name}.json")["llamacpp"] for name in (TINYBLAS, NO_TINYBLAS))
    return table(["weights", "with tinyBLAS (pip's build)", "without (dot products at every width)"],
                     [[label, _ratios(with_[key]), _ratios(without[key])] for key, label in WEIGHTS.items()])


def verified(records_dir: Path) -> str:
    """Verified against one-token decoding on the same build: its speed-up (tokens per forward), and its answers equal
    to one-token decoding's, bit for bit by construction where that build's width check found no row differing."""
    cells: dict[str, list[str]] = {key: [label] for key, label in WEIGHTS.items()}
    for split in ("", "_never_trained"):
        for name in (TINYBLAS, NO_TINYBLAS):
            record = read(records_dir, f"{name}{split}.json")
            for r in record["rows"]:
                if r["method"] == "llamacpp_verified" and r["category"] == "all":
                    exact = record["llamacpp"][r["weights"]]["width_check"]["differing"] == 0
                    same = round(r["same_as_engine_ar"] * record["prompts"])
                    cells[r["weights"]].append(f"{r['speedup_vs_engine_ar']:.2f}x ({r['tokens_per_forward']:.2f}), "
                                               f"{same}/{record['prompts']}" + (" bit for bit" if exact else ""))
    return table(["weights", "held-out, tinyBLAS", "held-out, without", "never-trained, tinyBLAS",
                      "never-trained, without"], list(cells.values()))


TABLES: dict[str, Callable[[Path], str]] = {"identity": identity, "width": width, "verified": verified}
