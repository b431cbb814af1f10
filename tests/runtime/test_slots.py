"""The slot cache: a token's slot is its position (fed columns from `at`, the rest after), kept by advancing `at`,
borrowed and given back; its mask; which keys each row reads (the key plan)."""

from __future__ import annotations

import pytest
import torch

from mars_core.runtime import slots
from mars_core.runtime.slots import KEY_ROUND, SlotCache, borrowed, cache_slots

from tiny import tiny_llama


@pytest.fixture
def pool(monkeypatch):
    monkeypatch.setattr(slots, "_FREE", [])
    return slots._FREE


def test_fed_columns_are_written_from_at_in_order_and_the_rest_after_them():
    cache = SlotCache(tiny_llama(64), 2, 16)
    cache.at = torch.tensor([3, 0])
    fed = torch.tensor([[False, True, True, False], [True, True, True, True]])
    assert cache.place(fed).tolist() == [[5, 3, 4, 6], [0, 1, 2, 3]]  # sample 0: fed at 3 and 4, unfed at 5 and 6
    cache.keep(torch.tensor([2, 1]))  # the first two fed columns of sample 0, the first of sample 1
    assert cache.at.tolist() == [5, 1]


def test_a_forward_rewritten_from_a_slot_leaves_the_cache_of_one_that_never_wrote_the_rejected_tokens():
    """Keys and values land at their positions, whatever was written there before: slots past `at` are scratch."""
    model = tiny_llama(64)

    def write(cache: SlotCache, tokens: list[int], start: int) -> None:
        ids, w = torch.tensor([tokens]), len(tokens)
        fed = torch.ones(1, w, dtype=torch.bool)
        index = cache.place(fed)
        mask = cache.mask(torch.ones(1, w, w, dtype=torch.bool).tril(), index)
        with torch.inference_mode():
            model(input_ids=ids, position_ids=torch.arange(start, start + w)[None], attention_mask=mask[:, None],
                  cache=cache.kv, use_cache=True)
        cache.keep(torch.tensor([w]))

    cache = SlotCache(model, 1, 16)
    write(cache, [5, 6, 7, 8], 0)
    cache.at.fill_(2)  # 7 and 8 rejected: the next forward writes from slot 2
    write(cache, [9, 9], 2)
    fresh = SlotCache(model, 1, 16)
    write(fresh, [5, 6, 9, 9], 0)
    assert torch.allclose(fresh.kv.layers[0].keys[0, :, :4], cache.kv.layers[0].keys[0, :, :4], atol=1e-5)
    assert int(fresh.at) == int(cache.at) == 4


def test_repeat_gives_every_sample_what_one_sample_kept():
    model = tiny_llama(64)
    one, batch = SlotCache(model, 1, 16), SlotCache(model, 3, 16)
    with torch.inference_mode():  # as every cache is written
        for layer in one.kv.layers:
            layer.keys.normal_()
            layer.values.normal_()
        one.keep(torch.tensor([5]))
        batch.repeat(one)
    assert batch.at.tolist() == [5, 5, 5]
    for mine, its in zip(batch.kv.layers, one.kv.layers):
        assert all(torch.equal(mine.keys[i], its.keys[0]) and torch.equal(mine.values[i], its.values[0])
                   for i in range(3))


def test_the_mask_sees_each_samples_kept_slots_and_the_fed_columns_at_their_slots():
    cache = SlotCache(tiny_llama(64), 2, 8)
    cache.at = torch.tensor([3, 1])
    fed = torch.tensor([[True, False], [True, True]])
    seen = torch.tensor([[[True, False], [False, True]], [[True, False], [True, True]]])  # an unfed column: itself
    mask = cache.mask(seen, cache.place(fed))
    assert mask[0, 0].tolist() == [True, True, True, True, False, False, False, False]
    assert mask[0, 1].tolist() == [True, True, True, False, True, False, False, False]  # written at 4, after 3
    assert mask[1, 0].tolist() == [True, True, False, False, False, False, False, False]
    assert mask[1, 1].tolist() == [True, True, True, False, False, False, False, False]


def test_borrowed_reuses_a_free_cache_of_the_same_model_and_shape_reset(pool):
    model, other = tiny_llama(64), tiny_llama(64, seed=1)
    with borrowed(model, 1, 32) as first:
        first.at.fill_(5)
        with borrowed(model, 1, 32) as second:  # in use: another cache
            assert second is not first
    with borrowed(model, 1, 32) as again:
        assert again in (first, second) and int(again.at) == 0
    with borrowed(other, 1, 32) as theirs, borrowed(model, 2, 32) as wider, borrowed(model, 1, 64) as longer:
        assert all(c not in (first, second) for c in (theirs, wider, longer))
    assert len(pool) == slots.KEEP  # the oldest free caches went


def test_free_caches_are_kept_up_to_a_bound_in_bytes_and_a_long_decode_gives_memory_back(pool, monkeypatch):
    """A cache is kept for the next decode only while the free ones hold at most KEEP_BYTES together (a long prompt's
    is freed when its decode ends), and a decode whose cache is over TRIM_BYTES gives freed memory back."""
    model = tiny_llama(64)
    trims = []
    monkeypatch.setattr(slots, "give_back_memory", lambda: trims.append(1))
    with borrowed(model, 1, 32) as small:
        pass
    assert [c for *_, c in pool] == [small] and not trims
    monkeypatch.setattr(slots, "KEEP_BYTES", small.bytes * 3 // 2)  # room for the small one, not for a long one
    monkeypatch.setattr(slots, "TRIM_BYTES", small.bytes)
    with borrowed(model, 1, 64) as long:
        assert long.bytes > small.bytes
    assert [c for *_, c in pool] == [small] and trims == [1]  # over the bound: not kept, memory given back


def test_a_free_cache_of_another_dtype_is_not_reused(pool):
    """A model moved to another dtype after a decode gets a cache in its new dtype (the free one no longer fits)."""
    model = tiny_llama(64)
    with borrowed(model, 1, 32) as before:
        pass
    model.to(torch.bfloat16)
    with borrowed(model, 1, 32) as after:
        assert after is not before and after.kv.layers[0].keys.dtype == torch.bfloat16


def test_a_row_reads_its_slot_rounded_up_and_rows_share_calls_by_sample_or_by_column():
    cache = SlotCache(tiny_llama(64), 2, 4 * KEY_ROUND)
    r = KEY_ROUND
    one = cache.key_plan(torch.tensor([[r - 2, r - 1, r, r + 1]]), full=False)  # one sample, 4 rows: 2 calls
    assert [(g.keys, g.sample, g.sel) for g in one] == [(r, 0, slice(0, 2)), (2 * r, 0, slice(2, 4))]
    rows = cache.key_plan(torch.tensor([[5], [r + 5]]), full=False)  # one row a sample: by column, by keys read
    assert [(g.keys, g.col, g.sel) for g in rows] == [(r, 0, slice(0, 1)), (2 * r, 0, slice(1, 2))]
    same = cache.key_plan(torch.tensor([[5, 6, 7], [8, 9, 10]]), full=False)  # 3 calls by column, 2 by sample
    assert [(g.sample, g.sel) for g in same] == [(0, slice(0, 3)), (1, slice(0, 3))]
    full = cache.key_plan(torch.tensor([[5, 6], [r, r + 1]]), full=True)
    assert {g.keys for g in full} == {4 * r} and len(full) == 2
    alone = cache.key_plan(torch.tensor([[5, 6, 7], [8, 9, r + 1]]), full=False, alone=True)  # a call a row
    assert [(g.keys, g.sample, g.sel) for g in alone] == [
        (r, 0, slice(0, 1)), (r, 0, slice(1, 2)), (r, 0, slice(2, 3)),
        (r, 1, slice(0, 1)), (r, 1, slice(1, 2)), (2 * r, 1, slice(2, 3))]
    assert cache_slots(100, 20) % slots.SLOT_ROUND == 0 and cache_slots(100, 20) > 121


def test_graphs_kept_over_a_cache_replay_only_the_model_they_were_captured_for(monkeypatch, pool):
    """A borrowed cache's CUDA graphs replay the weights at the addresses and the modules as they were captured: a
    weight given new storage, or a module attribute changed, and the next decode captures anew. (The graphs are
    stand-ins here: what is tested is when a cache keeps them, on any device.)"""
    from mars_core.runtime import forward

    monkeypatch.setattr(forward, "capturable", lambda device: True)
    model = tiny_llama(64)

    def kept() -> list:
        with forward.new_cache(model, 1, 128) as cache:
            return list(cache.graphs)

    def decode_capturing() -> None:
        with forward.new_cache(model, 1, 128) as cache:
            cache.graphs.setdefault("width 1", object())

    decode_capturing()
    assert kept() == ["width 1"] and len(pool) == 1  # the same model: its graphs kept
    decode_capturing()
    layer = model.model.layers[0]
    layer.mlp.down_proj.weight.data = layer.mlp.down_proj.weight.data.clone()  # new storage
    assert kept() == []
    decode_capturing()
    layer.input_layernorm.variance_epsilon = 1e-3  # a constant a captured graph holds
    assert kept() == []
    decode_capturing()
    with torch.no_grad():
        layer.mlp.down_proj.weight.mul_(2)  # in place: read where it lies
    assert kept() == ["width 1"]
