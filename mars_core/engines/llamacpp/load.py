"""Load a MARS checkpoint onto llama.cpp: (engine, tokenizer), ready for mars_core.generate / stream.

    engine, tokenizer = load_llamacpp(weights="q8_0")           # the embedded model (SmolLM2-135M + MARS, B = 4)
    runtime = llamacpp_runtime(engine)                           # llama.cpp's cost curve, for verified's planner
    generate(engine, tokenizer, "Hi", strategy="verified", runtime=runtime)

The tokenizer is load()'s (with its mask token), so prompts encode exactly as they do on torch.
"""

from __future__ import annotations

import os
from typing import Any

from .engine import LlamaCppEngine
from .gguf_export import WEIGHTS, export_gguf, gguf_path


def default_kv(weights: str) -> str:
    """The KV cache's type: F32 beside F32 weights (what a torch fp32 forward keeps), else llama.cpp's F16."""
    return "f32" if weights == "f32" else "f16"


def load_llamacpp(source: str | os.PathLike | None = None, *, weights: str = "bf16", threads: int | None = None,
                  n_ctx: int = 4096, invariant: bool = False, kv_type: str | None = None, gpu_layers: int = -1
                  ) -> tuple[LlamaCppEngine, Any]:
    """(llama.cpp engine, tokenizer) of a MARS checkpoint (None: the embedded model), its GGUF written once per
    weight type ("f32", "bf16", "q8_0") and kept; invariant: every forward at least two rows (see engine.py);
    gpu_layers: layers on the GPU of a GPU build (-1 all, 0 none)."""
    from ...load import load, resolve_source

    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {WEIGHTS}, got {weights!r}")
    resolved = resolve_source(source)
    model, tokenizer = load(resolved, dtype="fp32", device="cpu")
    path = gguf_path(resolved, weights)
    if not path.is_file():
        export_gguf(model, tokenizer, path, weights=weights, name=os.path.basename(resolved))
    eos = getattr(model.generation_config, "eos_token_id", None)
    del model
    engine = LlamaCppEngine(path, n_ctx=n_ctx, threads=threads, kv_type=kv_type or default_kv(weights),
                            invariant=invariant, eos_token_id=eos, mask_id=tokenizer.mask_token_id,
                            gpu_layers=gpu_layers)
    engine.dtype = weights
    return engine, tokenizer
