"""What a llama.cpp engine's measurements depend on (record: the CPU, the build, the GGUF, threads, mode), and how
the page names where it runs.

Widths cost differently on llama.cpp than on torch (one row takes ggml's dot products, two or more tinyBLAS: about
2x at width 2 in BF16 and Q8_0, 1.2x in F32), so the planner reads this engine's own curve: prepare(engine) times it
and checks its width invariance on the engine's forward, as for a torch model (runtime/prepare.py), kept by record().

    runtime = llamacpp_runtime(engine)  # prepare(engine): Runtime(cost=curve, width_check=..., live_cost=True)
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from ...machine import cpu_flags, cpu_identity
from ...runtime.engine import Engine
from ...runtime.prepare import prepare
from ...runtime.runtime import Runtime


def record(engine: Engine) -> dict:
    """Where and how the curve was measured: the CPU and its core (and the GPU the layers run on), the build (its
    features, such as LLAMAFILE: without tinyBLAS every width takes the dot products, docs/llamacpp.md), the GGUF,
    threads, the KV type and the mode."""
    import llama_cpp

    isa = sorted(f for f in ("avx512_bf16", "avx512f", "avx2", "amx_bf16") if f in cpu_flags())
    return {**cpu_identity(), "isa": isa,
            "engine": f"llama.cpp (llama-cpp-python {llama_cpp.__version__})", "build": build_features(llama_cpp),
            "gguf": engine.path.name,
            "gguf_size": engine.path.stat().st_size, "threads": engine.threads, "kv": engine.kv_type,
            "invariant": engine.invariant, "extra_buffers": engine.extra_buffers,
            **({"gpu": engine.gpu} if engine.gpu else {})}


def build_features(llama_cpp: ModuleType) -> str:
    """The build's features as llama.cpp reports them ("CPU : AVX2 = 1 | ... | LLAMAFILE = 1 | ..."): two builds of
    one version may differ in kernels, and so in curve, width check and exactness."""
    return llama_cpp.llama_print_system_info().decode(errors="replace").strip(" |")


NOT_ISA = ("LLAMAFILE", "OPENMP", "REPACK", "ACCELERATE", "KLEIDIAI")  # ggml-cpu's switches that are not instructions


def build_isa(llama_cpp: ModuleType) -> list[str]:
    """The instruction sets llama.cpp's CPU backend says it runs with (its "CPU : ..." section's features "= 1": ["AVX",
    "AVX2", "F16C", "FMA", ...], AVX512* and AMX* where the build has them): what this engine's rows ran on."""
    section, isa = None, []
    for field in build_features(llama_cpp).split("|"):
        if " : " in field:  # "CPU : SSE3 = 1" opens the CPU section ("CUDA : ARCHS = 900" another)
            section, field = field.split(" : ", 1)
        name, _, value = field.partition("=")
        if section is not None and section.strip() == "CPU" and value.strip() == "1" and name.strip() not in NOT_ISA:
            isa.append(name.strip())
    return isa


def has_tinyblas(llama_cpp: ModuleType) -> bool:
    """Whether this build takes llamafile's tinyBLAS from two rows on (the default); without it (CMAKE_ARGS=
    "-DGGML_LLAMAFILE=OFF") every width takes the dot products and a row's logits do not depend on the width."""
    return "LLAMAFILE = 1" in build_features(llama_cpp)


def runs_on(gpu: str | None, threads: int, llama_cpp: ModuleType) -> str:
    """Where an engine runs, as the app's small print and the bench's line name it: "on NVIDIA H200" on a GPU build,
    else "2 threads", with ", tinyBLAS off" on a build without it (other kernels, other speeds: docs/llamacpp.md)."""
    if gpu:
        return f"on {gpu}"
    return f"{threads} thread{'s' if threads > 1 else ''}" + ("" if has_tinyblas(llama_cpp) else ", tinyBLAS off")


def llamacpp_runtime(engine: Engine, cache_dir: Path | None = None) -> Runtime:
    """prepare(engine): a Runtime whose cost curve is llama.cpp's (verified sizes its trees by it, priced again by each
    decode's own forwards: the curve's shape moves with other load on a shared CPU) and whose width check says what
    verified keeps on this machine (runtime.guarantee())."""
    return prepare(engine, cache_dir=cache_dir)
