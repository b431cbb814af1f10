"""The Train tab's charts (plotly dicts) and status line: the losses falling (the AR loss, and the noisy loss of each
mask slot: nearer slots learn first) and tokens per forward rising on held-out items (τ = 0.9 and verified)."""

from __future__ import annotations

from studio.charts import AR_COLOUR, MARS_COLOUR, TAU_COLOUR, VERIFIED_COLOUR, chart_layout

CHART_HEIGHT = 310  # both charts fit the first screen at 1400 × 900 under the controls once a training starts
SLOT_COLOURS = ("#1d4ed8", "#7c3aed", "#db2777", "#ea580c", "#0891b2", "#65a30d", "#b45309")


def loss_figure(points: list[dict]) -> dict:
    """The AR (clean-stream) loss and the noisy loss by mask slot 1..B-1 against the step, on a log axis."""
    steps = [p for p in points if "ar_loss" in p]
    x = [p["step"] for p in steps]
    data = [{"type": "scatter", "mode": "lines", "x": x, "y": [p["ar_loss"] for p in steps], "name": "AR loss",
             "line": {"color": AR_COLOUR, "width": 3}}]
    slots = max((len(p["slot_losses"]) for p in steps), default=0)
    for j in range(slots):
        data.append({"type": "scatter", "mode": "lines", "x": x, "name": f"mask slot {j + 1} (token {j + 2} ahead)",
                     "y": [p["slot_losses"][j] for p in steps],
                     "line": {"color": SLOT_COLOURS[j % len(SLOT_COLOURS)], "width": 2}})
    layout = chart_layout("Losses: AR and each mask slot (nearer slots learn first)", "step",
                          "cross-entropy (log scale)", height=CHART_HEIGHT)
    layout["yaxis"]["type"] = "log"
    return {"data": data, "layout": layout}


def speed_figure(points: list[dict]) -> dict:
    """Held-out tokens per forward at each probe: MARS at τ = 0.9 and verified, against the step; the final check
    (more items and tokens, with this machine's kernels) as diamonds apart; one token per forward (AR) as the floor
    line."""
    probes = [p for p in points if p.get("probe")]
    x = [p["step"] for p in probes]
    data = [{"type": "scatter", "mode": "lines+markers", "x": x, "name": name, "y": [p[key] for p in probes],
             "line": {"color": colour, "width": 3}}
            for key, name, colour in (("verified_tokens_per_forward", "MARS verified", VERIFIED_COLOUR),
                                      ("tau_tokens_per_forward", "MARS τ = 0.9", MARS_COLOUR))]
    checks = [p for p in points if p.get("check")]
    for key, name, colour in (("verified_tokens_per_forward", "verified", VERIFIED_COLOUR),
                              ("tau_tokens_per_forward", "τ = 0.9", MARS_COLOUR)):
        if checks:
            data.append({"type": "scatter", "mode": "markers", "x": [p["step"] for p in checks],
                         "y": [p[key] for p in checks], "name": f"final check, {name} ({checks[-1]['items']} items)",
                         "marker": {"color": colour, "symbol": "diamond", "size": 12}})
    top = max([2.5] + [p[key] for p in probes + checks
                       for key in ("verified_tokens_per_forward", "tau_tokens_per_forward")])
    if x:
        data.append({"type": "scatter", "mode": "lines", "x": [0, max(max(x), 1)], "y": [1, 1],
                     "name": "AR: 1 token per forward", "line": {"color": TAU_COLOUR, "dash": "dot"}})
    layout = chart_layout("Held-out tokens per forward", "step", "tokens per forward", height=CHART_HEIGHT)
    layout["yaxis"]["range"] = [0, top + 0.3]
    return {"data": data, "layout": layout}


def status_markdown(points: list[dict], steps: int, seconds: float, elapsed: float, state: str) -> str:
    """Where the training stands: the step of its budget, time elapsed and left (the budget's or the steps' pace,
    whichever ends first), the last losses and the last probe."""
    step = max((p["step"] for p in points), default=0)
    left = max(0.0, seconds - elapsed)
    if step:
        left = min(left, elapsed / step * (steps - step))
    last = next((p for p in reversed(points) if "ar_loss" in p), None)
    probe = next((p for p in reversed(points) if p.get("probe") or p.get("check")), None)
    said = [f"**{state}** · step {step} of at most {steps} · **{elapsed:.0f} s elapsed**"
            + (f", about {left:.0f} s left" if state == "training" else "")]
    if last:
        said.append(f"AR loss {last['ar_loss']:.3f} · slot losses "
                    + ", ".join(f"{v:.2f}" for v in last["slot_losses"] if v is not None))
    if probe:
        said.append(f"held-out tokens per forward at step {probe['step']}: verified "
                    f"{probe['verified_tokens_per_forward']:.2f}, τ = 0.9 {probe['tau_tokens_per_forward']:.2f}")
    return " · ".join(said)


def progress_html(elapsed: float, seconds: float, step: int, steps: int) -> str:
    """A bar of the budget spent: the larger of the time's and the steps' fraction."""
    fraction = min(1.0, max(elapsed / seconds if seconds else 0.0, step / steps if steps else 0.0))
    return (f'<div style="height:8px;background:#e2e8f0;border-radius:4px"><div style="height:8px;width:'
            f'{100 * fraction:.1f}%;background:{VERIFIED_COLOUR};border-radius:4px"></div></div>')
