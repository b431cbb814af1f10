"""docs/model.md's tables: the shipped adapter's quality, from its `mars-eval` reports (`mars_core.evaluation.report`
writes their rows: per strategy, threshold and category, tokens per forward, accuracy, draft precision, answers the
same as one-token decoding's) and from `eval_round2_sweep.json`, the whole-split runs that chose it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._records import linear, machine_cell, provenance, read, table

HELD_OUT, NEVER_TRAINED = "model/eval_smollm2_mars_b4.json", "model/eval_smollm2_mars_b4_never_trained.json"
HELD_OUT_FP32 = "model/eval_smollm2_mars_b4_fp32.json"
NEVER_TRAINED_FP32 = "model/eval_smollm2_mars_b4_never_trained_fp32.json"
CONFIDENCES = {  # label: (report, thresholds shown)
    "prob (default): the chosen token's probability": ("model/eval_smollm2_mars_b4_fp32.json", (0.95, 0.9, 0.8)),
    "margin: top-1 minus top-2": ("model/eval_smollm2_mars_b4_fp32_margin.json", (0.95, 0.9, 0.8)),
    "entropy: 1 − H / log V": ("model/eval_smollm2_mars_b4_fp32_entropy.json", (0.98, 0.95, 0.9)),
}
CHOSEN = {  # the sweep record's adapter name: its label
    "finished": "finished",
    "xl": "xl (shipped)",
    "b4_xl2-500": "checkpoint-500 of the same run",
    "soup of b4_xl2-500 and b4_xl2-750": "mean of checkpoints 500 and 750",
}
SPLITS = {"heldout": "held-out (99)", "never_trained": "never-trained (148)"}


def pct(value: float | None, digits: int = 1) -> str:
    """A share as a percentage without the sign ("43.9"), "-" where there is none."""
    return "-" if value is None else f"{100 * value:.{digits}f}"


def run(rows: list[dict[str, Any]], threshold: float, strategy: str = "sliding", category: str = "all") -> dict:
    """One run's row of a report: threshold mode at τ, or verified at its draft threshold."""
    return next(r for r in rows if r.get("strategy", "sliding") == strategy and r["threshold"] == threshold
                and r.get("category", "all") == category)


def cell(row: dict[str, Any]) -> str:
    """Tokens per forward / accuracy in %: "1.90 / 41.1"."""
    return f"{row['tokens_per_forward']:.2f} / {pct(row['accuracy'])}"


def base(report: dict[str, Any], category: str = "all") -> str:
    """The base model's stored answers scored, in % ("-" where the category has none with a gold answer)."""
    return next((pct(b["accuracy"]) for b in report["base"] if b["category"] == category), "-")


def quality(records_dir: Path) -> str:
    """Both splits in fp32 (verified is one-token decoding) and in bf16 (rounding parts a few answers)."""
    reports = [("held-out (99), fp32", HELD_OUT_FP32, ""), ("held-out (99), bf16", HELD_OUT, " (chain)"),
               ("never-trained (148), fp32", NEVER_TRAINED_FP32, ""),
               ("never-trained (148), bf16", NEVER_TRAINED, " (chain)")]
    rows = []
    for label, name, tree in reports:
        report = read(records_dir, name)
        r = report["rows"]
        tau, verified = run(r, 0.9), run(r, 0.3, "verified")
        rows.append([label, base(report), cell(run(r, 1.0)), cell(run(r, 0.95)), cell(tau),
                     f"{pct(tau['draft_precision'])}%", f"{pct(tau['same_as_one_token'], 0)}%",
                     f"{verified['tokens_per_forward']:.2f}{tree} / {pct(verified['accuracy'])}",
                     f"{pct(verified['same_as_one_token'], 0)}%"])
    return table(["split", "base", "τ = 1", "τ = 0.95", "τ = 0.9", "drafts right at 0.9", "same at 0.9",
                     "verified", "same, verified"], rows)


def per_category(name: str, thresholds: tuple[float, ...]) -> Callable[[Path], str]:
    """Per category of one split: the base's score, each threshold, verified and its answers the same as τ = 1's."""
    def render(records_dir: Path) -> str:
        report = read(records_dir, name)
        r = report["rows"]
        rows = []
        for category in dict.fromkeys(x["category"] for x in r):
            verified = run(r, 0.3, "verified", category)
            rows.append([f"{category} ({verified['n']})", base(report, category),
                         *(cell(run(r, t, category=category)) for t in thresholds), cell(verified),
                         f"{pct(verified['same_as_one_token'], 0)}%"])
        return table(["prompts", "base AR", *(f"τ = {t:g}" for t in thresholds), "verified (drafts ≥ 0.3)",
                         "verified same as τ = 1"], rows)
    return render


def confidence(records_dir: Path) -> str:
    """Held-out, fp32: the three confidences a threshold can compare, each at three thresholds."""
    rows = []
    for label, (name, thresholds) in CONFIDENCES.items():
        runs = [run(read(records_dir, name)["rows"], t) for t in thresholds]
        rows.append([label, " / ".join(f"{t:g}" for t in thresholds),
                     " / ".join(f"{x['tokens_per_forward']:.2f}" for x in runs),
                     " / ".join(pct(x["accuracy"]) for x in runs),
                     " / ".join(f"{pct(x['same_as_one_token'], 0)}%" for x in runs),
                     " / ".join(f"{pct(x['draft_precision'])}%" for x in runs)])
    return table(["confidence", "τ", "tokens per forward", "accuracy", "same as τ = 1", "drafts right"], rows)


def chosen(records_dir: Path) -> str:
    """The shipped checkpoint against the adapter before it and its neighbours, on whole splits."""
    rows = []
    for entry in read(records_dir, "model/eval_round2_sweep.json")["whole_splits"]:
        r = entry["rows"]
        tau, verified = run(r, 0.9), run(r, 0.3, "verified")
        rows.append([SPLITS[entry["split"]], CHOSEN[entry["adapter"]], cell(run(r, 1.0)), cell(tau),
                     f"{pct(tau['draft_precision'])}%", cell(verified), f"{pct(verified['same_as_one_token'], 0)}%"])
    return table(["split", "adapter", "τ = 1", "τ = 0.9", "drafts right at 0.9", "verified",
                     "verified same as τ = 1"], rows)


# the held-out split per machine kind (AVX2, AVX512-BF16): the weights as trained (MARS_WEIGHTS=bf16), then on the int8
# grid multiplied by 8-bit rows (load()'s pick there: runtime/grid.py), mars-eval --samples; the first of a pair is
# what "answers as trained" compares with
WEIGHT_RUNS = ((("bf16, as trained", "model/eval_avx2_bf16.json"),
                ("8-bit weights and rows", "model/eval_avx2_int8.json")),
               (("bf16, as trained", "model/eval_avx512_bf16.json"),
                ("8-bit weights and rows", "model/eval_avx512_int8.json")),
               (("bf16, as trained", "model/eval_amx_bf16.json"),
                ("8-bit weights and rows", "model/eval_amx_int8.json")))


def weights(records_dir: Path) -> str:
    """8-bit weights against the weights as trained, same machine and split: τ = 1, τ = 0.9 and verified (tokens per
    forward / accuracy), and how many answers at each are the trained weights' answers, token for token."""
    from ..report import run_key

    rows = []
    for pair in WEIGHT_RUNS:
        trained = read(records_dir, pair[0][1])
        for label, name in pair:
            report = read(records_dir, name)
            runs = [run(report["rows"], 1.0), run(report["rows"], 0.9), run(report["rows"], 0.3, "verified")]
            same = []
            for r in runs:
                key = run_key(r.get("strategy", "sliding"), r["threshold"])
                mine, theirs = report["samples"][key], trained["samples"][key]
                same.append(f"{sum(a == b for a, b in zip(mine, theirs))}/{len(theirs)}")
            rows.append([label, base(report), *map(cell, runs), ", ".join(same), machine_cell(report["machine"])])
    return table(["weights", "base", "τ = 1", "τ = 0.9", "verified", "answers as trained (τ = 1, 0.9, verified)",
                  "machine"], rows)


def fidelity(records_dir: Path) -> str:
    """Each served configuration's next-token choices along the held-out reference answers, teacher-forced under
    prepare()'s eager runtime for it, against the weights as trained in fp32 (mars_core.evaluation.fidelity)."""
    rec = read(records_dir, "model/fidelity_avx2.json")
    rows = []
    for c in rec["configs"]:
        machine = {**rec["machine"], "dtype": c["dtype"], "weight_bits": 8 if c["weights"] == "int8" else 16}
        rows.append([c["label"], f"{c['differing']} of {c['positions']} ({pct(1 - c['top1_agreement'], 2)}%)",
                     f"{c['kl_mean']:.5f}", f"{c['answers_touched']} of {rec['records']}",
                     linear({"linear": c["linear"]}), machine_cell(machine), provenance(rec)])
    return table(["configuration", "greedy choice not fp32's", "KL from fp32, mean (nats)", "answers touched",
                  "linear layers", "machine", "record"], rows)


TABLES: dict[str, Callable[[Path], str]] = {
    "weights": weights,
    "fidelity": fidelity,
    "quality": quality,
    "heldout": per_category(HELD_OUT, (1.0, 0.95, 0.9, 0.8, 0.5)),
    "never_trained": per_category(NEVER_TRAINED, (1.0, 0.9)),
    "confidence": confidence,
    "chosen": chosen,
}
