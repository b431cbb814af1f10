"""docs/app.md's table: the app under load with the "adapt to load" switch off and on (`benchmarks/load_test.py`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ._records import cpu_cell, read, table


def load(records_dir: Path) -> str:
    """Per client count and switch setting: the MARS lane's tokens, tokens per forward and tokens per wall second over
    all clients, the race latencies, the threshold in force, and agreement with the AR lane's answers."""
    rows = [[str(r["clients"]), r["adapt"], str(r["mars_tokens"]), f"{r['mars_tpf']:.2f}", f"{r['throughput']:.1f}",
             f"{r['latency_p50']:.1f}", f"{r['latency_p95']:.1f}", f"{r['tau_mean']:.2f}", f"{r['agreement']:.2f}",
             f"{100 * r['identical']:.0f}%"] for r in read(records_dir, "load_test/adapt_knob.json")["rows"]]
    return table(["clients", "adapt", "MARS tokens", "tokens/forward", "tokens/s", "p50 latency s",
                      "p95 latency s", "τ in force", "agree", "same"], rows)


# (the app, its record, the machine of a record that does not name its CPU)
CLASS = (("each race alone (`--no-batching`)", "load_test/class_alone.json", "AMD EPYC, AVX2"),
         ("lanes share forwards (the default)", "load_test/class_shared.json", "AMD EPYC, AVX2"),
         ("lanes share forwards (the default)", "load_test/class_shared_avx512_bf16.json", "AMD EPYC, AVX512-BF16"))


def machine_of(machine: dict, unnamed: str) -> str:
    """'AMD EPYC, AVX512-BF16': the CPU a load test ran on and its fastest matmul instructions (a record from before
    load_test.py named them: `unnamed`)."""
    return cpu_cell(machine) if machine.get("cpu") else unnamed


def class_rounds(records_dir: Path) -> str:
    """A class racing at once, without and with the scheduler: per client count, races done and failed, latencies,
    every lane's tokens per wall second, answers equal to the same request's alone, the most lanes a forward fed."""
    rows = []
    for label, name, unnamed in CLASS:
        record = read(records_dir, name)
        cpu = machine_of(record["machine"], unnamed)
        for r in record["rows"]:
            exact = f"{r['alone_exact_count']} of {r['alone_compared']}" if r.get("alone_compared") else "–"
            rows.append([label, cpu, str(r["clients"]), f"{r['done']} / {r['failed']}", f"{r['latency_p50']:.1f}",
                         f"{r['latency_p95']:.1f}", f"{r['all_throughput']:.1f}", exact, str(r["shared_most"])])
    return table(["app", "machine", "visitors", "races done / failed", "p50 latency s", "p95 latency s",
                  "tokens/s, all lanes", "AR and verified = alone", "lanes a forward, most"], rows)


TABLES: dict[str, Callable[[Path], str]] = {"load": load, "class": class_rounds}
