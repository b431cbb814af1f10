"""docs/app.md's table: the app under load with the "adapt to load" switch off and on (`benchmarks/load_test.py`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ._records import read, table


def load(records_dir: Path) -> str:
    """Per client count and switch setting: the MARS lane's tokens, tokens per forward and tokens per wall second over
    all clients, the race latencies, the threshold in force, and agreement with the AR lane's answers."""
    rows = [[str(r["clients"]), r["adapt"], str(r["mars_tokens"]), f"{r['mars_tpf']:.2f}", f"{r['throughput']:.1f}",
             f"{r['latency_p50']:.1f}", f"{r['latency_p95']:.1f}", f"{r['tau_mean']:.2f}", f"{r['agreement']:.2f}",
             f"{100 * r['identical']:.0f}%"] for r in read(records_dir, "load_test/adapt_knob.json")["rows"]]
    return table(["clients", "adapt", "MARS tokens", "tokens/forward", "tokens/s", "p50 latency s",
                      "p95 latency s", "τ in force", "agree", "same"], rows)


TABLES: dict[str, Callable[[Path], str]] = {"load": load}
