"""The rows kernel (kernels/rows.cpp): bf16 linear layers whose weights stream from memory once a call and whose
rows cost what one row costs up to 16 (AMX tiles) or 8 (AVX512-BF16's vdpbf16ps), each row's bits its own, and
attention by rows. Built once per machine into the cache folder with torch's C++ extension builder, loaded in every
process after (docs/speed.md#the-amx-rows-kernel, #the-rows-kernel-without-amx-avx512-bf16).

    if rows_kernel():                    # built (or loaded) here on first call; where not, why_not() says why
        y = torch.ops.mars_rows.linear(x, torch.ops.mars_rows.pack(w), w.shape[0], None)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import time
from pathlib import Path

import torch

from ..machine import cpu_flags
from .timing import cache_root

SOURCE = Path(__file__).with_name("kernels") / "rows.cpp"
FLAGS = ("-O3", "-march=native", "-fopenmp")  # native: built on the machine that runs it, kept by its CPU's flags
# /proc/cpuinfo flags of the kernel's two bf16 dot products: AMX's tiles, or AVX512-BF16 (AVX-512 vectors)
FLAVORS = {"amx": {"amx_bf16", "amx_tile"}, "avx512_bf16": {"avx512_bf16", "avx512f"}}
NAMES = {"amx": "AMX", "avx512_bf16": "AVX512-BF16"}  # each flavor in a page's words
_LOCK = threading.Lock()
_STATE: dict[str, str | float | None] = {}  # "why": None once loaded, else why not; "seconds": to build or load it


def build_id() -> str:
    """The build's identity: a hash of the source, the compiler flags, the torch version and the CPU flags. A record of
    measurements under the kernel names it, so a changed kernel never inherits what its predecessor was measured or
    checked at."""
    key = hashlib.sha256(SOURCE.read_bytes() + " ".join(FLAGS).encode() + torch.__version__.encode()
                         + " ".join(sorted(cpu_flags())).encode())
    return key.hexdigest()[:16]


def _folder() -> Path:
    """The build folder, by build_id() (another source, machine or torch builds anew)."""
    return cache_root() / "kernels" / f"rows-{build_id()}"


def why_not() -> str | None:
    """Why this machine has no rows kernel, or None where it has one (built and loaded on first call, ~40 s)."""
    with _LOCK:
        if "why" not in _STATE:
            began = time.perf_counter()
            _STATE["why"] = _build()
            _STATE["seconds"] = time.perf_counter() - began
        return _STATE["why"]


def flavor() -> str | None:
    """Which bf16 dot product this CPU gives the kernel: "amx" (tiles, preferred) or "avx512_bf16"; None: neither."""
    flags = cpu_flags()
    return next((name for name, needs in FLAVORS.items() if needs <= flags), None)


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


def _build() -> str | None:
    if flavor() is None:
        return "no AMX or AVX512-BF16 on this CPU"
    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return "no bf16 kernels in this torch build"
    if not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
        return "no C++ compiler on this machine"
    if os.environ.get("MARS_ROWS_KERNEL", "1") == "0":
        return "turned off (MARS_ROWS_KERNEL=0)"
    from torch.utils.cpp_extension import load

    folder = _folder()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        load(name=f"mars_rows_{folder.name.removeprefix('rows-')}", sources=[str(SOURCE)], extra_cflags=list(FLAGS),
             extra_ldflags=["-fopenmp"], build_directory=str(folder), is_python_module=False, verbose=False)
        if torch.ops.mars_rows.flavor() != flavor():  # built without the instructions the CPU says it has
            return f"the compiler built it for {torch.ops.mars_rows.flavor()}, not {flavor()}"
        if not torch.ops.mars_rows.available():
            return "the OS gave no AMX tile state"
    except Exception as err:  # noqa: BLE001 - a failed build leaves oneDNN's kernel serving
        lines = str(err).splitlines() or [""]
        said = next((line for line in lines if "error:" in line), lines[0])  # the compiler's first error, if any
        return f"building it failed ({type(err).__name__}: {said.strip()[:200]})"
    _shapes()
    return None


def _shapes() -> None:
    """The shapes of the ops a compiled graph calls (runtime/compiled.py traces them on fake tensors)."""
    torch.library.register_fake("mars_rows::routed", lambda x, weight, bias: x.new_empty(*x.shape[:-1],
                                                                                          weight.shape[0]))
    torch.library.register_fake("mars_rows::routed_siblings", lambda x, weights, biases: x.new_empty(
        *x.shape[:-1], sum(w.shape[0] for w in weights)))
    torch.library.register_fake("mars_rows::attention", lambda q, k, v, mask, scale: q.new_empty(
        q.shape[0], q.shape[2], q.shape[1], q.shape[3]))
