"""The engine the race decodes on, chosen at launch: torch (the served model) or llama.cpp (python app.py --engine
llama.cpp): the model as a GGUF, a llama.cpp engine per racing lane (an engine holds one decode at a time), the
runtime with llama.cpp's own cost curve and width check, and how the page names it. The other tabs run torch."""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from mars_core import stream
from mars_core.runtime import Runtime
from studio import models

ENGINES = ("torch", "llama.cpp")
ALIASES = {"llamacpp": "llama.cpp", "llama-cpp": "llama.cpp", "llama_cpp": "llama.cpp"}
WEIGHTS = ("f32", "bf16", "q8_0")  # mars_core.engines.llamacpp.WEIGHTS (imported there only with the extra)
STAGE = "writing the GGUF for llama.cpp and timing its forwards by width (once: cached)"
LANES = 3  # engines made with the model: one per race lane (more are made when races overlap)


def check_engine(engine: str, weights: str, ar_model: str | None = None) -> str:
    """The engine's canonical name; a ValueError with one message for an unknown engine or weight type, a missing
    llama-cpp-python, or a separate AR model on llama.cpp (its AR lane is the same GGUF, one token per forward)."""
    name = ALIASES.get(engine.lower(), engine.lower())
    if name not in ENGINES:
        raise ValueError(f"--engine must be one of {', '.join(ENGINES)}; got {engine!r}")
    if name == "torch":
        return name
    if weights not in WEIGHTS:
        raise ValueError(f"--llamacpp-weights must be one of {', '.join(WEIGHTS)}; got {weights!r}")
    if importlib.util.find_spec("llama_cpp") is None:
        raise ValueError('--engine llama.cpp needs llama-cpp-python: pip install -e ".[llamacpp]"')
    if ar_model:
        raise ValueError("--engine llama.cpp races one checkpoint (AR is its own one-token decoding): "
                         "--ar-model is for --engine torch")
    return name


@dataclass
class Pool:
    """The llama.cpp engines of one served model: idle ones, lent to a lane for its decode, made when none is idle
    (three per race, more when races overlap), sharing the tokenizer and the runtime."""

    first: Any
    tokenizer: Any
    runtime: Runtime
    idle: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.idle.append(self.first)

    def checkout(self) -> Any:
        """An idle engine, or a new one."""
        with self.lock:
            if self.idle:
                return self.idle.pop()
        return self.make()

    def make(self) -> Any:
        """A new engine like the first one (its GGUF, context, threads, KV type, mode and mask token)."""
        return self.first.twin()

    def release(self, engine: Any) -> None:
        """The engine is idle again."""
        with self.lock:
            self.idle.append(engine)

    def stream(self, prompt: str, **options: Any) -> Iterator:
        """stream() on an engine of its own, given back when the lane ends, fails or is dropped."""
        engine = self.checkout()
        try:
            yield from stream(engine, self.tokenizer, prompt, runtime=self.runtime, **options)
        finally:
            self.release(engine)


POOLS: dict[str, Pool] = {}  # by model name (models.key_of)


def on_llamacpp() -> bool:
    """Whether the app was launched with --engine llama.cpp."""
    return models.CONFIG.engine == "llama.cpp"


def prepare(name: str | None) -> None:
    """The preparation stage of llama.cpp: the GGUF (written once per weight type), an engine per race lane,
    llama.cpp's cost curve and width check (measured once per machine, kept on disk)."""
    from mars_core.engines.llamacpp import llamacpp_runtime, load_llamacpp

    config = models.CONFIG
    engine, tokenizer = load_llamacpp(name, weights=config.llamacpp_weights, threads=config.llamacpp_threads,
                                      invariant=config.llamacpp_invariant)
    made = POOLS[models.key_of(name)] = Pool(engine, tokenizer, llamacpp_runtime(engine))
    made.idle.extend(made.make() for _ in range(LANES - 1))  # a race's lanes never wait for an engine's load


def stages(name: str | None) -> list[tuple[str, Callable[[], Any]]]:
    """The served model's llama.cpp stage, before it loads (on llama.cpp only; models.EXTRA_STAGES)."""
    return [(STAGE, lambda: prepare(name))] if on_llamacpp() and name == models.CONFIG.model else []


models.EXTRA_STAGES.append(stages)


def pool(name: str | None) -> Pool:
    """The served model's llama.cpp engines (prepared with the model: models.get_model)."""
    models.get_model(name)
    return POOLS[models.key_of(name)]


def shares_forwards(temperature: float = 0.0) -> bool:
    """Whether visitors' race lanes at this temperature share forwards (the scheduler, its queue in place of a
    generation slot: torch, CONFIG.batching, greedy; a sampled race decodes alone, in a slot)."""
    return models.CONFIG.batching and not on_llamacpp() and temperature == 0


def lane_stream(name: str | None, served: tuple, prompt: str, runtime: Runtime, **options: Any) -> Iterator:
    """A race lane's StreamEvents: on torch the scheduler of its model `name` (served: that model and its tokenizer;
    its forwards shared with other visitors' lanes of the same strategy; greedy), or stream() over the served model
    and its runtime; on llama.cpp an engine of the lane's own with llama.cpp's runtime."""
    if on_llamacpp():
        return pool(name).stream(prompt, **options)
    if shares_forwards(options["control"].temperature):
        return models.scheduler(name).stream(prompt, **options)
    return stream(*served, prompt, runtime=runtime, **options)


def race_runtime(name: str | None) -> Runtime:
    """The runtime the race's lanes decode with (its width check says whether verified is AR bit for bit)."""
    return pool(name).runtime if on_llamacpp() else models.get_runtime(name)


def served_engine() -> Any | None:
    """The served model's first llama.cpp engine once prepared (None on torch, or before it is prepared)."""
    found = POOLS.get(models.key_of(models.CONFIG.model)) if on_llamacpp() else None
    return found.first if found is not None else None


def gpu() -> str | None:
    """The GPU the served llama.cpp engine runs on (a CUDA build), else None."""
    first = served_engine()
    return first.gpu if first is not None else None


def label() -> str:
    """How the small print names the engine: "llama.cpp BF16, 2 threads" (", tinyBLAS off" on a build without it,
    whose kernels and speeds differ: docs/llamacpp.md), or "llama.cpp BF16 on NVIDIA H200" on a GPU build; "" on
    torch."""
    if not on_llamacpp():
        return ""
    from mars_core.engines.llamacpp.cost import runs_on
    from mars_core.engines.llamacpp.engine import binding

    first = served_engine()
    gpu = first.gpu if first is not None else None
    threads = first.threads if first is not None else (models.CONFIG.llamacpp_threads or os.cpu_count() or 1)
    return f"llama.cpp {models.CONFIG.llamacpp_weights.upper()}{' ' if gpu else ', '}{runs_on(gpu, threads, binding())}"
