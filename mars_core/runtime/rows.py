"""The rows kernel (kernels/rows.cpp): bf16 linear layers whose weights stream from memory once a call and whose
rows cost what one row costs up to 16 (AMX tiles), 8 (AVX512-BF16's vdpbf16ps) or 2 (AVX2: the bf16 weights widened
to fp32 in registers), each row's bits its own, and attention by rows. Built once per machine into the cache folder
with torch's C++ extension builder, loaded in every process after (docs/speed.md#the-rows-kernel).

    if rows_kernel():                    # built (or loaded) here on first call; where not, why_not() says why
        y = torch.ops.mars_rows.linear(x, torch.ops.mars_rows.pack(w), w.shape[0], None)
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from ..machine import NAMES, cpu_flags, cxx_compiler
from .timing import cache_root

SOURCE = Path(__file__).with_name("kernels") / "rows.cpp"
FLAGS = ("-O3", "-march=native", "-fopenmp")  # native: built on the machine that runs it, kept by its CPU's flags
# /proc/cpuinfo flags of the kernel's builds: AMX's tiles, AVX512-BF16 (AVX-512 vectors), AVX-512 without BF16 (Intel's
# Skylake to Ice Lake Xeons, Tiger Lake laptops: the 8-bit path in 512-bit vectors with VNNI where the CPU has it,
# attention in AVX-512), or AVX2's fp32 FMAs on weights widened in registers (laptops; AMD before Zen 4); the first
# this CPU has is the one built, unless MARS_ROWS_FLAVOR names another it has
FLAVORS = {"amx": {"amx_bf16", "amx_tile"}, "avx512_bf16": {"avx512_bf16", "avx512f"},
           "avx512": {"avx512f", "avx2", "fma"}, "avx2": {"avx2", "fma"}}  # avx512: what rows.cpp needs (F alone)
# what a flavor asked for adds to FLAGS: AVX512-BF16 on an AMX CPU is built without the AMX path, AVX-512 without
# BF16 and AMX, AVX2 on an AVX-512 CPU without AVX-512, AVX-VNNI and AMX at all (the compiler may then use none of
# their instructions in the kernel)
NO_AMX = ("-mno-amx-tile", "-mno-amx-bf16", "-mno-amx-int8")
FORCED_FLAGS = {"amx": (), "avx512_bf16": ("-DMARS_NO_AMX",), "avx512": ("-mno-avx512bf16", *NO_AMX),
                "avx2": ("-mno-avx512f", "-mno-avxvnni", *NO_AMX)}
_LOCK = threading.Lock()
# "why": None once loaded, else why not; "seconds": to build or load it; "flavor": the flavor the loaded build runs
_STATE: dict[str, str | float | None] = {}
_FAKES: list[bool] = []  # the ops' fakes registered (once a process)


def asked() -> str | None:
    """The flavor MARS_ROWS_FLAVOR asks for ("amx", "avx512_bf16", "avx512" or "avx2"; tests use it to run every
    path this CPU has), or None where it is not set."""
    return os.environ.get("MARS_ROWS_FLAVOR") or None


def runnable() -> list[str]:
    """The flavors this CPU can run, the preferred (AMX) first."""
    flags = cpu_flags()
    return [name for name, needs in FLAVORS.items() if needs <= flags]


def compile_flags() -> tuple[str, ...]:
    """The compiler flags of this process's build: FLAGS, and what MARS_ROWS_FLAVOR's flavor adds."""
    return FLAGS + FORCED_FLAGS.get(asked() or "", ())


def build_id() -> str:
    """The build's identity: a hash of the source, the compiler flags (a flavor asked for by MARS_ROWS_FLAVOR builds
    with its own), the torch version and the CPU flags. A record of measurements under the kernel names it, so a
    changed kernel never inherits what its predecessor was measured or checked at."""
    key = hashlib.sha256(SOURCE.read_bytes() + " ".join(compile_flags()).encode() + torch.__version__.encode()
                         + " ".join(sorted(cpu_flags())).encode())
    return key.hexdigest()[:16]


def _folder() -> Path:
    """The build folder, by build_id() (another source, machine, torch or flavor asked for builds anew)."""
    return cache_root() / "kernels" / f"rows-{build_id()}"


def why_not() -> str | None:
    """Why this machine has no rows kernel, or None where it has one (built on first call where none is kept, then
    loaded)."""
    with _LOCK:
        if "why" not in _STATE:
            began = time.perf_counter()
            _STATE["why"] = _build()
            _STATE["seconds"] = time.perf_counter() - began
        return _STATE["why"]


def flavor() -> str | None:
    """Which bf16 dot product serves: once the kernel is loaded, the flavor its build runs (the compiler may have
    built AVX512-BF16 on an AMX CPU); before, the one it would be built for: MARS_ROWS_FLAVOR's where this CPU has it,
    else "amx" (tiles, preferred), "avx512_bf16", "avx512" or "avx2"; None: none (or not the one asked for)."""
    if _STATE.get("flavor"):
        return _STATE["flavor"]
    can = runnable()
    if asked():
        return asked() if asked() in can else None
    return can[0] if can else None


def note() -> str:
    """What serves, in words for a record: the rows kernel, its flavor and the seconds it took to build or load, or
    why not."""
    why = why_not()
    return (f"serving, {flavor()} (built or loaded in {_STATE['seconds']:.0f} s)" if why is None
            else f"not serving: {why}")


def must_build() -> bool:
    """Whether the first why_not() here builds the kernel (this CPU can run it and no build is kept): a step worth
    telling a waiting user about."""
    return "why" not in _STATE and flavor() is not None and not any(_folder().glob("*.so"))


def rows_kernel() -> bool:
    """Whether the rows kernel serves here (why_not() is None)."""
    return why_not() is None


@contextmanager
def feeding(fed: torch.Tensor | None) -> Iterator[None]:
    """Inside, in this thread, the rows kernel's linear layers (mars_rows::routed and routed_siblings, eager and
    compiled alike) compute only the rows fed [b, W] marks, for calls of b * W rows; the others come out 0. A
    decoding forward pads samples to the widest one's columns, and a row's bits are its own whatever shares its call
    (width and batch invariance), so a fed row's numbers are unchanged (kernels/rows.cpp `feeding`). None, or where
    the kernel does not serve: every row, as outside."""
    if fed is None or not rows_kernel():
        yield
        return
    torch.ops.mars_rows.feeding(fed)
    try:
        yield
    finally:
        torch.ops.mars_rows.feeding(None)


def _build() -> str | None:
    can, want = runnable(), asked()
    if not can:
        return "no AMX, AVX512-BF16 or AVX2 with FMA on this CPU"
    if want is not None and want not in FLAVORS:
        return f"MARS_ROWS_FLAVOR={want} names no flavor ({', '.join(FLAVORS)})"
    if want is not None and want not in can:
        return f"MARS_ROWS_FLAVOR={want}, but this CPU has no {NAMES[want]}"
    if (want or can[0]) in ("amx", "avx512_bf16") and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return "no bf16 kernels in this torch build"
    if cxx_compiler() is None:
        return "no C++ compiler on this machine"
    if os.environ.get("MARS_ROWS_KERNEL", "1") == "0":
        return "turned off (MARS_ROWS_KERNEL=0)"
    folder = _folder()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        _load(folder)
        built = torch.ops.mars_rows.flavor()
        if built not in can:  # built without the instructions of any path this CPU runs
            return f"the compiler built it for {built}, which this CPU cannot run (it has {', '.join(can)})"
        if want is not None and built != want:
            return f"the compiler built it for {built}, not {want} as MARS_ROWS_FLAVOR asks"
        if not torch.ops.mars_rows.available():
            return "the OS gave no AMX tile state"
    except Exception as err:  # noqa: BLE001 - a failed build leaves oneDNN's kernel serving
        lines = str(err).splitlines() or [""]
        said = next((line for line in lines if "error:" in line), lines[0])  # the compiler's first error, if any
        return f"building it failed ({type(err).__name__}: {said.strip()[:200]})"
    _STATE["flavor"] = built  # what serves: flavor() says so from now on
    _shapes()
    return None


def _load(folder: Path) -> None:
    """Build (or load the kept build of) the kernel in `folder`, one process at a time. torch's builder waits, with no
    end, while its `lock` file exists, and a process killed while building or loading leaves it behind; our lock is a
    flock the OS releases when its holder dies, so whoever holds it is alone here and a `lock` it finds is stale."""
    from filelock import FileLock
    from torch.utils.cpp_extension import load

    with FileLock(folder / "build.lock"):
        (folder / "lock").unlink(missing_ok=True)  # torch's baton, left by a process killed inside load()
        load(name=f"mars_rows_{folder.name.removeprefix('rows-')}", sources=[str(SOURCE)],
             extra_cflags=list(compile_flags()), extra_ldflags=["-fopenmp"], build_directory=str(folder),
             is_python_module=False, verbose=False)


def _on_cpu(op: str, **tensors: torch.Tensor | None) -> None:
    """An op's fake refuses a real tensor off the CPU as the op does (a compiled graph's fakes read as CPU tensors)."""
    for name, t in tensors.items():
        if t is not None and t.device.type != "cpu":
            raise RuntimeError(f"mars_rows.{op}: {name} is on {t.device}, the kernel takes CPU tensors")


def _routed(x, weight, bias):
    _on_cpu("routed", x=x, weight=weight, bias=bias)
    return x.new_empty(*x.shape[:-1], weight.shape[0])


def _routed_siblings(x, weights, biases):
    _on_cpu("routed_siblings", x=x, **{f"weights[{i}]": w for i, w in enumerate(weights)},
            **{f"biases[{i}]": b for i, b in enumerate(biases)})
    return x.new_empty(*x.shape[:-1], sum(w.shape[0] for w in weights))


def _attention(q, k, v, mask, scale):
    _on_cpu("attention", q=q, k=k, v=v, mask=mask)
    return q.new_empty(q.shape[0], q.shape[2], q.shape[1], q.shape[3])


def _shapes() -> None:
    """The shapes of the ops a compiled graph calls (runtime/compiled.py traces them on fake tensors); registered once
    a process."""
    if _FAKES:
        return
    torch.library.register_fake("mars_rows::routed", _routed)
    torch.library.register_fake("mars_rows::routed_siblings", _routed_siblings)
    torch.library.register_fake("mars_rows::attention", _attention)
    _FAKES.append(True)
