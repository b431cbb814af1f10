"""MARS on llama.cpp: the model as a GGUF, an Engine over llama-cpp-python, and llama.cpp's own cost curve.

    from mars_core.engines.llamacpp import load_llamacpp, llamacpp_runtime
    engine, tokenizer = load_llamacpp(weights="bf16")
    generate(engine, tokenizer, "Hi", strategy="verified", runtime=llamacpp_runtime(engine))

gguf_export needs only `gguf`; the engine, the loader and the curve need llama-cpp-python (pip install -e
".[llamacpp]"), imported when first used.
"""

from .gguf_export import WEIGHTS, cached_gguf, export_gguf, gguf_path

__all__ = ["WEIGHTS", "LlamaCppEngine", "cached_gguf", "cost_curve", "export_gguf", "gguf_path", "llamacpp_runtime",
           "load_llamacpp", "width_check"]


def __getattr__(name: str):
    """The parts that need llama-cpp-python, imported on first use."""
    if name == "LlamaCppEngine":
        from .engine import LlamaCppEngine

        return LlamaCppEngine
    if name in ("cost_curve", "llamacpp_runtime"):
        from . import cost

        return getattr(cost, name)
    if name == "width_check":
        from .check import width_check

        return width_check
    if name == "load_llamacpp":
        from .load import load_llamacpp

        return load_llamacpp
    raise AttributeError(name)
