"""Width and batch invariance: new tokens fed k at a time to a batch give each row the bits that one-token forwards
of that sample alone give it (logits and cache entries), under a runtime prepared for it; so verified decoding is
one-token decoding, and a sample's answer in a batch its answer alone, by construction."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from mars_core.runtime import ATTENTION, Runtime, compare_widths, prepare
from mars_core.runtime.attention import attention_by_rows, keys_by_rows
from mars_core.runtime.invariance import CHECK_WIDTHS, STATIC_WIDTHS
from mars_core.runtime.slots import SlotCache

from tiny import tiny_llama, tiny_qwen2

WIDTHS = (2, 3, 4, 5, 8, 13, 16, 32)  # up to the widest verified tree at B = 4 (and kernel switches between)
DTYPES = (torch.float32, torch.bfloat16)  # what prepare() may be given: fp32 and bf16 (load picks bf16 where fast)


def batch_of_lengths(vocab: int, b: int, n: int, k: int, seed: int = 0):
    """Random contexts [b, n] (sample i's first n - 7i tokens real: other lengths) and k new tokens per sample."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(vocab, (b, n + k), generator=gen)
    return ids[:, :n], torch.tensor([n - 7 * i for i in range(b)]), ids[:, n:]


@pytest.mark.parametrize("build", [tiny_qwen2, tiny_llama], ids=["qwen2", "llama"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("batch", [1, 4])
def test_a_prepared_runtime_is_width_and_batch_invariant(build, dtype, batch):
    model = build(300, attn_implementation=ATTENTION).to(dtype)
    runtime = prepare(model, check=False, measure_cost=False)
    assert runtime.rows and (runtime.linears or dtype not in _packable())
    context, lengths, new = batch_of_lengths(300, batch, 40, 32)
    check = compare_widths(model, runtime, context, lengths, new, WIDTHS)
    assert check.rows == batch * (1 + 32) * len(WIDTHS)  # the context's last token and each new one
    assert check.differing == 0 and check.max_abs == 0.0 and check.identical, check


def test_sdpa_is_not_width_invariant():
    """The control: transformers' SDPA over the whole forward gives rows other bits at other widths (so the test
    above can fail, and the attention by rows is what makes it pass)."""
    model = tiny_qwen2(300, attn_implementation=ATTENTION, hidden_size=128, num_attention_heads=8,
                       num_key_value_heads=2)
    context, lengths, new = batch_of_lengths(300, 1, 150, 16)
    plain = compare_widths(model, Runtime(), context, lengths, new, (2, 4, 8, 16))
    assert plain.differing > 0, plain
    assert compare_widths(model, prepare(model, check=False, measure_cost=False), context, lengths, new,
                          (2, 4, 8, 16)).identical


def test_prepare_checks_and_states_the_guarantee(tmp_path):
    model = tiny_qwen2(300, attn_implementation=ATTENTION)
    runtime = prepare(model, measure_cost=False, cache_dir=tmp_path)
    assert runtime.invariant and runtime.width_check.rows > 0 and runtime.width_check.batch == 2
    assert runtime.guarantee() == "identical to one-token decoding"
    assert list(tmp_path.glob("width-*.json"))  # kept: the next prepare() reads it back
    sdpa = prepare(tiny_qwen2(300), measure_cost=False, cache_dir=tmp_path)  # an attention we cannot run by rows
    assert not sdpa.rows
    assert Runtime().guarantee().startswith("identical to one-token decoding up to rounding")


def test_where_sdpa_units_fail_the_check_prepare_gives_each_row_a_call(tmp_path, monkeypatch):
    """On a CPU where a unit's bits depend on how many units share its SDPA call (an AVX2 EPYC, Zen 3), prepare() checks
    a call per row and serves it where that passes; where it fails too, the first runtime and its verdict stay."""
    import importlib

    from mars_core.runtime.runtime import WidthCheck

    prep = importlib.import_module("mars_core.runtime.prepare")
    # SDPA's units, as where the rows kernel does not serve attention (it computes each row on its own: no retry)
    monkeypatch.setattr(importlib.import_module("mars_core.runtime.attention"), "rows_kernel", lambda: False)

    model = tiny_qwen2(300, attn_implementation=ATTENTION)
    verdict = {False: WidthCheck((2,), 2, 8, 8, 1e-6), True: WidthCheck((2,), 2, 8, 0, 0.0)}
    asked = []
    monkeypatch.setattr(prep, "width_check", lambda m, rt, folder: asked.append(rt.units_alone) or verdict[
        rt.units_alone])
    runtime = prepare(model, measure_cost=False, cache_dir=tmp_path)
    assert asked == [False, True] and runtime.units_alone and runtime.invariant
    assert runtime.attention(model) == "rows, a call each" and runtime.key(model) != replace(
        runtime, units_alone=False).key(model)  # kept apart: other calls, other cost
    verdict[True] = WidthCheck((2,), 2, 8, 3, 1e-6)
    runtime = prepare(model, measure_cost=False, cache_dir=tmp_path)
    assert not runtime.units_alone and runtime.width_check.differing == 8
    verdict[False] = WidthCheck((2,), 2, 8, 0, 0.0)
    asked.clear()
    assert not prepare(model, measure_cost=False, cache_dir=tmp_path).units_alone and asked == [False]


@pytest.mark.parametrize("build", [tiny_qwen2, tiny_llama], ids=["qwen2", "llama"])
def test_a_call_per_row_is_width_and_batch_invariant(build):
    model = build(300, attn_implementation=ATTENTION)
    runtime = replace(prepare(model, check=False, measure_cost=False), units_alone=True)
    context, lengths, new = batch_of_lengths(300, 3, 40, 16)
    check = compare_widths(model, runtime, context, lengths, new, (2, 3, 8, 16))
    assert check.rows == 3 * (1 + 16) * 4 and check.identical, check


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("full", [False, True], ids=["rounded", "whole-cache"])
@pytest.mark.parametrize("alone", [False, True], ids=["grouped", "a-call-each"])
def test_rows_attention_computes_attention(dtype, full, alone):
    """Row by row is still attention: the numbers of SDPA over the whole forward, up to rounding, with GQA, two
    samples of other lengths, rows of a tree that see only part of the forward, grouped by sample or by column (or a
    call per row)."""
    torch.manual_seed(0)
    b, hq, hkv, w, d, slots = 2, 6, 2, 5, 16, 160
    cache = SlotCache(tiny_llama(64), b, slots)
    cache.at = torch.tensor([70, 9])
    fed = torch.ones(b, w, dtype=torch.bool)
    seen = (torch.rand(b, w, w) > 0.3) & torch.ones(w, w, dtype=torch.bool).tril() | torch.eye(w, dtype=torch.bool)
    index = cache.place(fed)
    mask = cache.mask(seen, index)[:, None]
    q = torch.randn(b, hq, w, d, dtype=dtype)
    k, v = torch.randn(b, hkv, slots, d, dtype=dtype), torch.randn(b, hkv, slots, d, dtype=dtype)
    want = F.scaled_dot_product_attention(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), attn_mask=mask)
    got = attention_by_rows(q, k, v, mask, None, cache.key_plan(index, full, alone))
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.float(), want.transpose(1, 2).float(), atol=tol, rtol=tol)


def test_without_a_key_plan_the_model_is_plain_sdpa():
    """The "mars" attention is SDPA unless a forward gives it a key plan: the same logits as a model loaded with
    "sdpa"."""
    ids = torch.randint(300, (2, 12), generator=torch.Generator().manual_seed(1))
    ours, sdpa = tiny_qwen2(300, attn_implementation=ATTENTION), tiny_qwen2(300)
    with torch.no_grad(), keys_by_rows(None):
        assert torch.equal(ours(ids).logits, sdpa(ids).logits)


def _packable() -> tuple[torch.dtype, ...]:
    from mars_core.runtime.linear import packed_dtypes, packing_pays

    return packed_dtypes() if packing_pays(torch.nn.Linear(2, 2)) else ()


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("batch", [1, 4])
def test_a_static_runtime_is_width_and_batch_invariant(dtype, batch):
    """A static runtime (every row reading the whole cache, the shape CUDA graphs capture): the same bits at every
    width its buckets feed, in a batch of other lengths as alone."""
    model = tiny_qwen2(300, attn_implementation=ATTENTION, hidden_size=128, num_attention_heads=8,
                       num_key_value_heads=2).to(dtype)
    runtime = prepare(model, check=False, measure_cost=False, static=True)
    context, lengths, new = batch_of_lengths(300, batch, 150, 16)
    widths = (2, 3, 4, 5, 6, 7, 8, 12, 16)
    check = compare_widths(model, runtime, context, lengths, new, widths)
    assert check.rows == batch * (1 + 16) * len(widths) and check.identical, check


def test_prepare_checks_a_static_runtimes_widths_and_keeps_them_apart(tmp_path):
    model = tiny_qwen2(300, attn_implementation=ATTENTION)
    runtime = prepare(model, measure_cost=False, static=True, cache_dir=tmp_path)
    assert runtime.static and runtime.invariant and runtime.width_check.widths == STATIC_WIDTHS
    assert prepare(model, measure_cost=False, cache_dir=tmp_path).width_check.widths == CHECK_WIDTHS
    assert len(list(tmp_path.glob("width-*.json"))) == 2


def test_the_check_covers_every_width_and_cache_length_a_static_decode_feeds(tokenizer, monkeypatch, tmp_path):
    """On a repetitive answer prompt lookup builds the widest trees (up to 32 at B = 4): every width a static verified
    decode feeds after its prefill, and the cache length it and one-token decoding of the same prompt feed at (one
    length for both), is one prepare()'s check compared; its prefill (prompt and masks) is the one the check feeds."""
    from mars_core import generate
    from mars_core.generate import encode_prompt
    from mars_core.runtime import forward

    from trained import ANSWERS, mars_trained

    model = mars_trained("llama", tokenizer)
    runtime = prepare(model, measure_cost=False, static=True, cache_dir=tmp_path)
    fed, real = [], forward._forward

    def spy(model, cache, ids, *args, **kw):
        fed.append((ids.shape[1], cache.slots))
        return real(model, cache, ids, *args, **kw)

    monkeypatch.setattr(forward, "_forward", spy)
    prompt = list(ANSWERS)[4]  # the fox answer says its sentence twice: lookup drafts the second
    one_token = generate(model, tokenizer, prompt, strategy="ar", max_new_tokens=40, runtime=runtime)
    (_, one_token_slots), *_ = fed
    fed.clear()
    verified = generate(model, tokenizer, prompt, strategy="verified", max_new_tokens=40, runtime=runtime)
    assert verified.token_ids == one_token.token_ids and verified.tokens_per_forward > 1.5
    (prompt_width, slots), *steps = fed
    check = runtime.width_check
    assert prompt_width == len(encode_prompt(tokenizer, prompt)) + check.prefill_masks
    assert max(w for w, _ in steps) >= 20  # wide trees were fed
    assert {w for w, _ in steps} - {1} <= set(check.widths), (sorted({w for w, _ in steps}), check.widths)
    assert {slots, one_token_slots} | {s for _, s in steps} <= set(check.slots) and slots == one_token_slots
