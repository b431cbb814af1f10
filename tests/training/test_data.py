"""Chat data: assistant-only labels (unshifted, end-of-turn included), truncation, collator padding."""

from __future__ import annotations

import json

import pytest
import torch

from mars_core.training.data import (
    END_OF_TURN_TOKENS,
    IGNORE_INDEX,
    ChatCollator,
    end_of_turn_ids,
    load_chat_dataset,
    tokenize_chat,
)

from tiny import tiny_tokenizer

ONE_TURN = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris is the capital of France."},
]
TWO_TURNS = [
    {"role": "user", "content": "List three colours"},
    {"role": "assistant", "content": "red, green, blue."},
    {"role": "user", "content": "Count from one to ten"},
    {"role": "assistant", "content": "1, 2, 3, 4, 5"},
]


def chat_ids(tokenizer, messages, generation_prompt: bool) -> list[int]:
    return tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=generation_prompt)["input_ids"]


def labelled_runs(labels: list[int]) -> list[list[int]]:
    """Maximal runs of consecutive labelled positions, as lists of label values."""
    runs, current = [], []
    for y in labels:
        if y != IGNORE_INDEX:
            current.append(y)
        elif current:
            runs.append(current)
            current = []
    return runs + ([current] if current else [])


def test_prompt_is_ignored_and_response_labelled_unshifted(tokenizer) -> None:
    out = tokenize_chat(tokenizer, ONE_TURN, max_length=512)
    ids, labels = out["input_ids"], out["labels"]
    assert ids == chat_ids(tokenizer, ONE_TURN, False)
    prompt = chat_ids(tokenizer, ONE_TURN[:2], True)
    assert ids[: len(prompt)] == prompt
    assert all(y == IGNORE_INDEX for y in labels[: len(prompt)])  # system, user and assistant header
    labelled = [i for i, y in enumerate(labels) if y != IGNORE_INDEX]
    assert labelled == list(range(len(prompt), labelled[-1] + 1))  # one contiguous run right after the header
    assert all(labels[i] == ids[i] for i in labelled)  # not shifted
    text = tokenizer.decode([labels[i] for i in labelled])
    assert text == "Paris is the capital of France.<|im_end|>"  # the end-of-turn token is learned
    assert all(y == IGNORE_INDEX for y in labels[labelled[-1] + 1 :])  # the template's trailing "\n" is not


def test_every_assistant_turn_is_labelled(tokenizer) -> None:
    out = tokenize_chat(tokenizer, TWO_TURNS, max_length=512)
    runs = [tokenizer.decode(r) for r in labelled_runs(out["labels"])]
    assert runs == ["red, green, blue.<|im_end|>", "1, 2, 3, 4, 5<|im_end|>"]
    user_turn = tokenizer.encode("Count from one to ten", add_special_tokens=False)
    ids = out["input_ids"]
    start = next(i for i in range(len(ids)) if ids[i : i + len(user_turn)] == user_turn)
    assert all(y == IGNORE_INDEX for y in out["labels"][start : start + len(user_turn)])


def test_load_from_jsonl_truncates_and_drops(tokenizer, tmp_path) -> None:
    prompt_len = len(chat_ids(tokenizer, ONE_TURN[:2], True))
    rows = [
        {"messages": ONE_TURN},
        {"messages": TWO_TURNS},
        {"messages": ONE_TURN[:2]},  # no assistant turn: dropped
    ]
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")
    ds = load_chat_dataset(str(path), tokenizer, max_length=512)
    assert len(ds) == 2 and set(ds.column_names) == {"input_ids", "labels"}
    # Cut inside the first prompt: that example has no label left and is dropped.
    cut = load_chat_dataset(rows, tokenizer, max_length=prompt_len - 2)
    assert len(cut) == 1
    assert len(cut[0]["input_ids"]) == prompt_len - 2 == len(cut[0]["labels"])
    short = load_chat_dataset(rows[:1], tokenizer, max_length=prompt_len + 3)
    assert len(short[0]["input_ids"]) == prompt_len + 3
    assert sum(y != IGNORE_INDEX for y in short[0]["labels"]) == 3


def test_load_rejects_data_without_labels(tokenizer) -> None:
    with pytest.raises(ValueError, match="no conversation"):
        load_chat_dataset([{"messages": ONE_TURN[:2]}], tokenizer, max_length=64)
    with pytest.raises(ValueError, match="messages"):
        load_chat_dataset([{"text": "hello"}], tokenizer, max_length=64)


def test_collator_right_pads(tokenizer) -> None:
    features = [
        {"input_ids": [5, 6, 7, 8], "labels": [-100, -100, 7, 8]},
        {"input_ids": [9, 10], "labels": [-100, 10]},
    ]
    batch = ChatCollator(tokenizer.pad_token_id)(features)
    pad = tokenizer.pad_token_id
    assert batch["input_ids"].dtype == torch.long and batch["labels"].dtype == torch.long
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8], [9, 10, pad, pad]]
    assert batch["labels"].tolist() == [[-100, -100, 7, 8], [-100, 10, -100, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    padded = ChatCollator(pad, pad_to_multiple_of=8)(features)
    assert padded["input_ids"].shape == (2, 8) and padded["labels"][0, 4:].eq(-100).all()


def test_end_of_turn_ids_are_the_eos_and_the_known_turn_ends_in_the_vocabulary() -> None:
    """Looked up one token at a time (fast), they equal the ids read off the whole vocabulary; names the
    vocabulary lacks (<|eot_id|>, ...) add nothing, not even the unknown token's id."""
    def from_vocab(tok) -> set[int]:
        vocab = tok.get_vocab()
        return {tok.eos_token_id} | {vocab[t] for t in END_OF_TURN_TOKENS if t in vocab and t != tok.pad_token}

    tokenizer = tiny_tokenizer(mask_token=True)  # its own: the session's tokenizer is shared
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert end_of_turn_ids(tokenizer) == from_vocab(tokenizer) == {im_end}
    tokenizer.eos_token = "<|endoftext|>"  # eos and end of turn differ: both end an answer
    tokenizer.pad_token = "<|reserved_0|>"
    assert end_of_turn_ids(tokenizer) == from_vocab(tokenizer) == {im_end, tokenizer.eos_token_id}
    assert len(end_of_turn_ids(tokenizer)) == 2
