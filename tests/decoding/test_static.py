"""A static runtime (Runtime.static) through the one decoder family: fixed widths (verified's buckets [bonus |
d_1..d_k | G_0..G_k]), every row reading the whole cache, one cache a decode that the next decode reuses; greedy AR's
answer batched and alone, every option (sampling, lookup, stop tokens, live settings) as on the default runtime."""

from __future__ import annotations

import pytest
import torch

from mars_core import DecodeControl, TreeLayout, generate, stream
from mars_core.decoding.verified import decode
from mars_core.decoding.verified.plan import plan_by_cost
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
                                                           ("verified", 16, 0.3)])
def test_static_decoding_equals_hf_generate(trained, tokenizer, strategy, block_size, threshold):
    prompts = PROMPTS + NEW_PROMPTS + list(ANSWERS)[:2]
    want = hf_greedy(trained, tokenizer, prompts, 40)
    kw = dict(strategy=strategy, block_size=block_size, threshold=threshold, max_new_tokens=40, runtime=STATIC,
              layout=TreeLayout(use_cost=False))
    batched = generate(trained, tokenizer, prompts, **kw)
    alone = [generate(trained, tokenizer, p, **kw).token_ids[0] for p in prompts]
    assert alone == want
    assert batched.token_ids == want
    if threshold == 1.0:
        assert batched.tokens_per_forward == 1.0
    else:  # drafts were checked and accepted: not a disguised AR run
        matched = sum(sum(e.matched) for e in stream(trained, tokenizer, prompts, **kw))
        assert matched > 20 and batched.tokens_per_forward > 1.3


@pytest.mark.parametrize("strategy", ["sliding", "block"])
@pytest.mark.parametrize("threshold", [0.9, 0.5])
def test_static_threshold_decoding_is_the_same_decoding(trained, tokenizer, strategy, threshold):
    """Threshold decoding is not greedy AR, but it is the same decoding on either runtime: the same tokens and
    forwards, batched and alone (plain kernels both: the tiny model's rows agree either way)."""
    prompts = PROMPTS + NEW_PROMPTS
    kw = dict(strategy=strategy, block_size=4, threshold=threshold, max_new_tokens=40)
    dynamic = generate(trained, tokenizer, prompts, runtime=Runtime(), **kw)
    static = generate(trained, tokenizer, prompts, runtime=STATIC, **kw)
    assert static.token_ids == dynamic.token_ids
    assert static.tokens_per_forward == dynamic.tokens_per_forward > 1.3
    assert [generate(trained, tokenizer, p, runtime=STATIC, **kw).token_ids[0] for p in prompts] == [
        generate(trained, tokenizer, p, runtime=Runtime(), **kw).token_ids[0] for p in prompts]


def test_verified_feeds_buckets_into_one_cache_reused_by_the_next_decode(trained, tokenizer, monkeypatch):
    """After the prefill every verified forward is a bucket, the widest where width is free and a narrower one where
    the curve prices wide trees out, into one cache; the next decode of that shape takes the same cache back."""
    fed, caches = [], []
    real = decode.fed_then

    def spy(model, cache, ids, *args, **kw):
        fed.append((ids.shape[1], id(cache)))
        return real(model, cache, ids, *args, **kw)

    class Counted(SlotCache):
        def __init__(self, *args):
            caches.append(1)
            super().__init__(*args)

    monkeypatch.setattr(decode, "fed_then", spy)
    monkeypatch.setattr(slots, "SlotCache", Counted)
    monkeypatch.setattr(slots, "_FREE", [])
    free = Runtime(static=True, cost=CostCurve.from_function(lambda b, w: 1.0))
    priced = Runtime(static=True, cost=CostCurve.from_function(lambda b, w: 1.0 if w <= 8 else 10.0))
    layout = TreeLayout(lookup_drafts=0)  # the mask slots' drafts alone: buckets of width 4, 8, 12 and 16 at B = 4
    for runtime, want, made in [(free, {16}, 1), (priced, {4}, 0)]:  # priced: [bonus | d_1..d_3], then [bonus | G_0]
        fed.clear(), caches.clear()
        out = generate(trained, tokenizer, PROMPTS, strategy="verified", block_size=4, threshold=0.3,
                       max_new_tokens=40, runtime=runtime, layout=layout)
        assert out.token_ids == hf_greedy(trained, tokenizer, PROMPTS, 40)
        assert {w for w, _ in fed[1:]} == want and out.forwards == len(fed)
        assert len(caches) == made and len({c for _, c in fed}) == 1  # the second decode reuses the first's cache


def test_every_option_reaches_a_static_runtime(trained, tokenizer):
    """Prompt lookup, stop tokens, max_new_tokens and a threshold changed mid-run, as on the default runtime."""
    prompt = list(ANSWERS)[4]
    free = generate(trained, tokenizer, prompt, strategy="ar", max_new_tokens=40).token_ids[0]
    cut = generate(trained, tokenizer, prompt, strategy="verified", threshold=0.3, max_new_tokens=13, runtime=STATIC)
    assert cut.token_ids[0] == free[:13]
    events = list(stream(trained, tokenizer, prompt, strategy="verified", threshold=0.5, max_new_tokens=40,
                         runtime=STATIC))  # the fox answer says its sentence twice: lookup drafts the second
    assert [t for e in events for t in e.token_ids[0]] == free and any(e.draft_source[0] == "lookup" for e in events)
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


def test_sampling_on_a_static_runtime_is_seeded(model, tokenizer):
    kw = dict(block_size=4, threshold=0.3, max_new_tokens=20, temperature=0.8, top_p=0.9, runtime=STATIC)
    for strategy in ("verified", "sliding"):
        a = generate(model, tokenizer, PROMPTS, strategy=strategy, seed=1, **kw)
        assert a.token_ids == generate(model, tokenizer, PROMPTS, strategy=strategy, seed=1, **kw).token_ids
        assert a.token_ids != generate(model, tokenizer, PROMPTS, strategy=strategy, seed=2, **kw).token_ids


def test_the_plan_at_floor_zero_feeds_every_group_up_to_its_drafts():
    """A static runtime's plan (floors (2, 0): no group, or every one): G_0..G_K for the K drafts the curve pays for,
    a bucket's tree; where width is dear, a plain forward."""
    conf = torch.tensor([[0.9, 0.8, 0.5], [0.6, 0.1, 0.0]])
    count, done = torch.tensor([3, 1]), torch.tensor([False, False])
    kw = dict(draft_yield=torch.tensor(1.0), g=3, floors=(2.0, 0.0))
    k, groups, siblings = plan_by_cost(conf, count, done, torch.ones(40), **kw)  # width is free: every draft
    assert k.tolist() == [3, 1] and groups.tolist() == [[True] * 4, [True, True, False, False]]
    assert not siblings.any()
    steep = torch.tensor([1.0 + 5 * w for w in range(40)])  # width is dear: no draft, no group
    k, groups, _ = plan_by_cost(conf, count, done, steep, **kw)
    assert k.tolist() == [0, 0] and not groups.any()


def test_prepare_picks_the_static_path_on_a_gpu_only():
    """static=None (the default): the static path where it measured faster (CUDA: docs/speed.md#on-an-h100), the
    dynamic one on a CPU; either when asked."""
    from mars_core.runtime import prepare

    from tiny import tiny_llama

    model = tiny_llama(64)
    assert not prepare(model, check=False, measure_cost=False).static
    assert prepare(model, check=False, measure_cost=False, static=True).static
