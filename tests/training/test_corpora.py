"""The built-in corpora and pasted text: well-formed chats, held-out prompts never in training, one message for bad
text."""

from __future__ import annotations

import re

import pytest

from mars_core.training.corpora import CORPORA, MIN_PASTED_WORDS, corpus_split, pasted_examples
from mars_core.training.data import load_chat_dataset

from tiny import tiny_tokenizer


@pytest.mark.parametrize("name", list(CORPORA))
def test_held_out_prompts_never_occur_in_training(name):
    train, held = corpus_split(name, train=300, held_out=8)
    assert len(train) == 300 and len(held) == 8
    seen = {e["messages"][0]["content"] for e in train}
    assert not seen & {e["messages"][0]["content"] for e in held}
    assert len({e["messages"][0]["content"] for e in held}) == 8
    assert corpus_split(name, train=300, held_out=8) == (train, held)  # seeded: the same items each time


@pytest.mark.parametrize("name", list(CORPORA))
def test_every_example_is_a_labelled_chat(name):
    train, _ = corpus_split(name, train=20, held_out=2)
    dataset = load_chat_dataset(train, tiny_tokenizer(mask_token=True), max_length=160)
    assert len(dataset) == 20  # none dropped: each has an assistant answer within max_length


def test_counting_answers_count():
    for example in corpus_split("counting", train=50, held_out=1)[0]:
        prompt, answer = (m["content"] for m in example["messages"])
        first, last = map(int, re.findall(r"\d+", prompt)[:2])
        numbers = [int(n) for n in answer.rstrip(".").split(", ")]
        steps = {b - a for a, b in zip(numbers, numbers[1:])}
        assert numbers[0] == first and numbers[-1] == last and len(steps) == 1


def test_pasted_text_holds_its_end_out():
    words = [f"w{i}" for i in range(200)]
    train, held = pasted_examples(" ".join(words))
    assert held and train
    assert held[-1]["messages"][1]["content"].split()[-1] == "w199"  # the text's end is held out
    rebuilt = [w for e in train + held for m in e["messages"]
               for w in m["content"].removeprefix("Continue: ").split()]
    assert rebuilt == words  # every word once, in order: cue then answer


@pytest.mark.parametrize("text, said", [
    ("", "Paste some text"), ("   ", "Paste some text"), (None, "Paste some text"),
    ("one two three", "too short"), ("x " * 10_001, "too long"),
])
def test_bad_pasted_text_gets_one_message(text, said):
    with pytest.raises(ValueError, match=said):
        pasted_examples(text)


def test_the_shortest_text_allowed_still_holds_one_passage_out():
    train, held = pasted_examples(" ".join(f"w{i}" for i in range(MIN_PASTED_WORDS)))
    assert len(held) == 1 and len(train) >= 1


def test_an_unknown_corpus_names_the_known_ones():
    with pytest.raises(ValueError, match="counting"):
        corpus_split("poetry")
