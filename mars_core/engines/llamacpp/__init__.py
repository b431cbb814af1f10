"""MARS on llama.cpp: the model as a GGUF, and an Engine over llama-cpp-python that prepare() measures as it does a
torch model (its own width check and cost curve).

    from mars_core.engines.llamacpp import load_llamacpp, llamacpp_runtime
    engine, tokenizer = load_llamacpp(weights="bf16")
    generate(engine, tokenizer, "Hi", strategy="verified", runtime=llamacpp_runtime(engine))

gguf_export needs only `gguf`; the engine and the loader need llama-cpp-python (pip install -e
".[llamacpp]"), imported when first used.
"""

from .gguf_export import WEIGHTS, cached_gguf, export_gguf, gguf_path

__all__ = ["SHIPPED", "WEIGHTS", "LlamaCppEngine", "cached_gguf", "export_gguf", "gguf_path", "llamacpp_runtime",
           "load_llamacpp"]


def __getattr__(name: str):
    """The parts that need llama-cpp-python, imported on first use."""
    if name == "LlamaCppEngine":
        from .engine import LlamaCppEngine

        return LlamaCppEngine
    if name == "llamacpp_runtime":
        from .cost import llamacpp_runtime

        return llamacpp_runtime
    if name in ("load_llamacpp", "SHIPPED"):
        from . import load

        return getattr(load, name)
    raise AttributeError(name)
