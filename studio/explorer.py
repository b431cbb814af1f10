"""The Threshold explorer tab: tokens per forward against agreement with τ = 1 over a prompt set."""

from __future__ import annotations

import csv
import logging
import os
import tempfile
from typing import Any

import gradio as gr
import pandas as pd
import plotly.graph_objects as go

from mars_core.evaluation.prompts import prompts_in
from mars_core.evaluation.sweep import SWEEP_COLUMNS, threshold_sweep

from . import models
from .charts import MARS_COLOUR, TAU_COLOUR, chart_layout
from .inputs import SWEEP_MAX_NEW_TOKENS, check_inputs, integer, warn

log = logging.getLogger("mars_studio")


def parse_thresholds(text: str) -> list[float]:
    """Thresholds typed as "1, 0.9, 0.8"; a ValueError says what is wrong."""
    parts = [p for p in str(text or "").replace(",", " ").split() if p]
    if not parts:
        raise ValueError("Type at least one threshold, e.g. 1, 0.9, 0.8.")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise ValueError(f"Thresholds must be numbers separated by commas, got {text!r}.") from None
    bad = [v for v in values if not 0.0 < v <= 1.0]
    if bad:
        raise ValueError(f"Thresholds must be in (0, 1], got {bad}.")
    return values


def pareto_figure(rows: list[dict]) -> go.Figure:
    """Tokens per forward against quality, one point per threshold, the Pareto front joined."""
    xs, ys = [r["tokens_per_forward"] for r in rows], [r["quality"] for r in rows]
    front = sorted((r for r in rows if not any(
        o["tokens_per_forward"] >= r["tokens_per_forward"] and o["quality"] >= r["quality"]
        and (o["tokens_per_forward"], o["quality"]) != (r["tokens_per_forward"], r["quality"]) for o in rows)),
        key=lambda r: r["tokens_per_forward"])
    fig = go.Figure()
    fig.add_scatter(x=[r["tokens_per_forward"] for r in front], y=[r["quality"] for r in front], mode="lines",
                    name="Pareto front", line=dict(color=MARS_COLOUR, width=2))
    fig.add_scatter(x=xs, y=ys, mode="markers+text", name="threshold", text=[f"τ={r['threshold']:g}" for r in rows],
                    textposition="top center", marker=dict(size=10, color=TAU_COLOUR))
    layout = chart_layout("Tokens per forward against quality (agreement with τ = 1)", "tokens per forward", "quality")
    layout["yaxis"]["range"] = [min(ys) - 0.05, 1.08]
    fig.update_layout(**{**layout, "height": 380})
    return fig


def run_sweep(
    thresholds: str, block_size: int, max_new_tokens: int, categories: list[str], limit: int = 18,
    progress: Any = gr.Progress(),
) -> tuple[Any, pd.DataFrame | None, str | None, str]:
    """Sweep the thresholds over the first `limit` prompts of the chosen categories: chart, table, CSV, status."""
    try:
        values = parse_thresholds(thresholds)
        _, _, block, _, new = check_inputs("sweep", 1.0, block_size, 0.0, max_new_tokens, cap=SWEEP_MAX_NEW_TOKENS)
        prompts = prompts_in(list(categories or []), limit=integer(limit, "number of prompts"))
        if not prompts:
            raise ValueError("Pick at least one prompt category.")
        model, tok = models.get_model(models.CONFIG.model)
        with models.TRACKER:
            rows = threshold_sweep(model, tok, prompts, values, block_size=block, max_new_tokens=new,
                                   progress=progress)
    except ValueError as err:
        return None, None, None, warn(str(err))
    except Exception as err:
        log.exception("sweep failed")
        return None, None, None, warn(f"Sweep failed: {type(err).__name__}: {err}")
    path = os.path.join(tempfile.mkdtemp(prefix="mars_sweep_"), "threshold_sweep.csv")
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(SWEEP_COLUMNS))
        writer.writeheader()
        writer.writerows(rows)
    table = pd.DataFrame(rows, columns=list(SWEEP_COLUMNS)).round(3)
    status = f"Swept {len(rows)} thresholds over {len(prompts)} prompts (B = {block}, up to {new} new tokens)."
    return pareto_figure(rows), table, path, status
