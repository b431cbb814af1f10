"""llama.cpp's own cost curve: seconds of one cached forward by width, the curve verified decoding sizes trees by.

Widths cost differently on llama.cpp than on torch (one row takes ggml's dot products, two or more tinyBLAS: about
2x at width 2 in BF16 and Q8_0, 1.2x in F32), so the planner must read this engine's curve, not torch's. Measured
once per machine, GGUF, threads and mode, and kept on disk (runtime.timing); the fastest of interleaved rounds. The
planner reads only its shape, t(w) / t(1), and that moves between two hosts of one CPU model and under load, so a
kept curve is checked against a few forwards timed at load and timed again where its shape has moved.

    runtime = llamacpp_runtime(engine, tokenizer)  # Runtime(cost=curve, width_check=...): generate(..., runtime=)
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from types import ModuleType

import torch

from ...machine import cpu_flags, cpu_name
from ...runtime.curve import CostCurve, shape_moved
from ...runtime.engine import Engine
from ...runtime.runtime import Runtime, WidthCheck
from ...runtime.timing import cache_root, kept, machine_busy, read_kept, seconds
from .check import causal, width_check

WIDTHS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32)
CONTEXT = 30  # tokens cached before the timed forward (a short chat prompt)
SPOT_WIDTHS = (1, 4, 8)  # widths a kept curve is checked at when it is read
DRIFT = 1.2  # a kept curve whose t(w) / t(1) is off by this factor either way from one timed now is timed again


def record(engine: Engine) -> dict:
    """Where and how the curve was measured: the CPU (and the GPU the layers run on), the build (its features, such
    as LLAMAFILE: without tinyBLAS every width takes the dot products, docs/llamacpp.md), the GGUF, threads, the KV
    type and the mode."""
    import llama_cpp

    return {"cpu": cpu_name(), "isa": sorted(f for f in ("avx512_bf16", "avx512f", "avx2", "amx_bf16")
                                             if f in cpu_flags()),
            "engine": f"llama.cpp (llama-cpp-python {llama_cpp.__version__})", "build": build_features(llama_cpp),
            "gguf": engine.path.name,
            "gguf_size": engine.path.stat().st_size, "threads": engine.threads, "kv": engine.kv_type,
            "invariant": engine.invariant, **({"gpu": engine.gpu} if engine.gpu else {})}


def build_features(llama_cpp: ModuleType) -> str:
    """The build's features as llama.cpp reports them ("CPU : AVX2 = 1 | ... | LLAMAFILE = 1 | ..."): two builds of
    one version may differ in kernels, and so in curve, width check and exactness."""
    return llama_cpp.llama_print_system_info().decode(errors="replace").strip(" |")


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


def curve_path(engine: Engine, cache_dir: Path | None = None) -> Path:
    """Where this engine's curve is kept: <cache>/llamacpp_cost/<hash of record()>.json."""
    key = hashlib.sha256(json.dumps(record(engine), sort_keys=True).encode()).hexdigest()[:16]
    return (cache_dir or cache_root() / "llamacpp_cost") / f"{key}.json"


def chain_inputs(width: int, start: int, token: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ids, positions and what each sees of `width` new tokens in a causal run after `start` cached ones."""
    ids = torch.full((1, width), token, dtype=torch.long)
    positions = torch.arange(start, start + width)[None]
    return ids, positions, causal(width)


def time_widths(engine: Engine, widths: tuple[int, ...] = WIDTHS, rounds: int = 5, context: int = CONTEXT,
                token: int = 1) -> list[float]:
    """Fastest seconds of one forward per width (every slot's logits read, as verified does), after `context`
    cached tokens; rounds interleave the widths, so a burst of other work spoils one round, not one width."""
    cache = engine.new_cache()
    engine.hidden_states(*chain_inputs(context, 0, token), cache)
    cache.keep(context)
    best = [float("inf")] * len(widths)
    for _ in range(rounds + 1):  # the first round warms up
        for i, width in enumerate(widths):
            ids, positions, seen = chain_inputs(width, context, token)
            best[i] = min(best[i], seconds(lambda: engine.hidden_states(ids, positions, seen, cache)))
            cache.keep(0)
    return best


def spot_seconds(engine: Engine) -> list[float]:
    """Seconds of forwards of SPOT_WIDTHS tokens now, the fastest of five interleaved rounds (under a second; fewer
    rounds read the shape too noisily for DRIFT: docs/speed.md#a-kept-curve-checked-at-load)."""
    return time_widths(engine, SPOT_WIDTHS, rounds=5)


def drifted(curve: CostCurve, now: list[float]) -> bool:
    """Whether the curve's shape at SPOT_WIDTHS is off by DRIFT either way from forwards timed now (shape_moved)."""
    return shape_moved(curve.at(1, SPOT_WIDTHS), now, DRIFT)


def cost_curve(engine: Engine, rounds: int = 5, cache_dir: Path | None = None, measure: bool = True
               ) -> CostCurve | None:
    """This engine's curve: the one kept on disk where forwards timed now still fit its shape (drifted), else
    measured now and kept, with the load it was timed under; measure=False reads the kept one (or None), untimed."""
    path = curve_path(engine, cache_dir)
    if not measure:
        return read_kept(path, CostCurve.from_dict)

    def timed() -> CostCurve:
        times = time_widths(engine, rounds=rounds)
        machine = {**record(engine), "busy": machine_busy(), "load_average": os.getloadavg()[0]}
        return CostCurve((1,), WIDTHS, (tuple(times),), machine)

    return kept(path, CostCurve.from_dict, timed, CostCurve.to_dict, timed=False,
                holds=lambda curve: not drifted(curve, spot_seconds(engine)))


CHECK_PROMPT = "Name three rivers in Europe and say which is longest."
CHECK_TEXT = "The Danube, the Rhine and the Volga; the Volga is the longest of the three."


def kept_width_check(engine: Engine, tokenizer, cache_dir: Path | None = None) -> WidthCheck:
    """check.width_check on a chat prompt and 16 tokens of text, kept beside the curve (same machine and mode)."""
    from ...generate import encode_prompt

    path = curve_path(engine, cache_dir).with_suffix(".width.json")
    prompt, text = encode_prompt(tokenizer, CHECK_PROMPT), encode_prompt(tokenizer, CHECK_TEXT)[:16]
    return kept(path, WidthCheck.from_dict, lambda: width_check(engine, prompt, text), WidthCheck.to_dict,
                timed=False)


def llamacpp_runtime(engine: Engine, tokenizer=None, cache_dir: Path | None = None, **kwargs) -> Runtime:
    """A Runtime whose cost curve is llama.cpp's (kwargs: cost_curve's): verified then sizes its trees by it, priced
    again by each decode's own forwards (live_cost: the curve's shape moves with other load on a shared CPU). With
    the tokenizer, also what a width check found on this machine, so runtime.guarantee() says what verified keeps."""
    check = kept_width_check(engine, tokenizer, cache_dir) if tokenizer is not None else None
    return Runtime(cost=cost_curve(engine, cache_dir=cache_dir, **kwargs), width_check=check, live_cost=True)
