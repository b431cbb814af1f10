"""The llama.cpp engine: the decoders' forwards through llama-cpp-python's low-level API, one sequence at a time.

A forward feeds the tree as one llama.cpp batch: each slot's token, position, sequence ids (tree.plan: one sequence
per root-to-leaf path, seq 0 the committed chain) and whether its logits are read. Before the batch, seq 0's cells
(the committed tokens) are copied to every other sequence it uses (llama_memory_seq_cp), since a sequence's positions
must continue from its cells. keep() keeps the pending tokens and a prefix of the draft chain, all on seq 0: it
removes every other sequence and seq 0's cells from the first dropped position on.

Width: ggml computes one row with its dot-product kernels and two or more with llamafile's tinyBLAS, so a row's
numbers depend on whether its forward had one row. invariant=True feeds every forward at least two rows and reads at
least two logits rows (a spare token on a sequence of its own, removed after): every forward takes the same kernels,
so one-token decoding and verified decoding see the same numbers, at the price of a width-2 forward per token.
A build without tinyBLAS (-DGGML_LLAMAFILE=OFF, docs/llamacpp.md) takes the dot products at every width: exact
without the spare row, at a dearer width.

Where llama-cpp-python was built with a GPU backend (CMAKE_ARGS="-DGGML_CUDA=on"), gpu_layers=-1 (llama.cpp's
default) puts every layer and the output head there; the decoders still read each forward's logits on the host.
"""

from __future__ import annotations

import ctypes
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from ...machine import cpu_flags
from ...runtime.engine import Engine
from .tree import SeqPlan, plan

KV_TYPES = {"f32": 0, "f16": 1}  # ggml_type ids of the KV cache's element types
DEVICE_TYPES = {0: "CPU", 1: "GPU", 2: "iGPU", 3: "accelerator", 4: "meta"}  # enum ggml_backend_dev_type
PREFILL_ROWS = 64  # logits rows a decode's first forward reads when the engine has no mask id (B <= 64)


def binding() -> Any:
    """llama_cpp, imported on first use (an extra: pip install -e ".[llamacpp]")."""
    try:
        import llama_cpp
        from llama_cpp import _logger
    except ImportError as err:
        raise ImportError('the llama.cpp engine needs llama-cpp-python: pip install -e ".[llamacpp]"') from err
    if _logger.logger.level == logging.NOTSET:  # llama.cpp's load and graph chatter: errors only, unless asked
        _logger.logger.setLevel(logging.ERROR)
    return llama_cpp


def backend_devices(llama_cpp: Any) -> list[tuple[str, str]]:
    """(kind, description) of every device this llama.cpp build registered, e.g. ("GPU", "NVIDIA H200"), read
    through ggml's backend registry in the libggml beside the binding's libllama."""
    lib = ctypes.CDLL(str(Path(llama_cpp.llama_cpp._lib._name).with_name("libggml.so")))
    lib.ggml_backend_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_dev_get.argtypes, lib.ggml_backend_dev_get.restype = [ctypes.c_size_t], ctypes.c_void_p
    lib.ggml_backend_dev_type.argtypes, lib.ggml_backend_dev_type.restype = [ctypes.c_void_p], ctypes.c_int
    lib.ggml_backend_dev_description.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_description.restype = ctypes.c_char_p
    devices = (lib.ggml_backend_dev_get(i) for i in range(lib.ggml_backend_dev_count()))
    return [(DEVICE_TYPES.get(lib.ggml_backend_dev_type(d), "other"),
             lib.ggml_backend_dev_description(d).decode(errors="replace")) for d in devices]


def extra_buffers_safe(llama_cpp: Any) -> bool:
    """Whether llama.cpp may put weights in its extra CPU buffer types (its AMX and repacked layouts): not where the
    build has AMX_INT8 and the CPU has AMX tiles. There llama-cpp-python 0.3.36 segfaults in its AMX matmul on the
    first forward of a Q4_1 or Q8_0 file (ggml-org/llama.cpp#20824); off, weights stay in ggml's plain layout."""
    from .cost import build_features

    return not ("AMX_INT8 = 1" in build_features(llama_cpp) and "amx_tile" in cpu_flags())


@dataclass
class Fed:
    """What the last forward fed and how: its slots' positions and sequence plan (until keep() settles it)."""

    positions: list[int]
    plan: SeqPlan


class LlamaCppCache:
    """The decoders' view of llama.cpp's memory for one decode: `length` slots held (T of the next mask), the
    committed chain on seq 0 up to next_pos - 1, and the last forward until keep() keeps a prefix of it."""

    def __init__(self, engine: LlamaCppEngine, generation: int):
        self.engine, self.generation = engine, generation
        self.length = 0  # slots kept (0: the next forward is a decode's first)
        self.next_pos = 0  # position after the committed chain's last cell
        self.last: Fed | None = None

    def get_seq_length(self) -> int:
        """Slots held, as transformers' caches say it."""
        return self.length

    def keep(self, advance: torch.Tensor | int) -> None:
        """Keep the last forward's first `advance` slots (a prefix of its committed chain, on seq 0); free the rest."""
        self.engine.check_live(self)
        kept, fed, self.last = int(advance), self.last, None
        if fed is None:
            raise ValueError("llama.cpp cache: keep() follows a forward")
        if kept > fed.plan.chain:
            raise ValueError(f"llama.cpp cache: keeping {kept} slots of a forward whose committed chain is "
                             f"{fed.plan.chain} long (the decoders keep the pending tokens and a prefix of the drafts)")
        for seq in range(1, fed.plan.count):
            self.engine.seq_rm(seq, -1, -1)
        last_kept = fed.positions[kept - 1] + 1 if kept else self.next_pos
        self.engine.seq_rm(0, last_kept, -1)
        self.next_pos = last_kept
        self.length += kept

    def settle(self) -> None:
        """Before a forward: a last forward no keep() followed is kept whole (it must have been a chain)."""
        if self.last is not None:
            self.keep(len(self.last.positions))


class LlamaCppEngine(Engine):
    """A GGUF served by llama.cpp to the decoders (batch 1): see the module's docstring. One decode at a time: it has
    one llama.cpp memory, and new_cache() makes an older cache raise (two lanes racing need an engine each)."""

    dtype: str = "gguf"  # what a machine record names (load_llamacpp sets the weight type: "f32", "bf16", "q8_0")

    def __init__(self, path: str | os.PathLike, *, n_ctx: int = 4096, threads: int | None = None, n_seq_max: int = 64,
                 kv_type: str = "f16", invariant: bool = False, eos_token_id: Any = None,
                 flash_attn: bool | None = None, mask_id: int | None = None, gpu_layers: int = -1):
        llama_cpp = binding()
        self.options = {"n_ctx": n_ctx, "threads": threads, "n_seq_max": n_seq_max, "kv_type": kv_type,
                        "invariant": invariant, "eos_token_id": eos_token_id, "flash_attn": flash_attn,
                        "mask_id": mask_id, "gpu_layers": gpu_layers}  # what twin() makes another engine with
        self.lib, self.path, self.invariant = llama_cpp, Path(path), invariant
        self.threads = threads or os.cpu_count() or 1
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = gpu_layers  # -1: every layer on the GPU where the build has one; 0: the CPU alone
        self.extra_buffers = extra_buffers_safe(llama_cpp)
        params.use_extra_bufts = self.extra_buffers
        self.gpu = next((d for kind, d in backend_devices(llama_cpp) if kind == "GPU"), None) if gpu_layers else None
        self.model = llama_cpp.llama_model_load_from_file(str(self.path).encode(), params)
        if not self.model:
            raise ValueError(f"llama.cpp could not load {self.path}")
        self.ctx = llama_cpp.llama_init_from_model(self.model, self.context_params(n_ctx, n_seq_max, kv_type,
                                                                                    flash_attn))
        if not self.ctx:
            raise ValueError(f"llama.cpp could not make a context for {self.path} (n_ctx {n_ctx})")
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.n_ctx, self.n_seq_max, self.kv_type = n_ctx, n_seq_max, kv_type
        self.vocab_size = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(self.model))
        self.batch = llama_cpp.llama_batch_init(n_ctx, 0, n_seq_max)
        self.config = SimpleNamespace(max_position_embeddings=n_ctx, vocab_size=self.vocab_size)
        self.generation_config = SimpleNamespace(eos_token_id=eos_token_id)
        self.generation = 0
        self.mask_id = mask_id  # the mask token: a decode's first forward reads the prompt's last row and the masks
        self.forwards = 0

    def twin(self) -> LlamaCppEngine:
        """Another engine on the same GGUF with the same options and weight type: a second decode at the same time
        (an engine holds one)."""
        other = LlamaCppEngine(self.path, **self.options)
        other.dtype = self.dtype
        return other

    def context_params(self, n_ctx: int, n_seq_max: int, kv_type: str, flash_attn: bool | None) -> Any:
        """One unified KV cache of n_ctx cells shared by every sequence (a cell may hold several). Flash attention
        (None: off beside an F32 cache, llama.cpp's choice otherwise) rounds the scores through F16 on the CPU: F32
        logits then differ from torch's by 1e-3 of their range, against 2e-6 without it. On a GPU None is off too:
        llama.cpp's choice there depends on whether the build compiled its kernels, and the bench's lookup row must
        run as this engine does."""
        params = self.lib.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = n_ctx, n_ctx, min(n_ctx, 512)
        params.n_seq_max, params.kv_unified = n_seq_max, True
        params.n_threads = params.n_threads_batch = self.threads
        params.type_k = params.type_v = KV_TYPES[kv_type]
        if flash_attn is None:
            flash_attn = False if kv_type == "f32" or self.gpu else None
        params.flash_attn_type = {None: -1, True: 1, False: 0}[flash_attn]  # LLAMA_FLASH_ATTN_TYPE_AUTO / ...
        params.no_perf = False
        return params

    def record(self) -> dict[str, Any]:
        """Where and how its forwards run (cost.record): what its kept width check and cost curve are keyed by."""
        from .cost import record

        return record(self)

    def close(self) -> None:
        """Free llama.cpp's context, batch and model."""
        if getattr(self, "ctx", None):
            self.lib.llama_batch_free(self.batch)
            self.lib.llama_free(self.ctx)
            self.lib.llama_model_free(self.model)
            self.ctx = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the binding may be gone already
            pass

    # -------------------------------------------------------------------- memory

    def seq_rm(self, seq: int, p0: int, p1: int) -> None:
        """Remove seq's cells at positions [p0, p1) (-1: open)."""
        if not self.lib.llama_memory_seq_rm(self.memory, seq, p0, p1):
            raise RuntimeError(f"llama.cpp refused to remove sequence {seq}'s cells [{p0}, {p1})")

    def new_cache(self) -> LlamaCppCache:
        """An empty cache: llama.cpp's memory cleared (one decode at a time per engine)."""
        self.lib.llama_memory_clear(self.memory, True)
        self.generation += 1
        return LlamaCppCache(self, self.generation)

    def check_live(self, cache: LlamaCppCache) -> None:
        """A cache is valid until the next new_cache() (the engine has one memory)."""
        if cache.generation != self.generation:
            raise ValueError("llama.cpp engine: this cache was replaced by a newer new_cache() (one decode at a time)")

    # -------------------------------------------------------------------- forwards

    def hidden_states(self, ids: torch.Tensor, positions: torch.Tensor, seen: torch.Tensor, cache: LlamaCppCache
                      ) -> torch.Tensor:
        """Logits of the fed slots [1, W, V] (head() is then the identity). A decode's first forward (the prompt,
        then verified's first mask group) reads only the prompt's last row and the masks after it (the last
        PREFILL_ROWS without a mask id): the output head costs a row's worth of weights per row, so a 40-token
        prompt's logits would cost more than its forward. Rows not read are NaN."""
        width = ids.shape[-1]
        first = self.first_read(ids[0].tolist()) if cache.length == 0 else 0
        rows = self.feed(ids, positions, seen, cache, list(range(first, width)))
        if not first:
            return rows
        return torch.cat([torch.full((1, first, rows.shape[-1]), float("nan")), rows], 1)

    def first_read(self, tokens: list[int]) -> int:
        """The first slot of a decode's first forward whose logits a decoder reads: the last before the trailing
        run of mask tokens."""
        if self.mask_id is None:
            return max(len(tokens) - PREFILL_ROWS, 0)
        masks = next((i for i, t in enumerate(reversed(tokens)) if t != self.mask_id), len(tokens))
        return max(len(tokens) - masks - 1, 0)

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden

    def feed(self, ids: torch.Tensor, positions: torch.Tensor, seen: torch.Tensor, cache: LlamaCppCache,
             outputs: list[int]) -> torch.Tensor:
        """One llama.cpp batch for the tree; the logits [1, len(outputs), V] of the slots `outputs`."""
        self.check_live(cache)
        if ids.dim() != 2 or ids.shape[0] != 1:
            raise ValueError(f"the llama.cpp engine decodes one sequence at a time (batch 1); got batch {ids.shape[0]}")
        cache.settle()
        width = ids.shape[1]
        if tuple(seen.shape) != (1, width, width):
            raise ValueError(f"llama.cpp engine: seen {tuple(seen.shape)} for {width} slots fed")
        pos = positions[0].tolist()
        seqs = plan(seen[0], pos, cache.next_pos)
        if seqs.count + 1 > self.n_seq_max:
            raise ValueError(f"llama.cpp engine: the tree has {seqs.count} paths; n_seq_max is {self.n_seq_max}")
        for seq in range(1, seqs.count):
            self.lib.llama_memory_seq_cp(self.memory, 0, seq, -1, -1)
        spare = self.fill(ids[0].tolist(), pos, seqs, outputs)
        self.decode()
        cache.last = Fed(pos, seqs)
        rows = self.read(outputs)
        if spare is not None:
            self.seq_rm(spare, -1, -1)
        return rows

    def fill(self, tokens: list[int], positions: list[int], seqs: SeqPlan, outputs: list[int]) -> int | None:
        """Write the batch; in invariant mode, pad to two rows and two logits rows; return the spare's sequence."""
        want = set(outputs)
        spare = None
        if self.invariant and len(tokens) == 1:  # a second row on a sequence of its own, seeing only itself
            spare = self.n_seq_max - 1
            tokens, positions = [*tokens, tokens[0]], [*positions, 0]
            seqs = SeqPlan((*seqs.seqs, (spare,)), seqs.count, seqs.chain)
        if self.invariant and len(want) < 2:
            want.add(next(i for i in range(len(tokens) - 1, -1, -1) if i not in want))
        batch = self.batch
        for i, (token, position, ids) in enumerate(zip(tokens, positions, seqs.seqs)):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, position, len(ids), i in want
            for j, seq in enumerate(ids):
                batch.seq_id[i][j] = seq
        batch.n_tokens = len(tokens)
        return spare

    def decode(self) -> None:
        """Run the batch; a clear error where llama.cpp refuses it."""
        code = self.lib.llama_decode(self.ctx, self.batch)
        self.forwards += 1
        if code != 0:
            raise RuntimeError(f"llama_decode failed ({code}): see llama.cpp's log above (context of {self.n_ctx}?)")

    def read(self, outputs: list[int]) -> torch.Tensor:
        """Logits rows of the batch slots `outputs`, as float32 [1, k, V]."""
        out = np.empty((len(outputs), self.vocab_size), dtype=np.float32)
        for r, i in enumerate(outputs):
            ptr = self.lib.llama_get_logits_ith(self.ctx, i)
            ctypes.memmove(out[r].ctypes.data, ptr, self.vocab_size * 4)
        return torch.from_numpy(out)[None]
