"""What the tabs' charts share: colours, a fast plotly payload, the common layout."""

from __future__ import annotations

import json
from typing import Any

from gradio.components.plot import PlotData

AR_COLOUR, MARS_COLOUR, VERIFIED_COLOUR, TAU_COLOUR = "#94a3b8", "#2563eb", "#059669", "#f59e0b"


def plotly_data(fig: dict) -> PlotData:
    """A figure given as a plain plotly dict, ready for gr.Plot (no per-update plotly validation: fast)."""
    return PlotData(type="plotly", plot=json.dumps(fig))


def chart_layout(title: str, x: str, y: str, **extra: Any) -> dict:
    """The common chart layout: title, axes, white background, the legend under the plot (the toolbar sits at the
    top right, where a legend would hide under it)."""
    axis = dict(gridcolor="#eef2f7", zerolinecolor="#cbd5e1")
    return {
        "title": {"text": title, "x": 0.02, "font": {"size": 14}}, "height": 340,
        "margin": {"l": 50, "r": 20, "t": 40, "b": 95}, "plot_bgcolor": "#ffffff", "paper_bgcolor": "#ffffff",
        "legend": {"orientation": "h", "y": -0.3, "x": 0, "xanchor": "left", "yanchor": "top"},
        "xaxis": {**axis, "title": {"text": x}}, "yaxis": {**axis, "title": {"text": y}}, **extra,
    }
