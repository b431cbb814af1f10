"""python app.py's command line: its flags (each with an environment variable where a Space sets it) and the checks
that turn them into the app's one configuration (models.AppConfig)."""

from __future__ import annotations

import argparse
import os

from studio import engine, models


def compile_by_default(dtype: str | None = None) -> bool:
    """--compile's default: MARS_COMPILE where set ("1" on, "0" off), else only where the compiled forward was measured
    (docs/speed.md#the-forward-compiled): bf16 (--dtype auto or bf16) on our rows kernel, a CPU with AMX,
    AVX512-BF16, AVX-512 or AVX2, no GPU, the kernel not turned off (MARS_ROWS_KERNEL=0). Off elsewhere: a GPU's static
    decoders run CUDA graphs, and an fp32 CPU's compiled forward is not measured."""
    chosen = os.environ.get("MARS_COMPILE")
    if chosen is not None:
        return chosen == "1"
    if dtype not in (None, "auto", "bf16") or os.environ.get("MARS_ROWS_KERNEL", "1") == "0":
        return False
    import torch

    from mars_core.runtime import rows

    return not torch.cuda.is_available() and rows.flavor() is not None


def build_parser() -> argparse.ArgumentParser:
    """The app's flags."""
    parser = argparse.ArgumentParser(description="MARS Studio: race MARS against one-token decoding.")
    parser.add_argument("--model", default=os.environ.get("MARS_MODEL"),
                        help="MARS checkpoint: local folder, .gguf file or hub id (default: the embedded model)")
    parser.add_argument("--ar-model", default=os.environ.get("MARS_AR_MODEL"),
                        help="separate AR baseline (default: the MARS checkpoint decoding one token per forward)")
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    parser.add_argument("--dtype", default=os.environ.get("MARS_DTYPE"), choices=["auto", "bf16", "fp32"],
                        help="weights' dtype (default auto: bf16 where the CPU/GPU runs it fast; fp32: verified lanes "
                             "then equal AR token for token, no bf16 rounding)")
    parser.add_argument("--engine", default=os.environ.get("MARS_ENGINE", "torch"),
                        help="what the race decodes on: torch (default) or llama.cpp (pip install -e \".[llamacpp]\")")
    parser.add_argument("--llamacpp-weights", default=os.environ.get("MARS_LLAMACPP_WEIGHTS", "bf16"),
                        help="llama.cpp's GGUF weight type: f32, bf16 (default) or q8_0 (written once, cached)")
    parser.add_argument("--llamacpp-threads", type=int, default=None, help="llama.cpp's threads (default: every core)")
    parser.add_argument("--llamacpp-invariant", action="store_true",
                        help="llama.cpp forwards at two rows or more: the verified lane is AR bit for bit (one kernel "
                             "path for every width), one-token decoding a width-2 forward per token")
    parser.add_argument("--static-shapes", action="store_true", default=os.environ.get("MARS_STATIC") == "1",
                        help="decode at a few fixed widths into a KV cache allocated once (CUDA graphs on a GPU; "
                             "docs/speed.md#static-shapes); default: on a GPU, where it measured faster, and not on a "
                             "CPU, where the dynamic decoders are faster")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="compile the forward in the background once a model is ready (inductor, kept under "
                             "MARS_CACHE; docs/speed.md#the-forward-compiled); Runs are served uncompiled meanwhile. "
                             "Default: where it was measured, bf16 on our rows kernel (AMX, AVX512-BF16, AVX-512 or "
                             "AVX2) and no GPU, else off (env MARS_COMPILE=1 or 0 decides instead)")
    parser.add_argument("--concurrency", type=int, default=int(os.environ.get("MARS_CONCURRENCY", "4")),
                        help="generations served at once (the queue holds the rest)")
    parser.add_argument("--batching", action=argparse.BooleanOptionalAction,
                        default=os.environ.get("MARS_BATCHING", "1") != "0",
                        help="visitors' race lanes share forwards (continuous batching: each answer is still its "
                             "answer alone; docs/app.md#a-class-racing-at-once); --no-batching: each race decodes "
                             "alone in one of --concurrency slots (env MARS_BATCHING=0)")
    parser.add_argument("--trainings", type=int, default=int(os.environ.get("MARS_TRAININGS", "1")),
                        help="Train tab runs at once, all visitors together (the others get a message)")
    parser.add_argument("--no-preload", action="store_true", help="load the models on the first request only")
    parser.add_argument("--record-example", action="store_true",
                        help="race the default prompt and save it (assets/race_example.json) as the page's first "
                             "content, then exit")
    return parser


def app_config(parser: argparse.ArgumentParser, args: argparse.Namespace) -> models.AppConfig:
    """The configuration the flags ask for; parser.error (one message, exit 2) for values out of range."""
    for name in (args.model, args.ar_model):
        try:
            models.check_model_choice(name)
        except ValueError as err:
            parser.error(str(err))
    if args.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    if args.trainings < 0:
        parser.error("--trainings must be at least 0 (0: the Train tab refuses every run)")
    try:
        chosen = engine.check_engine(args.engine, args.llamacpp_weights.lower(), args.ar_model)
    except ValueError as err:
        parser.error(str(err))
    embedded = (None, "", "default")  # `default` names the embedded model: its recorded race and note are shown
    return models.AppConfig(model=None if args.model in embedded else args.model,
                            ar_model=None if args.ar_model in embedded else args.ar_model,
                            concurrency=args.concurrency, batching=args.batching,
                            dtype=None if args.dtype in (None, "auto") else args.dtype,
                            engine=chosen, llamacpp_weights=args.llamacpp_weights.lower(),
                            llamacpp_threads=args.llamacpp_threads,
                            llamacpp_invariant=args.llamacpp_invariant, trainings=args.trainings,
                            static=True if args.static_shapes else None,
                            compile=compile_by_default(args.dtype) if args.compile is None else args.compile)
