"""Tests for mars-eval (mars_core.evaluation.eval and the modules it runs: runs, drafts, report, plots): held-out
loading, the report schema, the JSON and the plot."""

from __future__ import annotations

import json

import pytest

from mars_core.decoding.strategies import default_threshold
from mars_core.evaluation import eval as mars_eval
from mars_core.evaluation import prompts
from mars_core.evaluation.drafts import ar_choices, draft_stats
from mars_core.evaluation.plots import calibration_plot
from mars_core.evaluation.runs import decode_records

from tiny import tiny_qwen2, tiny_tokenizer

ROWS = [
    {"messages": [{"role": "user", "content": "Count from 1 to 5."}, {"role": "assistant", "content": "1, 2, 3"}],
     "category": "counting", "gold": "1, 2, 3, 4, 5"},
    {"messages": [{"role": "user", "content": "Hello there!"}, {"role": "assistant", "content": "Hi."}],
     "category": "chat"},
    {"messages": [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "5"}],
     "category": "arithmetic", "gold": "5"},
    {"messages": [{"role": "user", "content": "List three colours."}, {"role": "assistant", "content": "red"}],
     "category": "lists"},
]


@pytest.fixture
def heldout(tmp_path):
    path = tmp_path / "heldout.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    return path


@pytest.fixture
def tiny_dir(tmp_path):
    tok = tiny_tokenizer(mask_token=True)
    folder = tmp_path / "tiny"
    tiny_qwen2(len(tok)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_load_heldout_round_robin(heldout):
    rows = prompts.load_heldout(path=heldout)
    assert len(rows) == 4 and all(r["prompt"] and "reference" in r for r in rows)
    assert len({r["category"] for r in prompts.load_heldout(3, path=heldout)}) == 3


def test_shipped_heldout_is_usable():
    if not prompts.heldout_path().is_file():
        pytest.skip("data/heldout.jsonl not built")
    rows = prompts.load_heldout()
    assert len(rows) >= 90 and len({r["category"] for r in rows}) >= 9


def test_mars_eval_writes_json_with_schema(heldout, tiny_dir, tmp_path, capsys):
    out = tmp_path / "report.json"
    mars_eval.main(["--model", str(tiny_dir), "--data", str(heldout), "--limit", "3", "--thresholds", "1.0,0.5",
                    "--max-new-tokens", "5", "--batch-size", "2", "--json", str(out), "--dtype", "fp32"])
    report = json.loads(out.read_text())
    assert report["block_size"] == 4 and report["model"] == report["source"] == str(tiny_dir)
    assert report["machine"]["dtype"] == "float32" and report["machine"]["cpu"] and "isa" in report["machine"]
    rows = report["rows"]
    assert {r["threshold"] for r in rows if r.get("strategy") != "verified"} == {1.0, 0.5}
    verified = [r for r in rows if r.get("strategy") == "verified"]  # by default one verified run at its threshold
    assert {r["threshold"] for r in verified} == {default_threshold("verified")}
    assert all(r["same_as_one_token"] == 1.0 for r in verified)  # fp32: verified answers are the one-token answers
    for r in rows:
        assert {"threshold", "category", "tokens_per_forward", "accuracy", "agreement", "n"} <= set(r)
        assert r["tokens_per_forward"] >= 1.0 and 0.0 <= r["agreement"] <= 1.0 and r["n"] >= 1
    one = [r for r in rows if r["threshold"] == 1.0 and r["category"] == "all"][0]
    assert one["tokens_per_forward"] == 1.0 and one["n"] == 3
    assert {"counting", "lists", "arithmetic"} <= {r["category"] for r in rows}
    assert len(report["slot_acceptance"]["0.5"]) == 4 and report["slot_acceptance"]["1.0"][1] == 0.0
    assert "1.0" not in report["drafts"]  # one-token mode accepts no drafts: nothing to check
    drafts = report["drafts"]["0.5"]
    assert len(drafts["precision_by_slot"]) == 3 and 0.0 <= drafts["ar_consistency"] <= 1.0
    assert sum(b["n"] for b in drafts["calibration"]) == drafts["drafts"]
    half = [r for r in rows if r["threshold"] == 0.5 and r["category"] == "all"][0]
    assert (half["draft_precision"] is None) == (drafts["drafts"] == 0)
    assert "tok/fwd" in capsys.readouterr().out
    assert out.with_suffix(".png").is_file() or not _have_matplotlib()
    calib = tmp_path / "report_calibration.png"
    assert calib.is_file() == (_have_matplotlib() and drafts["drafts"] > 0)


def _have_matplotlib() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def test_ar_choices_reproduce_greedy_decoding():
    """Re-reading a greedy answer in one causal forward gives back its tokens; a shifted answer does not."""
    import mars_core
    from mars_core.generate import encode_prompt

    tok = tiny_tokenizer(mask_token=True)
    model = tiny_qwen2(len(tok)).eval()
    prompt = "count to five"
    out = mars_core.generate(model, tok, prompt, strategy="ar", max_new_tokens=8).token_ids[0]
    ids = encode_prompt(tok, prompt)
    assert ar_choices(model, ids, out) == out
    shifted = out[1:] + out[:1]
    assert ar_choices(model, ids, shifted) != shifted


def test_draft_stats_counts_slots_and_bins():
    results = [
        {"checks": [(0, 0.5, True), (1, 0.95, True), (2, 0.92, False), (0, 0.7, False), (1, 0.999, True)]},
        {"checks": [(0, 0.6, True)]},
        {"text": "no checks at threshold 1"},
    ]
    stats = draft_stats(results, block_size=4)
    assert stats["drafts"] == 3 and stats["precision"] == round(2 / 3, 4)
    assert stats["precision_by_slot"] == [1.0, 0.0, None]
    assert stats["ar_consistency"] == round(2 / 3, 4) and stats["samples_with_a_wrong_draft"] == 1
    assert [(b["confidence"], b["n"], b["precision"]) for b in stats["calibration"]] == [
        ([0.9, 0.95], 1, 0.0), ([0.95, 0.98], 1, 1.0), ([0.999, 1.0], 1, 1.0)]
    assert draft_stats([{"checks": []}], block_size=4) is None


def test_calibration_plot(tmp_path):
    report = {"drafts": {"0.5": {"drafts": 3, "calibration": [
        {"confidence": [0.5, 0.7], "n": 1, "precision": 1.0}, {"confidence": [0.9, 0.95], "n": 2, "precision": 0.5}]}}}
    assert calibration_plot({"a": {"drafts": {}}}, tmp_path / "none.png") is None
    if _have_matplotlib():
        assert calibration_plot({"a": report, "b": report}, tmp_path / "c.png") == str(tmp_path / "c.png")
        assert (tmp_path / "c.png").stat().st_size > 1000


def test_verified_rows_follow_the_fixed_rules_whatever_cost_curve_the_runtime_carries(tokenizer):
    """A cost curve measured on a busy machine must not move the model's tokens per forward: mars-eval sizes its
    verified trees by the fixed rules. Where no tree pays, the curve alone would make every forward one token."""
    from mars_core.runtime import CostCurve, Runtime

    from trained import ANSWERS, mars_trained

    model = mars_trained("qwen2", tokenizer)
    records = [{"prompt": p, "category": "chat"} for p in ANSWERS]

    def forwards(runtime=None) -> list[int]:
        results, _, _ = decode_records(model, tokenizer, records, threshold=0.05, block_size=4,
                                       batch_size=8, max_new_tokens=40, strategy="verified", runtime=runtime)
        assert sum(r["tokens"] for r in results) > 1.3 * sum(r["forwards"] for r in results)  # it really drafts
        return [r["forwards"] for r in results]

    plain = forwards()
    steep = CostCurve.from_function(lambda b, w: 0.01 * w**2)  # each token fed costs a forward more
    assert forwards(Runtime(cost=steep)) == plain


def test_confidence_kind_reaches_the_decoder(tokenizer):
    """--confidence changes what a threshold compares: the top-1 minus top-2 margin never exceeds the chosen token's
    probability, so from the same prefix (each prompt's first forward) margin-confidence threshold mode accepts no
    more mask predictions than probability-confidence mode, and at some threshold fewer. (Whole answers are not
    compared: a run that accepted otherwise goes on from another text.)"""
    from mars_core.generate import stream

    from trained import ANSWERS, mars_trained

    model = mars_trained("qwen2", tokenizer)

    def first_forward_tokens(confidence: str, threshold: float) -> int:
        return sum(len(next(iter(stream(model, tokenizer, p, strategy="sliding", block_size=4, threshold=threshold,
                                        max_new_tokens=8, confidence=confidence))).token_ids[0]) for p in ANSWERS)

    pairs = [(first_forward_tokens("prob", t), first_forward_tokens("margin", t)) for t in (0.5, 0.9, 0.99, 0.999)]
    assert all(len(ANSWERS) <= margin <= prob for prob, margin in pairs), pairs
    assert any(margin < prob for prob, margin in pairs), pairs
    records = [{"prompt": p, "category": "chat"} for p in ANSWERS]  # and mars-eval passes it on
    results, _, _ = decode_records(model, tokenizer, records[:2], threshold=0.6, block_size=4,
                                   batch_size=2, max_new_tokens=8, confidence="margin")
    assert all(r["tokens"] for r in results)


def test_rescore_scores_the_stored_answers_again(heldout, tiny_dir, tmp_path):
    """--rescore recomputes every row's accuracy from the report's stored answers and leaves the rest of the row."""
    out = tmp_path / "report.json"
    mars_eval.main(["--model", str(tiny_dir), "--data", str(heldout), "--thresholds", "1.0,0.5", "--samples",
                    "--verified-thresholds", "", "--max-new-tokens", "3", "--json", str(out), "--dtype", "fp32"])
    report = json.loads(out.read_text())
    records = prompts.load_heldout(path=heldout)
    for texts in report["samples"].values():  # answer every gold record right, in the report's record order
        texts[:] = [r.get("gold", "") for r in records]
    out.write_text(json.dumps(report))
    fixed = tmp_path / "rescored.json"
    mars_eval.main(["--rescore", str(out), "--data", str(heldout), "--json", str(fixed)])
    again = json.loads(fixed.read_text())
    assert again["scorer"] == "matching"
    for old, new in zip(report["rows"], again["rows"]):
        assert new == old | {"accuracy": new["accuracy"]}
        assert new["accuracy"] == (1.0 if new["n_gold"] else None)
    assert {r["category"] for r in again["rows"] if r["n_gold"]} >= {"all", "counting", "arithmetic"}
    del report["samples"]
    out.write_text(json.dumps(report))
    with pytest.raises(ValueError, match="--samples"):
        mars_eval.main(["--rescore", str(out), "--data", str(heldout)])
