"""Tests for the self-distillation data builder (mars_core.evaluation.distill) and the scorers (tasks)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json

import pytest

from mars_core.evaluation import distill, tasks

from tiny import tiny_qwen2, tiny_tokenizer

COUNTS = {"lists": 3, "counting": 3, "arithmetic": 2, "explanation": 2, "chat": 2, "reasoning": 2}


def test_split_never_overlaps():
    train, held = distill.split_prompts(COUNTS, heldout_per_category=2, seed=0)
    assert len(held) == 2 * len(COUNTS)
    assert {r["category"] for r in held} == set(COUNTS)
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in held}


def test_scorers():
    assert tasks.score({"gold": "42"}, "First 40 + 2. The answer is 42.") == 1.0
    assert tasks.score({"gold": "42"}, "The answer is 41.") == 0.0
    assert tasks.score({"gold": "1, 2, 3"}, "1\n2\n3") == 1.0
    assert tasks.score({"gold": "red|blue"}, "- Red\n- Blue") == 1.0
    assert tasks.score({}, "anything") is None


def test_scorer_names_what_scores_reasoning_gym_records(monkeypatch):
    """Without reasoning-gym its tasks' records are scored by matching, which scores differently: the report says so."""
    records = [{"gold": "42"}, {"gold": "7", "task": "basic_arithmetic"}]
    assert tasks.scorer(records[:1]) == "matching"
    found = importlib.util.find_spec

    def installed(present: bool):
        return lambda name, *a: (object() if present else None) if name == "reasoning_gym" else found(name, *a)

    monkeypatch.setattr(importlib.util, "find_spec", installed(False))
    assert tasks.scorer(records).startswith("matching only: reasoning-gym is not installed, so 1 records")
    monkeypatch.setattr(importlib.util, "find_spec", installed(True))
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "9.9")
    assert tasks.scorer(records) == "reasoning-gym 9.9 for 1 records, matching for the rest"


def test_build_writes_records_with_shape_and_split(tmp_path):
    tok = tiny_tokenizer(mask_token=True)
    model = tiny_qwen2(len(tok))
    train, held = distill.build(tmp_path, model, tok, train_counts=COUNTS, heldout_per_category=1,
                                batch_size=4, max_new_tokens=6, progress=False)
    assert len(held) == len(COUNTS) and len(train) == sum(COUNTS.values())
    for name, rows in (("train", train), ("heldout", held)):
        lines = (tmp_path / f"{name}.jsonl").read_text().splitlines()
        assert [json.loads(x) for x in lines] == rows
        for r in rows:
            roles = [m["role"] for m in r["messages"]]
            assert roles == ["user", "assistant"] and r["category"] in COUNTS
            assert isinstance(r["messages"][1]["content"], str)
            assert set(r) <= {"messages", "category", "gold", "task", "truncated"}
    assert not {r["messages"][0]["content"] for r in train} & {r["messages"][0]["content"] for r in held}
    assert not (tmp_path / distill.PARTIAL).exists()
    # the answers are the model's own greedy continuations
    from mars_core.generate import generate

    r = held[0]
    again = generate(model, tok, [r["messages"][0]["content"]], strategy="ar", max_new_tokens=6)
    assert again.texts[0].strip() == r["messages"][1]["content"]


def test_build_excludes_prompts_of_earlier_files(tmp_path):
    """A second build (another seed) with --exclude never repeats an earlier build's prompts."""
    tok = tiny_tokenizer(mask_token=True)
    model = tiny_qwen2(len(tok))
    train_p, held_p = distill.split_prompts(COUNTS, 1, 0)
    earlier = tmp_path / "earlier.jsonl"
    taken = train_p[:3] + held_p[:2]
    distill.write_jsonl([distill.to_record(r, "x") for r in taken], earlier)
    train, held = distill.build(tmp_path / "new", model, tok, train_counts=COUNTS, heldout_per_category=1,
                                batch_size=8, max_new_tokens=2, progress=False, exclude=[earlier])
    kept = {r["messages"][0]["content"] for r in train + held}
    assert len(train) + len(held) == len(train_p) + len(held_p) - len(taken)
    assert not kept & {r["prompt"] for r in taken}


def test_prompts_written_then_answered_in_shards_equal_one_build(tmp_path):
    """--write-prompts draws what build would train on (no model); answering those in shards, one process each,
    gives build's answers, every prompt once."""
    tok = tiny_tokenizer(mask_token=True)
    model = tiny_qwen2(len(tok))
    train, _ = distill.build(tmp_path / "one", model, tok, train_counts=COUNTS, heldout_per_category=1,
                             batch_size=4, max_new_tokens=6, progress=False)
    spec = ",".join(f"{c}={n}" for c, n in COUNTS.items())
    distill.main(["--out", str(tmp_path / "p"), "--train", spec, "--heldout", "1", "--write-prompts"])
    records = [json.loads(x) for x in (tmp_path / "p" / "prompts.jsonl").read_text().splitlines()]
    assert [r["prompt"] for r in records] == [r["messages"][0]["content"] for r in train]
    answered = []
    for k in range(3):
        part, name = distill.shard(records, f"{k}/3")
        assert name == f"train.{k}-of-3"
        rows = distill.answer_prompts(tmp_path / "p", part, model, tok, name=name, batch_size=4, max_new_tokens=6,
                                      progress=False)
        assert [json.loads(x) for x in (tmp_path / "p" / f"{name}.jsonl").read_text().splitlines()] == rows
        assert not (tmp_path / "p" / f".{name}_partial.jsonl").exists()
        answered += rows
    key = lambda r: r["messages"][0]["content"]  # noqa: E731
    assert sorted(answered, key=key) == sorted(train, key=key)


def test_write_prompts_leaves_out_excluded_files(tmp_path):
    earlier = tmp_path / "earlier.jsonl"
    first = distill.training_prompts(COUNTS, 1, 0)
    distill.write_jsonl([distill.to_record(r, "x") for r in first[:4]], earlier)
    kept = distill.training_prompts(COUNTS, 1, 0, exclude=[earlier])
    assert [r["prompt"] for r in kept] == [r["prompt"] for r in first[4:]]


def test_shard_spec():
    records = [{"prompt": str(i)} for i in range(7)]
    assert distill.shard(records, None) == (records, "train")
    assert [r["prompt"] for r in distill.shard(records, "1/3")[0]] == ["1", "4"]
    for bad in ("3/3", "a/2", "1", "-1/2"):
        with pytest.raises(ValueError, match="--shard"):
            distill.shard(records, bad)
