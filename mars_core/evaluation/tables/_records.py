"""Reading kept records and writing their numbers alike on every page: what a page module's table function uses.

A record is a JSON file under the records folder (assets/records): a `mars-bench --json` run, a
`benchmarks/exactness.py --json` run, a `benchmarks/runtime_watch.py --json` run, .... Each carries a "provenance":
the commit the measurement was made at (or, where neither the docs nor git history say it, the commit that added the
file) and its date, `{"commit": ..., "date": ..., "source": "measured at" | "added in"}`;
`python -m mars_core.evaluation.tables --stamp FILE` writes it into a new record.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable

from ...machine import ISA_FLAGS, NAMES

DASH = "–"  # a cell with nothing measured
ISA_NAMES = dict(zip(ISA_FLAGS, NAMES.values()))  # a kind's /proc/cpuinfo flag -> its name, fastest first
DTYPES = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}
LINEARS = {**{f"{kind}_rows": f"{name} rows kernel" for kind, name in NAMES.items()},
           "onednn_packed": "oneDNN, packed", "torch": "torch's own"}
SPLITS = {"heldout": "held-out", "never_trained": "never-trained"}


def read(records_dir: Path, name: str) -> dict[str, Any]:
    """The record records_dir/name, parsed (a FileNotFoundError names the missing file)."""
    path = Path(records_dir) / name
    if not path.is_file():
        raise FileNotFoundError(f"no record {name} in {records_dir}")
    return json.loads(path.read_text())


def read_all(records_dir: Path, pattern: str) -> list[tuple[str, dict[str, Any]]]:
    """Every record matching the glob pattern under records_dir, as (name relative to it, record), in name order."""
    root = Path(records_dir)
    return [(p.relative_to(root).as_posix(), json.loads(p.read_text())) for p in sorted(root.glob(pattern))]


def provenance(record: dict[str, Any]) -> str:
    """'measured at `abc1234`, 2026-11-28' (or 'added in ...'): where the record's numbers come from."""
    prov = record.get("provenance")
    if not prov:
        raise ValueError("a record without provenance: stamp it (python -m mars_core.evaluation.tables --stamp FILE)")
    return f"{prov['source']} `{prov['commit']}`, {prov['date']}"


def date(record: dict[str, Any]) -> str:
    """The record's measurement date (ISO, so it sorts), '' where it has none."""
    return (record.get("provenance") or {}).get("date", "")


def isa(machine: dict[str, Any]) -> str:
    """The machine's fastest instruction set for matmuls by name (AMX, AVX512-BF16, AVX-512, AVX2), or its GPU."""
    if machine.get("device") == "cuda" and machine.get("gpu"):
        return machine["gpu"]
    for flag, name in ISA_NAMES.items():
        if flag in machine.get("isa", ()):
            return name
    return "x86" if machine.get("isa") is not None else "?"


def kind(machine: dict[str, Any]) -> str:
    """The machine kind a record is filed under: amx, avx512_bf16, avx512, avx2 (CPUs) or gpu."""
    if machine.get("device") == "cuda":
        return "gpu"
    flags = set(machine.get("isa", ()))
    for flag, name in (("amx_bf16", "amx"), ("avx512_bf16", "avx512_bf16"), ("avx512f", "avx512"), ("avx2", "avx2")):
        if flag in flags:
            return name
    return "other"


def machine_key(machine: dict[str, Any]) -> tuple[str, str, str]:
    """(kind, core, dtype): what a record is filed under. A kind's cores are told apart (machine.cpu_core; '' where a
    record names none): what a wider forward costs differs severalfold between them."""
    return kind(machine), machine.get("core") or "", dtype(machine.get("dtype"))


def dtype(name: str | None) -> str:
    """bf16, fp32, ... for torch's dtype names (what records hold)."""
    return DTYPES.get(name or "", name or DASH)


def cpu_cell(machine: dict[str, Any]) -> str:
    """'AMD EPYC, AVX512-BF16': a record's CPU (its marks and 'Processor' dropped; its core where the record names
    it: 'AMD EPYC (Zen 1)') and its fastest matmul instructions."""
    cpu = re.sub(r"\((R|TM)\)|\s+(Processor|CPU)\b", "", machine.get("cpu", "?")).strip()
    core = f" ({machine['core']})" if machine.get("core") else ""
    return f"{cpu}{core}, {isa(machine)}"


def machine_cell(machine: dict[str, Any]) -> str:
    """'AMD EPYC, AVX512-BF16, bf16, 2 threads' (a GPU: its name and dtype; 8-bit weights where served so): the
    machine a row was measured on."""
    if machine.get("device") == "cuda":
        return f"{machine.get('gpu', 'a GPU')}, {dtype(machine.get('dtype'))}"
    bits = " (8-bit weights)" if machine.get("weight_bits") == 8 else ""
    return f"{cpu_cell(machine)}, {dtype(machine.get('dtype'))}{bits}, {machine.get('threads')} threads"


def linear(machine: dict[str, Any]) -> str:
    """The kernel that ran the linear layers, in words (a record's machine.linear)."""
    name = machine.get("linear", "?")
    return LINEARS.get(name, name)


def num(x: float | None, digits: int = 1) -> str:
    """A number with a fixed count of decimals; the dash for nothing measured."""
    return DASH if x is None else f"{x:.{digits}f}"


def times(x: float | None, digits: int = 2) -> str:
    """A ratio: '2.75×'."""
    return DASH if x is None else f"{x:.{digits}f}×"


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, None where either is missing (or b is 0)."""
    return None if a is None or not b else a / b


def of(part: int | None, whole: int | None) -> str:
    """'18/18'."""
    return DASH if part is None or whole is None else f"{part}/{whole}"


def table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    """A markdown table (no trailing newline); a cell's '|' is escaped."""
    def line(cells: Iterable[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"
    header = list(header)
    return "\n".join([line(header), "|" + "---|" * len(header), *(line(r) for r in rows)])


def summary(record: dict[str, Any], method: str, batch: int = 1, weights: str | None = None) -> dict[str, Any] | None:
    """A mars-bench record's row over all prompts ("all") for a method at a batch size (a llama.cpp row: its
    weights), or None where the run had none."""
    for row in record.get("rows", ()):
        if (row["method"] == method and row["batch_size"] == batch and row.get("category") == "all"
                and (weights is None or row.get("weights") == weights)):
            return row
    return None


def run_label(record: dict[str, Any], batch: int) -> str:
    """'batch 1, 18 held-out × 64': the batch, prompts and new tokens of a mars-bench row."""
    split = SPLITS.get(record.get("split", ""), record.get("split", "?"))
    return f"batch {batch}, {record.get('prompts')} {split} × {record.get('max_new_tokens')}"
