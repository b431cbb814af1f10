"""The public API: prompt forms, clear errors for bad input, streaming, live control, stop strings."""

import pytest
import torch

from mars_core import DecodeControl, DecodeOptions, TreeLayout, generate, stream

from tiny import tiny_tokenizer

PROMPTS = ["Count from one to ten", "What is the capital of France? Answer briefly please."]


def test_prompt_forms_agree(model, tokenizer):
    chat = [{"role": "user", "content": PROMPTS[0]}]
    kw = dict(threshold=0.3, max_new_tokens=12)
    as_str = generate(model, tokenizer, PROMPTS[0], **kw)
    assert generate(model, tokenizer, chat, **kw).token_ids == as_str.token_ids
    assert generate(model, tokenizer, [chat], **kw).token_ids == as_str.token_ids
    assert generate(model, tokenizer, [PROMPTS[0]], **kw).token_ids == as_str.token_ids
    raw = generate(model, tokenizer, PROMPTS[0], chat=False, **kw)  # no template: a different prompt
    assert raw.token_ids != as_str.token_ids
    assert as_str.text == tokenizer.decode(as_str.token_ids[0], skip_special_tokens=True)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(prompts=""), "empty prompt"),
        (dict(prompts="   "), "empty prompt"),
        (dict(prompts=[]), "non-empty"),
        (dict(prompts=[{"role": "user", "content": ""}]), "empty prompt"),
        (dict(threshold=0.0), "threshold"),
        (dict(threshold=1.5), "threshold"),
        (dict(threshold=-0.1), "threshold"),
        (dict(block_size=0), "block_size"),
        (dict(block_size=2.5), "block_size"),
        (dict(max_new_tokens=0), "max_new_tokens"),
        (dict(temperature=-1.0), "temperature"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(temperature=float("inf")), "temperature"),
        (dict(prompts=[[1, 2, 3]]), "a prompt is a string or a chat"),  # token ids
        (dict(top_p=0.0), "top_p"),
        (dict(confidence="vibes"), "confidence"),
        (dict(strategy="beam"), "strategy"),
        (dict(control=DecodeControl(), threshold=0.5), "on the control, not beside it"),
        (dict(control=DecodeControl(), temperature=0.7, top_p=0.9), "temperature, top_p"),
        (dict(prompts="word " * 300), "too long"),
        (dict(max_new_tokens=250), "too long"),
    ],
)
def test_bad_input_gets_a_clear_error(model, tokenizer, kwargs, message):
    kwargs = {"prompts": "hello", **kwargs}
    with pytest.raises(ValueError, match=message):
        generate(model, tokenizer, **kwargs)
    with pytest.raises(ValueError, match=message):
        next(iter(stream(model, tokenizer, **kwargs)))


def test_options_object_equals_keywords(model, tokenizer):
    """generate and stream take one DecodeOptions or its fields as keywords (keywords override the object)."""
    options = DecodeOptions(strategy="verified", threshold=0.3, max_new_tokens=12)
    assert (generate(model, tokenizer, PROMPTS, options).token_ids
            == generate(model, tokenizer, PROMPTS, strategy="verified", threshold=0.3, max_new_tokens=12).token_ids)
    shorter = generate(model, tokenizer, PROMPTS[0], options, max_new_tokens=5)
    assert len(shorter.token_ids[0]) == 5 and options.max_new_tokens == 12  # the object itself is not changed
    events = list(stream(model, tokenizer, PROMPTS[0], options, max_new_tokens=5))
    assert [t for e in events for t in e.token_ids[0]] == shorter.token_ids[0]


def test_unknown_options_and_bad_layouts_are_refused(model, tokenizer):
    with pytest.raises(TypeError, match="unknown decoding option.*threshhold"):
        generate(model, tokenizer, "hello", threshhold=0.5)
    with pytest.raises(TypeError, match="known:.*threshold"):
        next(iter(stream(model, tokenizer, "hello", blocksize=4)))
    for bad in (dict(group_floor=1.5), dict(lookup_drafts=-1), dict(lookup_ngrams=()), dict(lookup_odds=-0.1)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            TreeLayout(**bad)


def test_mars_needs_a_mask_token(model):
    plain = tiny_tokenizer(mask_token=False)
    with pytest.raises(ValueError, match="mask token"):
        generate(model, plain, "hello", block_size=4)
    beyond = tiny_tokenizer(mask_token=False)  # a mask token the model's vocabulary has no row for
    beyond.add_special_tokens({"mask_token": "<|beyond|>"})
    assert beyond.mask_token_id >= model.get_input_embeddings().num_embeddings
    with pytest.raises(ValueError, match="not in the model's vocabulary"):
        generate(model, beyond, "hello", block_size=4, max_new_tokens=5)
    # one token per forward needs no mask token
    assert len(generate(model, plain, "hello", strategy="ar", max_new_tokens=5).token_ids[0]) == 5


@pytest.mark.parametrize("strategy", ["ar", "sliding", "block"])
def test_stream_concatenates_to_generate(model, tokenizer, strategy):
    kw = dict(strategy=strategy, threshold=0.3, max_new_tokens=20)
    events = list(stream(model, tokenizer, PROMPTS, **kw))
    result = generate(model, tokenizer, PROMPTS, **kw)
    assert [e.forward for e in events] == list(range(result.forwards))
    for i in range(len(PROMPTS)):
        assert [t for e in events for t in e.token_ids[i]] == result.token_ids[i]
        assert "".join(e.texts[i] for e in events) == result.texts[i]
        assert all(len(e.confidences[i]) == len(e.token_ids[i]) for e in events)
    assert events[-1].done == [True, True]
    assert all(a.elapsed <= b.elapsed for a, b in zip(events, events[1:]))


def test_one_token_mode_feeds_no_masks(model, tokenizer):
    """At threshold 1 no mask prediction can be accepted, so none is computed: only the AR proposal."""
    events = list(stream(model, tokenizer, PROMPTS[0], threshold=1.0, block_size=4, max_new_tokens=6))
    assert all(len(e.proposed_ids[0]) == 1 for e in events)


def test_event_shows_the_proposals_it_accepted_from(model, tokenizer):
    for e in stream(model, tokenizer, PROMPTS[0], threshold=0.3, block_size=4, max_new_tokens=20):
        assert len(e.proposed_ids[0]) == 4
        s = e.accepted_from[0]
        n = len(e.token_ids[0])
        assert e.proposed_ids[0][s : s + n] == e.token_ids[0]
        # every accepted proposal after the first passed the threshold, and the one after the run did not
        assert all(c >= e.threshold for c in e.proposed_confidences[0][s + 1 : s + n])
        if s + n < 4 and n < 20:
            assert e.proposed_confidences[0][s + n] < e.threshold or e.done[0]


@pytest.mark.parametrize("strategy", ["sliding", "block"])
def test_threshold_change_acts_from_the_next_forward(model, tokenizer, strategy):
    control = DecodeControl(threshold=0.05)
    counts, thresholds = [], []
    for e in stream(model, tokenizer, PROMPTS[0], control=control, strategy=strategy, max_new_tokens=60):
        counts.append(len(e.token_ids[0]))
        thresholds.append(e.threshold)
        if e.forward == 3:
            control.threshold = 1.0  # as a UI slider would, while the stream runs
    assert max(counts[:4]) > 1  # low threshold: multi-token forwards
    assert thresholds[:4] == [0.05] * 4 and set(thresholds[4:]) == {1.0}
    assert set(counts[4:]) == {1}  # one token per forward from the very next forward


@pytest.mark.parametrize("strategy", ["sliding", "block"])
def test_switching_threshold_mid_block_matches_the_no_cache_reference(model, tokenizer, strategy):
    """Switching between one-token mode (no masks fed) and MARS mode mid-stream, even mid-block, commits
    exactly what a decoder that recomputes everything under the same per-forward thresholds commits."""
    from reference import reference_block, reference_sliding

    schedule = lambda f: 1.0 if f % 3 == 2 else 0.2  # noqa: E731  forward f's threshold
    control = DecodeControl(threshold=schedule(0))
    got = []
    for e in stream(model, tokenizer, PROMPTS[0], control=control, strategy=strategy, max_new_tokens=40):
        got += e.token_ids[0]
        control.threshold = schedule(e.forward + 1)
    reference = reference_sliding if strategy == "sliding" else reference_block
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": PROMPTS[0]}], add_generation_prompt=True)
    want, _ = reference(model, prompt["input_ids"], 4, schedule, 40, tokenizer.mask_token_id, {tokenizer.eos_token_id})
    assert got == want
    assert got != generate(model, tokenizer, PROMPTS[0], strategy="ar", max_new_tokens=40).token_ids[0]


def test_stop_ends_the_stream(model, tokenizer):
    control = DecodeControl(threshold=0.5)
    events = []
    for e in stream(model, tokenizer, PROMPTS[0], control=control, max_new_tokens=100):
        events.append(e)
        if e.forward == 2:
            control.stop()
    assert len(events) == 3


def test_stop_strings_cut_the_text(model, tokenizer):
    free = generate(model, tokenizer, PROMPTS, threshold=0.3, max_new_tokens=24)
    # a printable stop string from the middle of some answer (the random model also emits broken UTF-8)
    pieces = (t[k : k + 2] for t in free.texts for k in range(3, len(t) - 1))
    stop = next(p for p in pieces if p.isascii() and p.strip())
    cut = generate(model, tokenizer, PROMPTS, threshold=0.3, max_new_tokens=24, stop_strings=[stop])
    stopped = 0
    for text, ids, cut_text, cut_ids in zip(free.texts, free.token_ids, cut.texts, cut.token_ids):
        assert cut_text == (text[: text.find(stop)] if stop in text else text)
        assert ids[: len(cut_ids)] == cut_ids
        stopped += len(cut_ids) < len(ids)
    assert stopped >= 1


def test_batch_stats(model, tokenizer):
    r = generate(model, tokenizer, PROMPTS, threshold=0.2, max_new_tokens=16)
    assert r.generated_tokens == sum(map(len, r.token_ids)) == 32
    assert r.forwards >= max(r.sample_forwards)
    assert r.tokens_per_forward == pytest.approx(32 / sum(r.sample_forwards))
    assert r.seconds > 0


def test_greedy_is_independent_of_global_rng(model, tokenizer):
    torch.manual_seed(0)
    a = generate(model, tokenizer, PROMPTS, threshold=0.3, max_new_tokens=12)
    torch.manual_seed(123)
    b = generate(model, tokenizer, PROMPTS, threshold=0.3, max_new_tokens=12)
    assert a.token_ids == b.token_ids


@pytest.mark.parametrize("strategy", ["ar", "verified"])
def test_a_stop_string_that_spans_forwards_is_cut_whole(model, tokenizer, strategy):
    """A stop string whose first characters came in an earlier forward: the text is still cut before all of it
    (streamed text holds back what could begin a stop string), the same for every strategy."""
    free = generate(model, tokenizer, PROMPTS, strategy=strategy, max_new_tokens=24)
    spans = []  # stop strings that start in one forward's text and end in a later one's
    for i, text in enumerate(free.texts):
        ends = [len("".join(e.texts[i] for e in list(stream(model, tokenizer, PROMPTS, strategy=strategy,
                                                             max_new_tokens=24))[: k + 1])) for k in range(24)]
        spans += [text[e - 1 : e + 2] for e in ends if 1 <= e <= len(text) - 2 and text[e - 1 : e + 2].isascii()]
    stop = next(s for s in spans if s.strip())
    cut = generate(model, tokenizer, PROMPTS, strategy=strategy, max_new_tokens=24, stop_strings=[stop])
    for text, cut_text in zip(free.texts, cut.texts):
        assert cut_text == (text[: text.find(stop)] if stop in text else text)


def test_one_stop_string_given_as_a_string_is_one_stop_string(tokenizer):
    """stop_strings="fox" is the stop string "fox", not the stops "f", "o" and "x" (a string is a sequence of
    characters): the text is cut before "fox", as with ["fox"]."""
    from mars_core.generate import TextTracker

    ids = tokenizer("The quick brown fox jumps over the lazy dog")["input_ids"]
    texts = []
    for stops in ("fox", ["fox"]):
        tracker = TextTracker(tokenizer, 1, stops)
        texts.append("".join(tracker.update(0, [t], k == len(ids) - 1) for k, t in enumerate(ids)))
    assert texts[0] == texts[1] and texts[0].rstrip() == "The quick brown"
