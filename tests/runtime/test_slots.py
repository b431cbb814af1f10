"""The slot cache: written from a slot held on the device, borrowed and given back, its mask."""

from __future__ import annotations

import pytest
import torch

from mars_core.runtime import slots
from mars_core.runtime.slots import SlotCache, borrowed, slot_mask

from tiny import tiny_llama


@pytest.fixture
def pool(monkeypatch):
    monkeypatch.setattr(slots, "_FREE", [])
    return slots._FREE


def test_a_forward_writes_from_the_slot_placed_and_overwrites_what_follows():
    """Keys and values land at `at`, whatever was written there before: a forward rewritten from slot 2 leaves the
    cache as a decode that never wrote the rejected tokens would."""
    model = tiny_llama(64)
    cache = SlotCache(model, 1, 16)
    ids = torch.tensor([[5, 6, 7, 8]])

    def write(tokens: torch.Tensor, at: int) -> None:
        cache.at.fill_(at)
        w = tokens.shape[1]
        cache.place(w)
        cache.keep(torch.ones(1, w, dtype=torch.bool), torch.tensor([w]))
        mask = torch.arange(16)[None, :] <= torch.arange(at, at + w)[:, None]
        with torch.inference_mode():
            model(input_ids=tokens, position_ids=torch.arange(at, at + w)[None], attention_mask=mask[None, None],
                  cache=cache.kv, use_cache=True)

    write(ids, 0)
    write(torch.tensor([[9, 9]]), 2)  # slots 2-3 overwritten
    keys = cache.kv.layers[0].keys[0, :, :4].clone()
    fresh = SlotCache(model, 1, 16)
    cache, first = fresh, keys
    write(torch.tensor([[5, 6, 9, 9]]), 0)
    assert torch.allclose(fresh.kv.layers[0].keys[0, :, :4], first, atol=1e-5)  # fp32 rows: up to rounding
    assert int(fresh.at) == 4 and fresh.valid[0, :4].all() and not fresh.valid[0, 4:].any()


def test_borrowed_reuses_a_free_cache_of_the_same_model_and_shape_reset(pool):
    model, other = tiny_llama(64), tiny_llama(64, seed=1)
    with borrowed(model, 1, 32) as first:
        first.at.fill_(5)
        first.valid[:, :5] = True
        with borrowed(model, 1, 32) as second:  # in use: another cache
            assert second is not first
    with borrowed(model, 1, 32) as again:
        assert again in (first, second) and int(again.at) == 0 and not again.valid.any()
    with borrowed(other, 1, 32) as theirs, borrowed(model, 2, 32) as wider, borrowed(model, 1, 64) as longer:
        assert all(c not in (first, second) for c in (theirs, wider, longer))
    assert len(pool) == slots.KEEP  # the oldest free caches went


def test_the_mask_sees_each_samples_valid_slots_before_its_tree_and_the_tree_as_its_template():
    cache = SlotCache.__new__(SlotCache)
    cache.slots, cache.at = 8, torch.tensor([3, 1])
    cache.valid = torch.tensor([[True, False, True, False, False, False, False, False],
                                [True, False, False, False, False, False, False, False]])
    template = torch.tensor([[1, 0], [1, 1]], dtype=torch.bool)
    mask = slot_mask(cache, template, torch.tensor([[True, False], [True, True]]))
    assert mask[0, 0].tolist() == [True, False, True, True, False, False, False, False]
    assert mask[0, 1].tolist() == [True, False, True, True, True, False, False, False]  # unfed: itself only
    assert mask[1, 0].tolist() == [True, True, False, False, False, False, False, False]  # sample 1's tree from 1
    assert mask[1, 1].tolist() == [True, True, True, False, False, False, False, False]
    cache.keep(torch.tensor([[True, False], [True, True]]), torch.tensor([1, 2]))
    assert cache.valid[0].tolist()[:5] == [True, False, True, True, False] and cache.at.tolist() == [4, 3]
    assert cache.valid[1].tolist()[:4] == [True, True, True, False]
