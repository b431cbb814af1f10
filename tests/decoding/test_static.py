"""Static-shape decoding (decoding/static): greedy AR's answer from fixed-width forwards into a cache allocated once,
batched as one by one; threshold decoding as the dynamic decoder's; the buckets, the mask and the plan."""

from __future__ import annotations

import pytest
import torch

from mars_core import DecodeControl, generate, stream
from mars_core.decoding.static import buckets, decode
from mars_core.decoding.static.buckets import Bucket, choose, expected_tokens, verify_buckets
from mars_core.runtime import CostCurve, Runtime, slots
from mars_core.runtime.slots import SlotCache

from test_decoders import PROMPTS, hf_greedy
from trained import ANSWERS, mars_trained

STATIC = Runtime(static=True)
NEW_PROMPTS = ["Count from one to ten, please", "List three colours and a fruit"]


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def trained(request, tokenizer):
    return mars_trained(request.param, tokenizer)


@pytest.mark.parametrize("strategy,block_size,threshold", [("ar", 1, 1.0), ("verified", 4, 1.0), ("verified", 2, 0.5),
                                                           ("verified", 4, 0.3), ("verified", 8, 0.1),
                                                           ("verified", 16, 0.3)])  # B 16: a cache past SLACK
def test_static_decoding_equals_hf_generate(trained, tokenizer, strategy, block_size, threshold):
    prompts = PROMPTS + NEW_PROMPTS + list(ANSWERS)[:2]
    want = hf_greedy(trained, tokenizer, prompts, 40)
    kw = dict(strategy=strategy, block_size=block_size, threshold=threshold, max_new_tokens=40, runtime=STATIC)
    batched = generate(trained, tokenizer, prompts, **kw)
    alone = [generate(trained, tokenizer, p, **kw).token_ids[0] for p in prompts]
    assert alone == want
    assert batched.token_ids == want
    if threshold == 1.0:
        assert batched.tokens_per_forward == 1.0
    else:  # drafts were checked and accepted: not a disguised AR run
        matched = sum(sum(e.matched) for e in stream(trained, tokenizer, prompts, **kw))
        assert matched > 20 and batched.tokens_per_forward > 1.3


@pytest.mark.parametrize("threshold", [0.9, 0.5])
def test_static_threshold_decoding_is_the_dynamic_decoders(trained, tokenizer, threshold):
    """Threshold decoding is not greedy AR, but it is the same decoding: the same tokens and forwards either way."""
    prompts = PROMPTS + NEW_PROMPTS
    kw = dict(strategy="sliding", block_size=4, threshold=threshold, max_new_tokens=40)
    dynamic = generate(trained, tokenizer, prompts, **kw)
    static = generate(trained, tokenizer, prompts, runtime=STATIC, **kw)
    assert static.token_ids == dynamic.token_ids
    assert static.tokens_per_forward == dynamic.tokens_per_forward > 1.3
    assert [generate(trained, tokenizer, p, runtime=STATIC, **kw).token_ids[0] for p in prompts] == [
        generate(trained, tokenizer, p, **kw).token_ids[0] for p in prompts]


def test_forwards_are_buckets_into_one_cache_never_cropped(trained, tokenizer, monkeypatch):
    """After the prefill every forward feeds one bucket, the widest where width is free and a narrower one where the
    curve prices wide trees out, into one cache of a fixed length that is never cropped; the next decode of that shape
    reuses the cache, reset."""
    fed, caches = [], []
    real = decode.hidden_states

    def spy(model, ids, positions, mask, cache, runtime):
        fed.append((ids.shape[1], mask.shape[-1], id(cache)))
        return real(model, ids, positions, mask, cache, runtime)

    class Counted(SlotCache):
        def __init__(self, *args):
            caches.append(1)
            super().__init__(*args)

    monkeypatch.setattr(decode, "hidden_states", spy)
    monkeypatch.setattr(slots, "SlotCache", Counted)
    monkeypatch.setattr(slots, "_FREE", [])
    from transformers import StaticCache
    monkeypatch.setattr(StaticCache, "crop", lambda *_: pytest.fail("a static cache is never cropped"))
    free = Runtime(static=True, cost=CostCurve.from_function(lambda b, w: 1.0))
    priced = Runtime(static=True, cost=CostCurve.from_function(lambda b, w: 1.0 if w <= 8 else 10.0))
    for runtime, want, made in [(free, {16}, 1), (priced, {8}, 0)]:  # B = 4: buckets of width 4, 8, 12 and 16
        fed.clear(), caches.clear()
        out = generate(trained, tokenizer, PROMPTS, strategy="verified", block_size=4, threshold=0.3,
                       max_new_tokens=40, runtime=runtime)
        assert out.token_ids == hf_greedy(trained, tokenizer, PROMPTS, 40)
        assert {w for w, *_ in fed[1:]} == want and out.forwards == len(fed)
        assert len(caches) == made and len({c for *_, c in fed}) == 1  # the second decode reuses the first's cache
        assert len({t for _, t, _ in fed}) == 1  # every forward reads the same key length


def test_a_decode_that_prices_its_own_steps_leaves_a_bucket_the_curve_priced_wrongly(trained, tokenizer,
                                                                                      monkeypatch):
    """A curve that calls the widest tree free keeps every forward at width 16; where the decode prices its own steps
    (Runtime.live_cost; always on a GPU), the widest bucket's real time soon prices it above the others, and the
    answer stays greedy AR's."""
    widths = []
    real = decode.hidden_states
    monkeypatch.setattr(decode, "hidden_states", lambda model, ids, *a: (widths.append(ids.shape[1]),
                                                                          real(model, ids, *a))[1])
    wrong = CostCurve.from_function(lambda b, w: 1e-7 if w == 16 else 1e-4)  # a real step takes milliseconds
    prompts = list(ANSWERS)[3:]
    kw = dict(strategy="verified", block_size=4, threshold=0.3, max_new_tokens=60)
    for live, many in ((False, False), (True, True)):
        widths.clear()
        out = generate(trained, tokenizer, prompts, runtime=Runtime(static=True, cost=wrong, live_cost=live), **kw)
        assert out.token_ids == hf_greedy(trained, tokenizer, prompts, 60)
        assert (len(set(widths[1:])) > 1) == many and widths[1] == 16, widths


def test_stop_tokens_max_new_tokens_and_a_threshold_changed_mid_run(trained, tokenizer):
    prompt = list(ANSWERS)[4]
    free = generate(trained, tokenizer, prompt, strategy="ar", max_new_tokens=40).token_ids[0]
    cut = generate(trained, tokenizer, prompt, strategy="verified", threshold=0.3, max_new_tokens=13, runtime=STATIC)
    assert cut.token_ids[0] == free[:13]
    old, trained.generation_config.eos_token_id = trained.generation_config.eos_token_id, free[7]
    try:
        got = generate(trained, tokenizer, prompt, strategy="verified", threshold=0.3, max_new_tokens=30,
                       runtime=STATIC)
        assert got.token_ids[0] == free[: free.index(free[7]) + 1]
    finally:
        trained.generation_config.eos_token_id = old
    control, ids, taus = DecodeControl(threshold=1.0), [], []
    for e in stream(trained, tokenizer, prompt, strategy="verified", max_new_tokens=40, control=control,
                    runtime=STATIC):
        ids += e.token_ids[0]
        taus.append(e.threshold)
        control.threshold = 0.2 if e.forward < 6 else 1.0
    assert ids == free and 0.2 in taus and taus[0] == 1.0


def test_sampling_runs_the_dynamic_verified_decoder_and_static_threshold_decoding(trained, tokenizer):
    kw = dict(block_size=4, threshold=0.5, max_new_tokens=20, temperature=0.8, seed=3, runtime=STATIC)
    verified = generate(trained, tokenizer, PROMPTS, strategy="verified", **kw)
    assert verified.token_ids == generate(trained, tokenizer, PROMPTS, strategy="verified",
                                          **{**kw, "runtime": Runtime()}).token_ids
    sampled = generate(trained, tokenizer, PROMPTS, strategy="sliding", **kw)
    assert all(len(ids) > 0 for ids in sampled.token_ids)


# ----------------------------------------------------------------------------- the pieces


def test_a_bucket_is_a_verified_tree_of_fixed_width():
    bucket = Bucket(1, 2, 3)  # [bonus | d1 d2 | G0 G1 G2]
    assert bucket.width == 1 + 2 + 3 * 3 and [b.width for b in verify_buckets(3, 3)] == [4, 8, 12, 16]
    assert bucket.offsets.tolist() == [1, 2, 1, 2, 3, 2, 3, 4, 3, 4, 5]  # d_a at +a, mask t of G_j at +j+1+t
    seen = bucket.template
    g1 = slice(6, 9)
    assert seen[g1, :2].all() and not seen[g1, 2].any() and not seen[g1, 3:6].any()  # G_1 sees bonus, d_1 only
    assert seen[2, :3].all() and bucket.group_start(torch.tensor([0, 2])).tolist() == [3, 9]
    assert verify_buckets(3, 0) == [Bucket(1, 0, 0)] and Bucket(1, 0, 0).width == 1


def test_the_plan_prices_a_whole_step_by_its_width():
    conf = torch.tensor([[0.9, 0.8, 0.5], [0.6, 0.1, 0.0]])
    count = torch.tensor([3, 1])
    live = torch.tensor([True, True])
    want = [2.0, 2.0 + 0.9 + 0.6, 2.0 + 0.9 + 0.6 + 0.72, 2.0 + 0.9 + 0.6 + 0.72 + 0.36]
    assert expected_tokens(conf, count, live).tolist() == pytest.approx(want)
    assert expected_tokens(conf, count, torch.tensor([True, False])).tolist() == pytest.approx(
        [1.0, 1.9, 2.62, 2.98])
    flat = torch.ones(4)
    assert int(choose(conf, count, live, flat)) == 3  # width is free: every draft
    steep = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert int(choose(conf, count, live, steep)) == 0  # each draft costs a whole forward: none
    assert int(choose(conf, count, live, torch.tensor([1.0, 1.2, 1.5, 10.0]))) == 1  # rates 2, 2.92, 2.81, 0.46
    assert int(choose(conf, count, live, torch.tensor([1.0, 1.2, 1.3, 10.0]))) == 2  # 2, 2.92, 3.25, 0.46
    assert int(choose(conf, count, live, None)) == 3  # no curve: the longest confident chain
    assert int(choose(conf, torch.zeros(2, dtype=torch.long), live, flat)) == 0  # no drafts: ties to k = 0
    assert buckets.verify_buckets(2, 1)[-1].width == 1 + 2 + 3
