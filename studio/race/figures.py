"""The race's charts (plotly dicts): tokens per forward with the τ each MARS forward used, tokens against each
lane's own time, and the verified lane's acceptance by draft position."""

from __future__ import annotations

from studio.charts import AR_COLOUR, MARS_COLOUR, TAU_COLOUR, VERIFIED_COLOUR, chart_layout
from studio.race.state import LANE_NAMES, Run, acceptance

LANE_COLOURS = {"ar": AR_COLOUR, "mars": MARS_COLOUR, "verified": VERIFIED_COLOUR}


def forwards_figure(runs: dict[str, Run | None], block_size: int) -> dict:
    """Tokens committed by each forward, per lane; the threshold each MARS forward used in its own panel below."""
    data = []
    for key in ("mars", "verified"):
        run = runs.get(key)
        if run:
            data.append({"type": "bar", "x": list(range(len(run.counts))), "y": run.counts, "name": LANE_NAMES[key],
                         "marker": {"color": LANE_COLOURS[key]}, "opacity": 0.85})
    if runs.get("ar"):
        ar = runs["ar"]
        data.append({"type": "scatter", "mode": "lines", "x": list(range(len(ar.counts))), "y": ar.counts,
                     "name": "AR", "line": {"color": AR_COLOUR, "width": 3}})
    if runs.get("mars"):
        mars = runs["mars"]
        data.append({"type": "scatter", "mode": "lines", "x": list(range(len(mars.thresholds))), "y": mars.thresholds,
                     "name": "τ (MARS τ lane)", "yaxis": "y2", "line": {"color": TAU_COLOUR, "shape": "hv"}})
    most = max([block_size] + [max(r.counts, default=0) for r in runs.values() if r])
    layout = chart_layout("Tokens per forward", "forward", "tokens", bargap=0.15, barmode="group")
    layout["yaxis"].update(domain=[0.34, 1.0], range=[0, most + 0.5], dtick=1 if most <= 8 else None)
    layout["yaxis2"] = {"domain": [0.0, 0.2], "range": [0, 1.05], "title": {"text": "τ"}, "anchor": "x",
                        "tickvals": [0, 0.5, 1], "gridcolor": "#eef2f7"}
    layout["xaxis"]["anchor"] = "y2"  # the forward axis under the τ panel, below both
    return {"data": data, "layout": layout}


def time_figure(runs: dict[str, Run | None]) -> dict:
    """Tokens committed against each lane's own forward time."""
    data = [
        {"type": "scatter", "mode": "lines", "x": [0.0, *run.times], "y": [0, *run.totals], "name": LANE_NAMES[key],
         "line": {"color": LANE_COLOURS[key], "width": 3}}
        for key, run in runs.items() if run
    ]
    return {"data": data, "layout": chart_layout("Tokens against time (each lane's own forwards)", "seconds",
                                                  "tokens")}


def acceptance_figure(run: Run | None) -> dict:
    """Acceptance rate by draft position (bars labelled matched/checked), the mean accepted length in the title."""
    acc = acceptance(run)
    rows = [p for p in acc["positions"] if p["checked"]]
    title = (f"MARS verified: mean accepted length {acc['mean_accepted']:.2f} drafts<br>per forward that checked "
             f"drafts ({acc['forwards_checking']} forwards) · {acc['tokens_per_forward']:.2f} tokens per forward"
             if acc["forwards_checking"] else "MARS verified: acceptance by draft position<br>(no drafts checked yet)")
    data = [{"type": "bar", "x": [f"d{p['position']}" for p in rows], "y": [p["rate"] for p in rows],
             "text": [f"{p['matched']}/{p['checked']}" for p in rows], "textposition": "outside",
             "marker": {"color": VERIFIED_COLOUR}, "name": "P(d_a matched | d_1..d_(a-1) matched)",
             "hovertemplate": "%{x}: %{text} matched (%{y:.0%})<extra></extra>"}]
    layout = chart_layout(title, "draft position", "acceptance rate", height=300, showlegend=False, bargap=0.35)
    layout["yaxis"].update(range=[0, 1.15], tickformat=".0%")
    layout["margin"].update(t=60, b=50)
    return {"data": data, "layout": layout}
