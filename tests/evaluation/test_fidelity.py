"""mars_core.evaluation.fidelity: teacher-forced next-token predictions of served configurations against the weights
as trained, on tiny models built here (the command itself loads the embedded model)."""

from __future__ import annotations

import copy

import pytest
import torch

from mars_core.evaluation import fidelity
from mars_core.runtime import ATTENTION, Runtime, prepare

from tiny import tiny_llama, tiny_tokenizer

RECORDS = [{"prompt": "count to five", "reference": "one two three four five"},
           {"prompt": "hello there", "reference": "hello to you too, friend"}]


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer(mask_token=True)


def test_the_answer_follows_the_prompt_as_the_chat_template_closes_it_up_to_its_stop(tok):
    """The prompt's ids, then the answer and its end token (a decode predicts it and stops), not the newline the
    template writes after it."""
    ids, start = fidelity.answer_ids(tok, RECORDS[0], [tok.eos_token_id])
    assert ids[:start] == fidelity.encode_prompt(tok, RECORDS[0]["prompt"]) and len(ids) > start
    assert ids[-1] == tok.eos_token_id and ids.count(tok.eos_token_id) == 2  # the user turn's end, the answer's
    assert tok.decode(ids[start:]) == "one two three four five<|im_end|>"
    whole, _ = fidelity.answer_ids(tok, RECORDS[0], [])  # no stop named: the template's text whole
    assert whole[: len(ids)] == ids and len(whole) > len(ids)


def test_served_loads_each_configuration_as_labelled_and_prepares_it(tok, monkeypatch):
    """load() is asked for the dtype and weights the configuration names; the runtime is prepare()'s for that model."""
    asked = []
    model = tiny_llama(len(tok), attn_implementation=ATTENTION)

    def load(name, **kwargs):
        asked.append((name, kwargs))
        return model, tok

    monkeypatch.setattr(fidelity, "load", load)
    got, _, runtime = fidelity.served("fp32", "bf16")
    assert got is model and asked == [(None, {"dtype": "fp32", "device": "cpu", "weights": "bf16"})]
    assert runtime.rows  # prepare()'s runtime: attention by rows


def test_one_forward_gives_each_answer_position_the_logits_the_model_gives_it(tok):
    model = tiny_llama(len(tok), attn_implementation=ATTENTION)
    ids, start = fidelity.answer_ids(tok, RECORDS[1], [tok.eos_token_id])
    got = fidelity.answer_logits(model, prepare(model, check=False, measure_cost=False), ids, start)
    with torch.no_grad():
        want = model(torch.tensor([ids])).logits[0, start - 1 : -1].float()
    assert got.shape == want.shape == (len(ids) - start, model.config.vocab_size)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_each_configuration_is_counted_against_the_reference(tok, monkeypatch):
    """The reference itself agrees everywhere at KL 0; a model with other weights differs somewhere at KL > 0; a
    configuration the machine cannot serve is left out with load()'s reason."""
    model = tiny_llama(len(tok), attn_implementation=ATTENTION)
    other = copy.deepcopy(model)
    with torch.no_grad():
        other.lm_head.weight.add_(torch.randn_like(other.lm_head.weight))  # tied: the embeddings move too
    by_weights = {"bf16": model, "int8": other}

    def served(dtype, weights):
        if dtype == "fp16":
            raise ValueError("weights='fp16' cannot serve here: no")
        return by_weights[weights], tok, Runtime()

    monkeypatch.setattr(fidelity, "served", served)
    monkeypatch.setattr(fidelity, "CONFIGS", (("same", "bf16", "bf16"), ("other", "bf16", "int8"),
                                              ("never", "fp16", "bf16")))
    results, positions, left = fidelity.compare(RECORDS, progress=False)
    same, changed = (r.row() for r in results)
    stops = fidelity.stop_token_ids(model, tok)
    expected = sum(len(ids) - start for ids, start in (fidelity.answer_ids(tok, r, stops) for r in RECORDS))
    assert positions == same["positions"] == changed["positions"] == expected
    assert same["differing"] == 0 and same["top1_agreement"] == 1.0 and same["kl_mean"] == pytest.approx(0, abs=1e-6)
    assert changed["differing"] > 0 and changed["kl_mean"] > 0.01 and 1 <= changed["answers_touched"] <= 2
    assert left == ["never: weights='fp16' cannot serve here: no"]
    assert len(list(fidelity.lines(results))) == 3
