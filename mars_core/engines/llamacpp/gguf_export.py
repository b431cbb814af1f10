"""A MARS checkpoint (a Llama-architecture transformers model and its tokenizer with a mask token) written as a GGUF
that llama.cpp runs: the embedded model once per weight type, cached; a user's own checkpoint by the same function.

    export_gguf(model, tokenizer, "my-mars.f32.gguf", weights="f32")     # any MARS checkpoint already loaded
    cached_gguf("path/to/checkpoint", weights="q8_0")                     # load(), export once, keep in the cache

Weights: F32 as they are; BF16 and Q8_0 quantized in numpy by `gguf.quants` (llama.cpp's own block formats); the
norms stay F32, as llama.cpp's converter keeps them. The tokenizer goes in as llama.cpp's "gpt2" BPE vocabulary:
every id's token text, its type (normal, control for specials, user-defined for added text), the merges and the
special ids, the mask token included. llama.cpp never tokenizes here (the decoders feed ids), but it loads the
vocabulary and checks it against the embedding rows.

llama.cpp's rotary embedding pairs dimensions (2i, 2i+1) of a head; transformers' Llama pairs (i, i + d/2) (its
rotate_half). So q_proj and k_proj rows are permuted per head, as llama.cpp's convert_hf_to_gguf.py does: row
(half h, index i) of a head moves to (index i, half h), i.e. [2, d/2] -> [d/2, 2] (permute_rows).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...runtime.timing import cache_root

WEIGHTS = ("f32", "bf16", "q8_0")
EXPORT_VERSION = 2  # bump when the file written changes, so cached GGUFs are written again


def permute_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """q/k projection rows from transformers' rotate_half layout to llama.cpp's interleaved pairs, head by head."""
    half = w.shape[0] // heads // 2
    return w.reshape(heads, 2, half, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def config_value(config: Any, name: str, default: Any = None) -> Any:
    """A config field, also where transformers 5 keeps rope settings (rope_parameters)."""
    value = getattr(config, name, None)
    if value is None and isinstance(getattr(config, "rope_parameters", None), dict):
        value = config.rope_parameters.get(name)
    return default if value is None else value


def check_llama(model: torch.nn.Module) -> None:
    """Only the Llama architecture without biases or rope scaling is written (what llama.cpp's llama arch reads)."""
    config = model.config
    if getattr(config, "model_type", None) != "llama":
        raise ValueError(f"export_gguf writes Llama-architecture models; this one is {config.model_type!r}")
    if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
        raise ValueError("export_gguf: attention or MLP biases are not written (SmolLM2 and Llama have none)")
    rope = config_value(config, "rope_type", "default")
    if rope not in ("default", None):
        raise ValueError(f"export_gguf: rope scaling {rope!r} is not written")


def head_dim(config: Any) -> int:
    """Per-head width (config.head_dim, else hidden / heads)."""
    return int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)


def write_hparams(writer: Any, config: Any, name: str, weights: str) -> None:
    """The llama arch's hyperparameters, as llama.cpp's converter writes them."""
    import gguf

    writer.add_name(name)
    writer.add_context_length(int(config.max_position_embeddings))
    writer.add_embedding_length(int(config.hidden_size))
    writer.add_block_count(int(config.num_hidden_layers))
    writer.add_feed_forward_length(int(config.intermediate_size))
    writer.add_head_count(int(config.num_attention_heads))
    writer.add_head_count_kv(int(config.num_key_value_heads))
    writer.add_key_length(head_dim(config))
    writer.add_value_length(head_dim(config))
    writer.add_rope_dimension_count(head_dim(config))
    writer.add_rope_freq_base(float(config_value(config, "rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_vocab_size(int(config.vocab_size))
    file_type = {"f32": gguf.LlamaFileType.ALL_F32, "bf16": gguf.LlamaFileType.MOSTLY_BF16,
                 "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[weights]
    writer.add_file_type(file_type)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)


def pre_tokenizer_name(backend: dict) -> str:
    """llama.cpp's pre-tokenizer name: "smollm" where digits are split one by one before the byte-level regex, else
    "gpt-2" (the regex alone). It only matters to llama.cpp's own tokenizing, which the decoders never use."""
    pre = json.dumps(backend.get("pre_tokenizer") or {})
    return "smollm" if '"Digits"' in pre and '"individual_digits": true' in pre else "gpt-2"


def vocab_entries(tokenizer: Any, vocab_size: int) -> tuple[list[str], list[int]]:
    """Token texts and llama.cpp token types for ids 0..vocab_size-1 (rows without a token are unused padding)."""
    import gguf

    by_id = {i: t for t, i in tokenizer.get_vocab().items()}
    added = tokenizer.added_tokens_decoder
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in added:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.CONTROL if added[i].special else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.NORMAL)
    return tokens, types


def merges_of(backend: dict) -> list[str]:
    """BPE merges as "a b" lines (tokenizers writes them as pairs or as strings, by version)."""
    return [m if isinstance(m, str) else " ".join(m) for m in backend["model"].get("merges", [])]


def write_tokenizer(writer: Any, tokenizer: Any, vocab_size: int) -> None:
    """The byte-level BPE vocabulary with its merges and special ids, the mask token's among them."""
    backend = json.loads(tokenizer.backend_tokenizer.to_str())
    if backend["model"]["type"] != "BPE":
        raise ValueError("export_gguf writes byte-level BPE tokenizers (gpt2-style) only")
    tokens, types = vocab_entries(tokenizer, vocab_size)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre_tokenizer_name(backend))
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges_of(backend))
    for kind in ("bos", "eos", "pad", "unk", "mask"):
        token_id = getattr(tokenizer, f"{kind}_token_id", None)
        if token_id is not None:
            getattr(writer, f"add_{kind}_token_id")(int(token_id))
    writer.add_add_bos_token(False)
    if isinstance(tokenizer.chat_template, str):
        writer.add_chat_template(tokenizer.chat_template)


def llama_tensor_names(layers: int) -> dict[str, str]:
    """transformers' Llama parameter names -> llama.cpp's GGUF tensor names."""
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                 "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
                 "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                 "mlp.down_proj": "ffn_down"}
    for i in range(layers):
        for hf, ours in per_layer.items():
            names[f"model.layers.{i}.{hf}.weight"] = f"blk.{i}.{ours}.weight"
    return names


def encode_weight(data: np.ndarray, weights: str) -> tuple[np.ndarray, Any]:
    """(bytes as numpy, GGML type) of one tensor: 1-D tensors (norms) stay F32, matrices take the file's type."""
    import gguf

    qtype = {"f32": gguf.GGMLQuantizationType.F32, "bf16": gguf.GGMLQuantizationType.BF16,
             "q8_0": gguf.GGMLQuantizationType.Q8_0}[weights]
    if data.ndim == 1 or weights == "f32":
        return data, gguf.GGMLQuantizationType.F32
    return gguf.quants.quantize(data, qtype), qtype


def gguf_tensors(model: torch.nn.Module) -> list[tuple[str, np.ndarray]]:
    """(GGUF name, float32 array) of every weight, q/k rows permuted; a tied output head is not written (llama.cpp
    reads token_embd in its place)."""
    config = model.config
    names = llama_tensor_names(int(config.num_hidden_layers))
    state = model.state_dict()
    tied = bool(getattr(config, "tie_word_embeddings", False))
    out = []
    for key, value in state.items():
        if key == "lm_head.weight" and tied:
            continue
        if key not in names:
            raise ValueError(f"export_gguf: no GGUF name for {key!r}")
        data = value.detach().to(torch.float32).cpu().numpy()
        if key.endswith("q_proj.weight"):
            data = permute_rows(data, int(config.num_attention_heads))
        elif key.endswith("k_proj.weight"):
            data = permute_rows(data, int(config.num_key_value_heads))
        out.append((names[key], np.ascontiguousarray(data)))
    return out


def export_gguf(model: torch.nn.Module, tokenizer: Any, path: str | os.PathLike, weights: str = "f32",
                name: str = "MARS") -> Path:
    """Write model + tokenizer as a llama-arch GGUF at path (atomically: a temporary file, then a rename)."""
    import gguf

    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {WEIGHTS}, got {weights!r}")
    if tokenizer.mask_token_id is None:
        raise ValueError("export_gguf: the tokenizer has no mask token (load the checkpoint with mars_core.load())")
    check_llama(model)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    writer = gguf.GGUFWriter(tmp, "llama")
    write_hparams(writer, model.config, name, weights)
    write_tokenizer(writer, tokenizer, int(model.config.vocab_size))
    for tensor_name, data in gguf_tensors(model):
        encoded, qtype = encode_weight(data, weights)
        writer.add_tensor(tensor_name, encoded, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(path)
    return path


def source_key(source: str) -> str:
    """What a cached GGUF depends on: the checkpoint's files (names, sizes, times) or the source string itself."""
    folder = Path(source).expanduser()
    items: list[Any] = [str(folder.resolve()) if folder.exists() else source, EXPORT_VERSION]
    if folder.is_dir():
        items += [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.iterdir()) if p.is_file()]
    elif folder.is_file():
        items.append((folder.stat().st_size, folder.stat().st_mtime_ns))
    return hashlib.sha256(json.dumps(items).encode()).hexdigest()[:12]


def gguf_path(source: str, weights: str) -> Path:
    """Where the GGUF of a checkpoint in one weight type is kept: <cache>/gguf/<name>-<key>.<weights>.gguf."""
    stem = Path(source).name or "model"
    return cache_root() / "gguf" / f"{stem}-{source_key(source)}.{weights}.gguf"


def cached_gguf(source: str | os.PathLike | None = None, weights: str = "bf16") -> Path:
    """The GGUF of a MARS checkpoint (None: the embedded model), written once per weight type and kept."""
    from ...load import load, resolve_source

    resolved = resolve_source(source)
    path = gguf_path(resolved, weights)
    if path.is_file():
        return path
    model, tokenizer = load(resolved, dtype="fp32", device="cpu")
    return export_gguf(model, tokenizer, path, weights=weights, name=Path(resolved).name)
