"""Width invariance: a forward of k new tokens gives each row the bits that k one-token forwards give it (logits and
cache entries), under a runtime prepared for it; so verified decoding is one-token decoding by construction."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mars_core.runtime import ATTENTION, Runtime, compare_widths, prepare
from mars_core.runtime.attention import attention_by_rows, rows_attention

from tiny import tiny_llama, tiny_qwen2

WIDTHS = (2, 3, 4, 5, 8, 13, 16, 32)  # up to the widest verified tree at B = 4 (and kernel switches between)
DTYPES = (torch.float32, torch.bfloat16)  # what prepare() may be given: fp32 and bf16 (load picks bf16 where fast)


def batch_with_holes(vocab: int, b: int, n: int, k: int, seed: int = 0):
    """Random context [b, n] (sample i left-padded by 2i slots: holes in the cache) and k new tokens per sample."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(vocab, (b, n + k), generator=gen)
    valid = torch.arange(n)[None, :] >= 2 * torch.arange(b)[:, None]
    return ids[:, :n], valid, ids[:, n:]


@pytest.mark.parametrize("build", [tiny_qwen2, tiny_llama], ids=["qwen2", "llama"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("batch", [1, 4])
def test_a_prepared_runtime_is_width_invariant(build, dtype, batch):
    model = build(300, attn_implementation=ATTENTION).to(dtype)
    runtime = prepare(model, check=False, measure_cost=False)
    assert runtime.rows and (runtime.linears or dtype not in _packable())
    context, valid, new = batch_with_holes(300, batch, 20, 32)
    check = compare_widths(model, runtime, context, valid, new, WIDTHS)
    assert check.rows == batch * 32 * len(WIDTHS)
    assert check.differing == 0 and check.max_abs == 0.0 and check.identical, check


def test_sdpa_is_not_width_invariant():
    """The control: transformers' SDPA over the whole forward gives rows other bits at other widths (so the test
    above can fail, and the row-by-row attention is what makes it pass)."""
    model = tiny_qwen2(300, attn_implementation=ATTENTION, hidden_size=128, num_attention_heads=8,
                       num_key_value_heads=2)
    context, valid, new = batch_with_holes(300, 1, 150, 16)
    plain = compare_widths(model, Runtime(), context, valid, new, (2, 4, 8, 16))
    assert plain.differing > 0, plain
    assert compare_widths(model, prepare(model, check=False, measure_cost=False), context, valid, new,
                          (2, 4, 8, 16)).identical


def test_prepare_checks_and_states_the_guarantee(tmp_path):
    model = tiny_qwen2(300, attn_implementation=ATTENTION)
    runtime = prepare(model, measure_cost=False, cache_dir=tmp_path)
    assert runtime.invariant and runtime.width_check.rows > 0
    assert runtime.guarantee() == "identical to one-token decoding"
    assert list(tmp_path.glob("width-*.json"))  # kept: the next prepare() reads it back
    sdpa = prepare(tiny_qwen2(300), measure_cost=False, cache_dir=tmp_path)  # an attention we cannot run by rows
    assert not sdpa.rows
    assert Runtime().guarantee().startswith("identical to one-token decoding up to rounding")


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
def test_rows_attention_computes_attention(dtype):
    """Row by row is still attention: the same numbers as SDPA over the whole forward, up to rounding, with GQA, a
    mask with holes and rows that see only part of the forward (a tree)."""
    torch.manual_seed(0)
    b, hq, hkv, w, cached, d = 2, 6, 2, 5, 9, 16
    q = torch.randn(b, hq, w, d, dtype=dtype)
    k, v = torch.randn(b, hkv, cached + w, d, dtype=dtype), torch.randn(b, hkv, cached + w, d, dtype=dtype)
    mask = torch.rand(b, 1, w, cached + w) > 0.3
    mask[..., cached:] &= torch.ones(w, w, dtype=torch.bool).tril()
    mask[..., torch.arange(w), cached + torch.arange(w)] = True  # every row sees itself
    want = F.scaled_dot_product_attention(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), attn_mask=mask)
    got = attention_by_rows(q, k, v, mask, None)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.float(), want.transpose(1, 2).float(), atol=tol, rtol=tol)


def test_outside_a_runtime_the_model_is_plain_sdpa():
    """The "mars" attention is SDPA unless a runtime asks for rows: the same logits as a model loaded with "sdpa"."""
    ids = torch.randint(300, (2, 12), generator=torch.Generator().manual_seed(1))
    ours, sdpa = tiny_qwen2(300, attn_implementation=ATTENTION), tiny_qwen2(300)
    with torch.no_grad():
        assert torch.equal(ours(ids).logits, sdpa(ids).logits)
        with rows_attention(True):
            torch.testing.assert_close(ours(ids).logits, sdpa(ids).logits, atol=1e-5, rtol=1e-5)


def _packable() -> tuple[torch.dtype, ...]:
    from mars_core.runtime.linear import packed_dtypes, packing_pays

    return packed_dtypes() if packing_pays(torch.nn.Linear(2, 2)) else ()


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@pytest.mark.parametrize("batch", [1, 4])
def test_the_static_decoders_forwards_are_width_invariant(dtype, batch):
    """The static decoder's forwards (a cache of fixed length written from a slot, every row attending all of it):
    the same bits at every width its buckets feed, with holes in the cache at batch 4; in fp32 plain SDPA over the
    forward differs (the control: in bf16 the tiny model's SDPA happens to agree)."""
    model = tiny_qwen2(300, attn_implementation=ATTENTION, hidden_size=128, num_attention_heads=8,
                       num_key_value_heads=2).to(dtype)
    runtime = prepare(model, check=False, measure_cost=False, static=True)
    context, valid, new = batch_with_holes(300, batch, 150, 16)
    widths = (2, 3, 4, 5, 6, 7, 8, 12, 16)
    check = compare_widths(model, runtime, context, valid, new, widths, static=True)
    assert check.rows == batch * 16 * len(widths) and check.identical, check
    if dtype == torch.float32:
        plain = compare_widths(model, Runtime(static=True), context, valid, new, (2, 4, 8, 16), static=True)
        assert plain.differing > 0, plain


def test_prepare_checks_the_static_decoders_widths_and_keeps_them_apart(tmp_path):
    model = tiny_qwen2(300, attn_implementation=ATTENTION)
    runtime = prepare(model, measure_cost=False, static=True, cache_dir=tmp_path)
    assert runtime.static and runtime.invariant and runtime.width_check.widths == (2, 3, 4, 5, 6, 7, 8, 12, 16)
    assert list(tmp_path.glob("width-static-*.json")) and not list(tmp_path.glob("width-[0-9a-f]*.json"))
    assert prepare(model, measure_cost=False, cache_dir=tmp_path).width_check.widths == (2, 3, 8)
