"""What machine a measurement was taken on: CPU model, the instruction sets that decide matmul speed, threads.

Speeds differ severalfold by machine kind (docs/speed.md: a bf16 forward with AMX against an fp32 one without), so
every speed figure and every measured cost curve carries this record.
"""

from __future__ import annotations

import functools
import platform
import re
import shutil
from pathlib import Path
from typing import Any

import torch

from .openmp import wait as openmp_wait

ISA_FLAGS = ("amx_bf16", "avx512_bf16", "avx512f", "avx2")  # /proc/cpuinfo flags, fastest kind first
# each kind in a page's words, in ISA_FLAGS' order, by the name of the rows kernel's build for it (runtime/rows.py):
# the one table the machine lines, the records' tables and the app's small print read
NAMES = {"amx": "AMX", "avx512_bf16": "AVX512-BF16", "avx512": "AVX-512", "avx2": "AVX2"}


COMPILERS = ("c++", "g++", "clang++", "cl")  # what torch's C++ builds (our rows kernel, inductor's loops) call


def cxx_compiler() -> str | None:
    """The C++ compiler on PATH that building C++ at run time would use (the rows kernel, inductor's kernels), or
    None where there is none."""
    return next((c for c in COMPILERS if shutil.which(c)), None)


@functools.cache
def cpu_flags() -> frozenset[str]:
    """CPU feature flags from /proc/cpuinfo (empty where there is none), read once a process: the race's small print
    asks for the rows kernel's flavor every frame."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    match = re.search(r"^flags\s*:\s*(.*)$", text, re.MULTILINE)
    return frozenset(match.group(1).split()) if match else frozenset()


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else what platform knows."""
    try:
        match = re.search(r"^model name\s*:\s*(.*)$", Path("/proc/cpuinfo").read_text(), re.MULTILINE)
    except OSError:
        match = None
    return match.group(1).strip() if match else (platform.processor() or platform.machine())


# AMD's core generations by /proc/cpuinfo's family and model, as Linux names them (arch/x86/kernel/cpu/amd.c):
# (family, first model, last model, core). Zen+ counts as Zen 1 (the same 128-bit vector units, where a 256-bit AVX2
# instruction takes two passes); a model not listed is not named
AMD_CORES = ((23, 0x00, 0x2F, "Zen 1"), (23, 0x50, 0x5F, "Zen 1"), (23, 0x30, 0x4F, "Zen 2"), (23, 0x60, 0x7F, "Zen 2"),
             (23, 0x90, 0x91, "Zen 2"), (23, 0xA0, 0xAF, "Zen 2"), (25, 0x00, 0x0F, "Zen 3"), (25, 0x20, 0x5F, "Zen 3"),
             (25, 0x10, 0x1F, "Zen 4"), (25, 0x60, 0xAF, "Zen 4"), (26, 0x00, 0x2F, "Zen 5"), (26, 0x40, 0x4F, "Zen 5"),
             (26, 0x60, 0x7F, "Zen 5"))


def cpu_core(cpuinfo: str | None = None) -> str | None:
    """The CPU's core generation where /proc/cpuinfo's vendor, family and model tell it (AMD's Zen 1 to 5), else
    None: CPUs of one kind and one model name ("AMD EPYC" in a VM) differ by it, AVX2's cost by width above all."""
    if cpuinfo is None:
        return _this_cpu_core()
    field = lambda name: re.search(rf"^{name}\s*:\s*(\S+)", cpuinfo, re.MULTILINE)  # noqa: E731 - the first CPU's
    vendor, family, model = field("vendor_id"), field("cpu family"), field("model")
    if not (vendor and family and model) or vendor.group(1) != "AuthenticAMD":
        return None
    try:
        family_n, model_n = int(family.group(1)), int(model.group(1))
    except ValueError:
        return None
    return next((core for f, lo, hi, core in AMD_CORES if f == family_n and lo <= model_n <= hi), None)


@functools.cache
def _this_cpu_core() -> str | None:
    """This machine's cpu_core, read once a process (every Runtime.key asks)."""
    try:
        return cpu_core(Path("/proc/cpuinfo").read_text())
    except OSError:
        return None


def cpu_identity() -> dict[str, str]:
    """The CPU a measurement names: its model name and, where told, its core generation (cpu_core)."""
    return {"cpu": cpu_name(), **({"core": core} if (core := cpu_core()) else {})}


def machine_info(device: torch.device | str | None = None, dtype: torch.dtype | str | None = None) -> dict[str, Any]:
    """A JSON-able record of where a measurement runs: CPU, ISA features, threads, torch, device and dtype."""
    flags = cpu_flags()
    device = torch.device(device or "cpu")
    info: dict[str, Any] = {
        **cpu_identity(),
        "isa": [f for f in ISA_FLAGS if f in flags],
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "openmp_wait": openmp_wait(),
        "torch": torch.__version__,
        "device": device.type,
    }
    if device.type == "cuda" and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(device)
    if dtype is not None:
        info["dtype"] = str(dtype).removeprefix("torch.")
    return info


def machine_line(info: dict[str, Any]) -> str:
    """One line for a table's caption: 'AMD EPYC (avx512f, avx2), 2 threads, torch 2.13.0, float32' (and how linear
    layers and attention ran, where the record says: runtime.Runtime.record)."""
    where = info.get("gpu") or info["cpu"] + (f" {info['core']}" if info.get("core") else "")  # AMD EPYC Zen 1
    isa = f" ({', '.join(info['isa'])})" if info.get("isa") and "gpu" not in info else ""
    dtype = f", {info['dtype']}" if info.get("dtype") else ""
    kernel = str(info.get("linear", ""))
    rows = NAMES.get(kernel.removesuffix("_rows")) if kernel.endswith("_rows") else None
    linear = ", oneDNN-packed linear" if kernel == "onednn_packed" else f", {rows} rows linear" if rows else ""
    if linear and info.get("weight_bits") == 8:
        linear += " (8-bit weights)"
    if linear and info.get("packed_from_rows", 1) > 1:
        linear += f" from {info['packed_from_rows']} rows (torch's below)"
    attention = {"rows": ", attention row by row", "rows, a call each": ", attention row by row (a call each)",
                 "rows_kernel": ", attention row by row (rows kernel)"}.get(
        info.get("attention"), "")
    return f"{where}{isa}, {info['threads']} threads, torch {info['torch']}{dtype}{linear}{attention}"
