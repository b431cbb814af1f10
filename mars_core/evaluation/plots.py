"""The measuring commands' figures, drawn with matplotlib (None where it is missing): mars-eval's Pareto plot (tokens
per forward against task accuracy, one labelled point per threshold) and calibration plot of the accepted drafts;
mars-bench's speedups over transformers' generate."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any


def _pyplot():
    """matplotlib.pyplot, drawing without a display; ImportError where matplotlib is missing."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _new_axes():
    """A figure and its axes; ImportError where matplotlib is missing."""
    return _pyplot().subplots(figsize=(6.4, 4.4), dpi=120)


def _save(fig, ax, labels: tuple[str, str, str], path: str | os.PathLike) -> str:
    """Label the axes (x, y) and add the title, grid and legend; write the figure to path (its folder made if
    missing), close it and return the path."""
    import matplotlib.pyplot as plt

    xlabel, ylabel, title = labels
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return str(path)


def pareto_plot(report: dict[str, Any], path: str | os.PathLike, category: str = "all") -> str | None:
    """Tokens per forward vs accuracy, one labelled point per threshold (+ the base model); returns the path."""
    rows = [r for r in report["rows"] if r["category"] == category and r["accuracy"] is not None]
    pts = [r for r in rows if r.get("strategy", "sliding") == "sliding"]
    checked = [r for r in rows if r.get("strategy") == "verified"]
    if not pts:
        return None
    try:
        fig, ax = _new_axes()
    except ImportError:
        return None
    xs, ys = [r["tokens_per_forward"] for r in pts], [100 * r["accuracy"] for r in pts]
    ax.plot(xs, ys, "o-", color="tab:blue", label="MARS (sliding)")
    for x, y, r in zip(xs, ys, pts):
        ax.annotate(f"τ={r['threshold']:g}", (x, y), textcoords="offset points", xytext=(4, 5), fontsize=8)
    if checked:
        ax.plot([r["tokens_per_forward"] for r in checked], [100 * r["accuracy"] for r in checked], "D",
                color="tab:green", label="MARS verified (greedy AR's answer, up to bf16 rounding)")
        for r in checked:
            ax.annotate(f"drafts ≥ {r['threshold']:g}", (r["tokens_per_forward"], 100 * r["accuracy"]),
                        textcoords="offset points", xytext=(4, -11), fontsize=8, color="tab:green")
    base = next((r for r in report.get("base", []) if r["category"] == category), None)
    if base and base["accuracy"] is not None:
        ax.plot([1.0], [100 * base["accuracy"]], "s", color="tab:gray", label="base (AR)")
    split = report.get("split", "heldout").replace("_", "-")
    title = f"{report.get('model', 'model')}: {split} ({category}), block size {report['block_size']}"
    return _save(fig, ax, ("tokens per forward", "task accuracy (%)", title), path)


def calibration_plot(reports: dict[str, dict[str, Any]], path: str | os.PathLike,
                     title: str = "draft precision against confidence (held-out)") -> str | None:
    """Reliability of the mask slots: draft precision against confidence, one line per labelled report, read
    at each report's lowest threshold (its accepted drafts span the widest confidence range). A calibrated
    model sits on the diagonal; below it, a threshold of 0.9 lets through drafts that are right less often."""
    lines = []
    for label, report in reports.items():
        drafts = report.get("drafts") or {}
        if drafts:
            t = min(drafts, key=float)
            bins = drafts[t]["calibration"]
            if bins:
                lines.append((f"{label} (τ={float(t):g}, {drafts[t]['drafts']} drafts)",
                              [sum(b["confidence"]) / 2 for b in bins], [100 * b["precision"] for b in bins]))
    if not lines:
        return None
    try:
        fig, ax = _new_axes()
    except ImportError:
        return None
    ax.plot([0.5, 1.0], [50, 100], "--", color="gray", label="calibrated")
    for label, xs, ys in lines:
        ax.plot(xs, ys, "o-", label=label)
    return _save(fig, ax, ("confidence of the accepted mask-slot token (bin centre)",
                           "equal to the model's own AR choice (%)", title), path)


def speedup_plot(rows: list, path: str, title: str = "") -> str | None:
    """mars-bench's rows (bench.Row): speedup over hf_generate per configuration and batch size (all prompts) as a
    PNG; None without matplotlib or without hf_generate rows."""
    try:
        plt = _pyplot()
    except ImportError:
        return None
    rows = [r for r in rows if r.category == "all" and r.speedup_vs_hf_generate is not None]
    if not rows:  # no hf_generate rows to compare with
        return None
    sizes = sorted({r.batch_size for r in rows})
    fig, axes = plt.subplots(1, len(sizes), figsize=(5.5 * len(sizes), 4.2), squeeze=False, sharey=True)
    for ax, bs in zip(axes[0], sizes):
        sub = [r for r in rows if r.batch_size == bs]
        labels = [r.method + (f" {r.weights}" if getattr(r, "weights", None) else "")
                  + ("" if r.block_size is None else f"\nB{r.block_size} τ{r.threshold:g}") for r in sub]
        colours = ["#94a3b8" if r.block_size is None else {"mars_sliding": "#2563eb", "mars_block": "#7c3aed"}.get(
            r.method, "#059669") for r in sub]
        ax.bar(range(len(sub)), [r.speedup_vs_hf_generate for r in sub], color=colours)
        ax.axhline(1.0, color="#0f172a", lw=1, ls="--")
        ax.set_xticks(range(len(sub)), labels, rotation=90, fontsize=7)
        ax.set_title(f"batch {bs}")
    axes[0][0].set_ylabel("speedup vs transformers generate")
    width = 5.5 * len(sizes)
    fig.suptitle(textwrap.fill(title or "mars-bench: wall-clock speedup (all prompts)", int(11 * width)), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
