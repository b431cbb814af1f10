"""benchmarks/load_test.py end to end: it launches the app on a tiny random model and measures the adapt knob."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from test_app_e2e import ROOT, save_tiny_model

BASE_TAU = 0.9


def test_load_test_reports_every_round_and_adapt_lowers_the_threshold(tmp_path):
    model = save_tiny_model(tmp_path / "tiny_model")
    out = tmp_path / "load.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "load_test.py"), "--model", str(model), "--clients", "1,2",
           "--requests-per-client", "1", "--max-new-tokens", "8", "--threshold", str(BASE_TAU), "--threads", "1",
           "--prompt", "Count from one to ten", "--timeout", "60", "--json", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "tok/s" in done.stdout and "MARS-lane tokens" in done.stdout
    header = next(line for line in done.stdout.splitlines() if line.split()[:2] == ["C", "adapt"])
    assert header.split()[-6:] == ["v", "tok", "v", "t/f", "v", "t/s"]  # the verified lane's columns, last
    report = json.loads(out.read_text())
    assert report["settings"]["threshold"] == BASE_TAU and report["machine"]["torch_threads"] == 1
    rows = {(r["clients"], r["adapt"]): r for r in report["rows"]}
    assert len(report["rows"]) == 4 and set(rows) == {(c, a) for c in (1, 2) for a in ("off", "on")}
    for (clients, _), row in rows.items():
        assert (row["done"], row["failed"]) == (clients, 0), row["errors"]
        assert row["mars_tokens"] == 8 * clients  # the prompt gives full-length answers: the requests last
        assert 0 < row["latency_p50"] <= row["latency_p95"]
        assert row["throughput"] > 0 and 0 <= row["agreement"] <= 1 and 0 <= row["identical"] <= 1
        # the verified lane beside the MARS lane: the same answer length, its own tokens per forward and speed
        assert "verified" in row["lanes"] and row["verified_tokens"] == 8 * clients
        assert row["verified_tokens"] / row["verified_forwards"] == pytest.approx(row["verified_tpf"])
        assert row["verified_tpf"] >= 1 and row["verified_throughput"] == pytest.approx(
            row["verified_tokens"] / row["wall_s"]) and row["verified_own_tps"] > 0
    for clients in (1, 2):
        assert rows[(clients, "off")]["tau_mean"] == BASE_TAU
    assert rows[(1, "on")]["tau_mean"] == BASE_TAU  # alone, adapt keeps the base
    assert rows[(2, "on")]["tau_mean"] < BASE_TAU  # two requests at once: the knob lowers τ
    assert rows[(2, "on")]["tau_min"] == pytest.approx(BASE_TAU - 0.05)  # one step: two running at most
