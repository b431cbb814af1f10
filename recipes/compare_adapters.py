"""The shipped adapter (xl: round two, 2.7x the answers) against the ones before it (wide, finished) and the B = 8
candidate on both evaluation splits: a Pareto plot per split and one calibration plot, from the mars-eval reports in
assets/.

    python recipes/compare_adapters.py      # writes assets/adapters_pareto.png and assets/adapters_calibration.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mars_core.evaluation.eval import calibration_plot  # noqa: E402

REPORTS = {  # (adapter, split) -> report
    ("wide", "held-out"): "assets/records/model/eval_smollm2_mars_b4_wide.json",
    ("finished", "held-out"): "assets/records/model/eval_smollm2_mars_b4_finished.json",
    ("B = 8", "held-out"): "assets/records/model/eval_smollm2_mars_b8.json",
    ("xl", "held-out"): "assets/records/model/eval_smollm2_mars_b4.json",
    ("wide", "never-trained"): "assets/records/model/eval_smollm2_mars_b4_wide_never_trained.json",
    ("finished", "never-trained"): "assets/records/model/eval_smollm2_mars_b4_finished_never_trained.json",
    ("B = 8", "never-trained"): "assets/records/model/eval_smollm2_mars_b8_never_trained.json",
    ("xl", "never-trained"): "assets/records/model/eval_smollm2_mars_b4_never_trained.json",
}
COLOURS = {"wide": "tab:gray", "finished": "tab:blue", "B = 8": "tab:orange", "xl": "tab:green"}


def rows(report: dict, strategy: str) -> list[dict]:
    return [r for r in report["rows"] if r["category"] == "all" and r.get("strategy", "sliding") == strategy]


def pareto(reports: dict, path: Path) -> None:
    """Per split: each adapter's threshold-mode curve (accuracy against tokens per forward) and its verified point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    splits = list(dict.fromkeys(split for _, split in reports))
    fig, axes = plt.subplots(1, len(splits), figsize=(6.0 * len(splits), 4.4), dpi=120)
    for ax, split in zip(axes, splits):
        for (adapter, s), report in reports.items():
            if s != split:
                continue
            curve = sorted(rows(report, "sliding"), key=lambda r: r["tokens_per_forward"])
            ax.plot([r["tokens_per_forward"] for r in curve], [100 * r["accuracy"] for r in curve], "o-",
                    color=COLOURS[adapter], label=f"{adapter}: threshold mode")
            for r in curve:
                ax.annotate(f"τ={r['threshold']:g}", (r["tokens_per_forward"], 100 * r["accuracy"]),
                            textcoords="offset points", xytext=(4, 4), fontsize=7, color=COLOURS[adapter])
            for r in rows(report, "verified"):
                ax.plot([r["tokens_per_forward"]], [100 * r["accuracy"]], "D", color=COLOURS[adapter],
                        markersize=8, label=f"{adapter}: verified (drafts ≥ {r['threshold']:g})")
        base = next(r for r in reports[("xl", split)]["base"] if r["category"] == "all")
        ax.plot([1.0], [100 * base["accuracy"]], "s", color="black", label="base model (its stored answers)")
        ax.set_ylim(0, max(55, ax.get_ylim()[1]))
        ax.set_title(f"{split}: {base['n_gold']} prompts with a gold answer", fontsize=9)
        ax.set_xlabel("tokens per forward")
        ax.set_ylabel("task accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    reports = {key: json.loads((ROOT / p).read_text()) for key, p in REPORTS.items()}
    pareto(reports, ROOT / "assets" / "adapters_pareto.png")
    calibration_plot({f"{a}, {s}": r for (a, s), r in reports.items()}, ROOT / "assets" / "adapters_calibration.png",
                     title="draft precision against confidence: wide, finished, B = 8 and xl adapters, both splits")
    print("wrote assets/adapters_pareto.png and assets/adapters_calibration.png")


if __name__ == "__main__":
    main()
