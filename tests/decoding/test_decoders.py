"""The cached decoders against transformers' generate, a no-cache reference, and each other."""

import pytest

from mars_core import generate

from reference import reference_block, reference_sliding

PROMPTS = [
    "Count from one to ten",
    "What is the capital of France? Answer briefly and clearly please, with the reason.",
    "hello",
]


def encode(tokenizer, text):
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)["input_ids"]


def hf_greedy(model, tokenizer, texts, max_new):
    """transformers' own greedy generate on a left-padded batch, cut after the first EOS."""
    tokenizer.padding_side = "left"
    ids = [encode(tokenizer, t) for t in texts]
    batch = tokenizer.pad({"input_ids": ids}, return_tensors="pt")
    out = model.generate(**batch, max_new_tokens=max_new, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    rows = out[:, batch["input_ids"].shape[1]:].tolist()
    eos = model.generation_config.eos_token_id
    return [row[: row.index(eos) + 1] if eos in row else row for row in rows]


@pytest.mark.parametrize("strategy,block_size", [("ar", 1), ("sliding", 2), ("sliding", 4), ("block", 4), ("block", 3)])
def test_one_token_mode_equals_hf_generate(model, tokenizer, strategy, block_size):
    want = hf_greedy(model, tokenizer, PROMPTS, 24)
    single = [generate(model, tokenizer, p, strategy=strategy, block_size=block_size, threshold=1.0,
                       max_new_tokens=24).token_ids[0] for p in PROMPTS]
    batched = generate(model, tokenizer, PROMPTS, strategy=strategy, block_size=block_size, threshold=1.0,
                       max_new_tokens=24)
    assert single == want
    assert batched.token_ids == want
    assert batched.tokens_per_forward == 1.0


@pytest.mark.parametrize("strategy", ["sliding", "block"])
def test_one_token_mode_feeds_one_token_per_forward(model, tokenizer, strategy):
    """At threshold 1 no decoder re-feeds tokens or feeds masks: after the prefill, every forward is [b, 1] like AR."""
    widths = []
    hook = model.get_decoder().register_forward_pre_hook(lambda m, a, kw: widths.append(kw["input_ids"].shape[1]),
                                                         with_kwargs=True)
    try:
        r = generate(model, tokenizer, PROMPTS, strategy=strategy, block_size=4, threshold=1.0, max_new_tokens=24)
    finally:
        hook.remove()
    assert len(widths) == r.forwards and len(widths) > 10
    assert widths[1:] == [1] * (len(widths) - 1)


def test_stop_token_ends_like_hf(model, tokenizer):
    """With a token the model emits declared as EOS, every decoder stops right after it, as generate does."""
    free = generate(model, tokenizer, PROMPTS[0], strategy="ar", max_new_tokens=24).token_ids[0]
    stop = free[5]
    old = model.generation_config.eos_token_id
    model.generation_config.eos_token_id = stop
    try:
        want = free[: free.index(stop) + 1]
        for strategy in ("ar", "sliding", "block"):
            got = generate(model, tokenizer, PROMPTS[0], strategy=strategy, threshold=1.0, max_new_tokens=24)
            assert got.token_ids[0] == want, strategy
            low = generate(model, tokenizer, PROMPTS[0], strategy=strategy, threshold=0.05, max_new_tokens=24)
            ids = low.token_ids[0]  # whether the stop token comes up depends on what got accepted
            assert stop not in ids[:-1] and (ids[-1] == stop or len(ids) == 24)
    finally:
        model.generation_config.eos_token_id = old


@pytest.mark.parametrize("strategy,reference", [("sliding", reference_sliding), ("block", reference_block)])
@pytest.mark.parametrize("threshold", [0.3, 0.1])
def test_cached_equals_no_cache_reference(model, tokenizer, strategy, reference, threshold):
    stop = {tokenizer.eos_token_id}
    for text in PROMPTS:
        got = generate(model, tokenizer, text, strategy=strategy, block_size=4, threshold=threshold, max_new_tokens=20)
        want, forwards = reference(model, encode(tokenizer, text), 4, threshold, 20, tokenizer.mask_token_id, stop)
        assert got.token_ids[0] == want
        assert got.forwards == forwards


@pytest.mark.parametrize("strategy", ["sliding", "block"])
@pytest.mark.parametrize("block_size", [2, 4, 8])
def test_batched_equals_one_by_one(model, tokenizer, strategy, block_size):
    kw = dict(strategy=strategy, block_size=block_size, threshold=0.2, max_new_tokens=30)
    batched = generate(model, tokenizer, PROMPTS, **kw)
    alone = [generate(model, tokenizer, p, **kw) for p in PROMPTS]
    assert batched.token_ids == [r.token_ids[0] for r in alone]
    assert batched.texts == [r.texts[0] for r in alone]
    assert batched.tokens_per_forward > 1.0  # the test exercises multi-token acceptance
    if strategy == "sliding":  # samples advance independently: the batch takes as many forwards as the slowest
        assert batched.forwards == max(r.forwards for r in alone)
        assert batched.sample_forwards == [r.forwards for r in alone]


def test_lower_threshold_commits_more_per_forward(model, tokenizer):
    tpf = [generate(model, tokenizer, PROMPTS, threshold=t, max_new_tokens=30).tokens_per_forward
           for t in (1.0, 0.5, 0.2, 0.05)]
    assert tpf[0] == 1.0
    assert tpf == sorted(tpf) and tpf[-1] > 1.5


def test_max_new_tokens_is_exact(model, tokenizer):
    for strategy in ("ar", "sliding", "block"):
        r = generate(model, tokenizer, PROMPTS, strategy=strategy, threshold=0.05, max_new_tokens=13)
        assert all(len(ids) == 13 for ids in r.token_ids), strategy
        assert r.generated_tokens == 39


def test_sampling_is_seeded(model, tokenizer):
    kw = dict(threshold=0.3, temperature=0.8, top_p=0.9, max_new_tokens=20)
    a = generate(model, tokenizer, PROMPTS, seed=1, **kw)
    b = generate(model, tokenizer, PROMPTS, seed=1, **kw)
    c = generate(model, tokenizer, PROMPTS, seed=2, **kw)
    greedy = generate(model, tokenizer, PROMPTS, threshold=0.3, max_new_tokens=20)
    assert a.token_ids == b.token_ids
    assert a.token_ids != c.token_ids and a.token_ids != greedy.token_ids


@pytest.mark.parametrize("confidence", ["entropy", "margin"])
def test_confidence_kinds(model, tokenizer, confidence):
    one = generate(model, tokenizer, PROMPTS[0], confidence=confidence, threshold=1.0, max_new_tokens=16)
    low = generate(model, tokenizer, PROMPTS[0], confidence=confidence, threshold=0.01, max_new_tokens=16)
    assert one.tokens_per_forward == 1.0 and low.tokens_per_forward > 1.0


def test_eager_attention_gets_an_additive_mask(tokenizer):
    from tiny import tiny_qwen2

    sdpa = tiny_qwen2(len(tokenizer))
    eager = tiny_qwen2(len(tokenizer), attn_implementation="eager")
    kw = dict(threshold=0.2, max_new_tokens=20)
    assert generate(eager, tokenizer, PROMPTS, **kw).token_ids == generate(sdpa, tokenizer, PROMPTS, **kw).token_ids
