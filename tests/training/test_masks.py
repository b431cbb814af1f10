"""The MARS training mask: its four rules, its flex form, and the clean stream == plain causal forward."""

from __future__ import annotations

import pytest
import torch

from mars_core.attention import as_model_mask
from mars_core.training.masks import training_attention_mask, training_block_mask

from tiny import tiny_qwen2

# (n, B): n a multiple of B, not a multiple, B = 1, B = n, B > n, n = 1.
SHAPES = [(8, 4), (7, 3), (10, 4), (5, 1), (6, 6), (5, 8), (1, 1), (1, 4), (9, 2)]


def rule(n: int, block_size: int, q: int, k: int) -> bool:
    """The spec's four rules for query q, key k in [noisy | clean], written out case by case."""
    q_noisy, k_noisy = q < n, k < n
    pq, pk = q % n, k % n
    bq, bk = pq // block_size, pk // block_size
    if not q_noisy and not k_noisy:  # clean -> clean: causal
        return pk <= pq
    if q_noisy and k_noisy:  # noisy -> noisy: causal and same block
        return pk <= pq and bk == bq
    if q_noisy and not k_noisy:  # noisy -> clean: strictly earlier blocks
        return bk < bq
    return False  # clean -> noisy: never


@pytest.mark.parametrize("n,block_size", SHAPES)
def test_training_mask_matches_rules(n: int, block_size: int) -> None:
    mask = training_attention_mask(n, block_size)
    assert mask.shape == (2 * n, 2 * n) and mask.dtype == torch.bool
    expected = torch.tensor([[rule(n, block_size, q, k) for k in range(2 * n)] for q in range(2 * n)])
    assert torch.equal(mask, expected)


def test_training_mask_examples() -> None:
    """Spot checks written by hand for n=5, B=2 (blocks {0,1}, {2,3}, {4})."""
    m = training_attention_mask(5, 2)
    noisy, clean = slice(0, 5), slice(5, 10)
    assert m[clean, noisy].sum() == 0
    assert m[3, noisy].tolist() == [False, False, True, True, False]  # noisy 3 sees noisy 2, 3
    assert m[3, clean].tolist() == [True, True, False, False, False]  # and clean 0, 1
    assert m[0, clean].sum() == 0 and m[0, noisy].tolist() == [True, False, False, False, False]
    assert m[4, clean].tolist() == [True, True, True, True, False]
    assert torch.equal(m[clean, clean], torch.ones(5, 5, dtype=torch.bool).tril())


def test_training_mask_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError):
        training_attention_mask(4, 0)
    with pytest.raises(ValueError):
        training_attention_mask(0, 4)


@pytest.mark.parametrize("n,block_size", [(7, 3), (8, 4), (5, 1)])
def test_flex_block_mask_agrees(n: int, block_size: int) -> None:
    pytest.importorskip("torch.nn.attention.flex_attention")
    block_mask = training_block_mask(n, block_size)
    q = torch.arange(2 * n)[:, None]
    k = torch.arange(2 * n)[None, :]
    zero = torch.tensor(0)
    dense = block_mask.mask_mod(zero, zero, q, k)
    assert torch.equal(dense.expand(2 * n, 2 * n), training_attention_mask(n, block_size))
    # The block-sparse layout must cover every allowed element (one 128-block here).
    assert block_mask.to_dense().bool().any()


def _mars_forward(model: torch.nn.Module, clean: torch.Tensor, mask_id: int, block_size: int) -> torch.Tensor:
    """Logits of one forward over [x~ | x] with the MARS mask and positions [0..n) ++ [0..n)."""
    b, n = clean.shape
    noisy = clean.clone()
    noisy[:, n // 3 :] = mask_id  # mask the "response" part
    positions = torch.arange(n).repeat(2)[None].expand(b, -1)
    mask = as_model_mask(training_attention_mask(n, block_size), model).expand(b, -1, -1, -1)
    with torch.no_grad():
        return model(input_ids=torch.cat([noisy, clean], 1), attention_mask=mask, position_ids=positions).logits


@pytest.mark.parametrize("block_size", [1, 3, 4])
def test_clean_half_is_plain_causal_forward(model, tokenizer, block_size: int) -> None:
    torch.manual_seed(0)
    clean = torch.randint(5, len(tokenizer), (2, 11))
    logits = _mars_forward(model, clean, tokenizer.mask_token_id, block_size)
    with torch.no_grad():
        plain = model(input_ids=clean).logits
    torch.testing.assert_close(logits[:, 11:], plain, atol=1e-5, rtol=1e-5)
    # The noisy half differs (it sees masks and only earlier blocks): the comparison above can fail.
    assert not torch.allclose(logits[:, :11], plain, atol=1e-3)


def test_eager_attention_through_as_model_mask(tokenizer) -> None:
    sdpa = tiny_qwen2(len(tokenizer))
    eager = tiny_qwen2(len(tokenizer))
    eager.set_attn_implementation("eager")
    assert eager.config._attn_implementation == "eager"
    torch.manual_seed(1)
    clean = torch.randint(5, len(tokenizer), (2, 9))
    mask_id = tokenizer.mask_token_id
    assert as_model_mask(training_attention_mask(9, 4), eager).dtype == eager.dtype  # additive float, not bool
    logits_eager = _mars_forward(eager, clean, mask_id, 4)
    with torch.no_grad():
        plain = eager(input_ids=clean).logits
    torch.testing.assert_close(logits_eager[:, 9:], plain, atol=1e-5, rtol=1e-5)
    # Both halves agree with the SDPA model under the boolean mask.
    torch.testing.assert_close(logits_eager, _mars_forward(sdpa, clean, mask_id, 4), atol=1e-4, rtol=1e-4)
