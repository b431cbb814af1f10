"""Joined decodes (continuous batching): samples that join a running decode and leave it get, token for token, the
answer each gets alone; stopping one leaves the others' answers as they were."""

import pytest
import torch

from mars_core import DecodeOptions, generate
from mars_core.decoding.joined import Joined
from mars_core.generate import decode_spec, encode_prompt

from trained import ANSWERS, mars_trained

PROMPTS = list(ANSWERS)


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def trained(request, tokenizer):
    return mars_trained(request.param, tokenizer)


def run_joined(model, tokenizer, kind, taus, *, arrive_at, max_new=40, stop_at=None):
    """Decode PROMPTS[k] at taus[k] in one joined decode, prompt k arriving before forward arrive_at[k] (a newcomer
    prefills alone, then merges); done samples leave at once; stop_at = (k, forward) stops prompt k there.
    Returns each prompt's committed tokens and the most samples a forward fed."""
    strategy = {"ar": "ar", "sliding": "sliding", "verified": "verified"}[kind]
    block = 1 if kind == "ar" else 4
    spec = decode_spec(model, tokenizer, DecodeOptions(strategy=strategy, max_new_tokens=max_new), block)
    ids = [encode_prompt(tokenizer, p) for p in PROMPTS]
    got = {k: [] for k in range(len(PROMPTS))}
    rows, running, widest, forward = [], None, 0, 0

    def record(step, order):
        for i, k in enumerate(order):
            s, e = int(step.start[i]), int(step.end[i])
            got[k].extend(step.tokens[i, s:e].tolist())

    while forward == 0 or running is not None or any(a >= forward for a in arrive_at):
        new = [k for k, a in enumerate(arrive_at) if a == forward]
        if new:  # the newcomers' prefill, a decode of their own, then they join
            fresh = Joined.start(model, [ids[k] for k in new], spec, kind, taus[new[0]] if kind == "verified" else 1)
            record(fresh.step([taus[k] for k in new]), new)
            fresh.finish()
            keep = [i for i, d in enumerate(fresh.answer.done.tolist()) if not d]
            if keep:
                fresh, new = fresh.take(keep), [new[i] for i in keep]
                running, rows = (fresh, new) if running is None else (running.merge(fresh), rows + new)
        if running is not None:
            widest = max(widest, running.size)
            step = running.step([taus[k] for k in rows])
            record(step, rows)
            stop = torch.tensor([stop_at is not None and k == stop_at[0] and forward >= stop_at[1] for k in rows])
            running.finish(stop)
            keep = [i for i, d in enumerate(running.answer.done.tolist()) if not d]
            running, rows = (running.take(keep), [rows[i] for i in keep]) if keep else (None, [])
        forward += 1
    return got, widest


@pytest.mark.parametrize("kind", ["ar", "sliding", "verified"])
def test_a_sample_that_joins_and_leaves_gets_its_answer_alone(trained, tokenizer, kind):
    taus = {"ar": [1.0] * 5, "sliding": [0.9, 0.5, 1.0, 0.7, 0.3], "verified": [0.3] * 5}[kind]
    strategy = kind
    alone = [generate(trained, tokenizer, p, strategy=strategy, block_size=4, threshold=t,
                      max_new_tokens=40).token_ids[0] for p, t in zip(PROMPTS, taus)]
    got, widest = run_joined(trained, tokenizer, kind, taus, arrive_at=[0, 0, 2, 3, 9])
    assert [got[k] for k in range(len(PROMPTS))] == alone
    assert widest >= 3  # they did share forwards


def test_a_stopped_sample_leaves_the_others_as_they_were(trained, tokenizer):
    taus = [0.3] * 5
    alone = [generate(trained, tokenizer, p, strategy="verified", block_size=4, max_new_tokens=40).token_ids[0]
             for p in PROMPTS]
    got, _ = run_joined(trained, tokenizer, "verified", taus, arrive_at=[0, 0, 1, 1, 2], stop_at=(1, 2))
    for k in (0, 2, 3, 4):
        assert got[k] == alone[k]
    assert got[1] == alone[1][: len(got[1])] and len(got[1]) < len(alone[1])


def test_only_joinable_kinds(trained, tokenizer):
    spec = decode_spec(trained, tokenizer, DecodeOptions(), 4)
    with pytest.raises(ValueError, match="joined decoding runs"):
        Joined.start(trained, [[1, 2, 3]], spec, "block")


def test_a_verified_decode_keeps_what_its_pace_learned_as_samples_join_and_leave(trained, tokenizer):
    """A runtime that times its own forwards (live_cost) learns the price of width as a decode runs (its Pace):
    re-priced for the samples left or joined, the decode keeps it, not the curve's price it began with."""
    from dataclasses import replace

    from mars_core.runtime import Runtime
    from mars_core.runtime.curve import CostCurve

    curve = CostCurve.from_function(lambda b, w: 0.01 * (1 + 0.02 * b * w), batch_sizes=(1, 16))
    options = DecodeOptions(strategy="verified", max_new_tokens=40, runtime=Runtime(live_cost=True, cost=curve))
    spec = decode_spec(trained, tokenizer, options, 4)
    ids = [encode_prompt(tokenizer, p) for p in PROMPTS]
    running = Joined.start(trained, ids[:3], spec, "verified", 0.3)
    running.step([0.3] * 3)
    running.finish()
    running.state.pace = replace(running.state.pace, k=1.7)  # as if its forwards had priced width dearer
    fewer = running.take([0, 2])
    assert fewer.state.pace.k == 1.7 and fewer.state.priced_for == 2
    newcomer = Joined.start(trained, ids[3:4], spec, "verified", 0.3)
    newcomer.step([0.3])
    newcomer.finish()
    more = fewer.merge(newcomer)
    assert more.state.pace.k == 1.7 and more.state.priced_for == 3
