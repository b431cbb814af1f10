"""The strategy table: what generate() reads of each decoder, and that a new decoder is one entry and one module."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from mars_core import generate, stream
from mars_core.decoding import strategies
from mars_core.decoding.commit import Committed, commit, decode_loop
from mars_core.decoding.spec import Step
from mars_core.decoding.strategies import STRATEGIES, Strategy


def test_the_table_says_what_each_decoder_needs():
    assert strategies.NAMES == ("ar", "sliding", "block", "verified")
    assert STRATEGIES["ar"].block_size(8) == 1 and STRATEGIES["sliding"].block_size(8) == 8
    # verified: its drafts (the mask chain's 3 or prompt lookup's 7), then the 3 masks hung after them
    assert STRATEGIES["verified"].headroom(4) == 10 and STRATEGIES["block"].headroom(4) == 3
    from mars_core.decoding.verified import VerifiedConfig

    assert STRATEGIES["verified"].headroom(4, VerifiedConfig(lookup_drafts=12)) == 15  # the layout's drafts
    assert [n for n, s in STRATEGIES.items() if s.lossless] == ["ar", "verified"]
    assert STRATEGIES["verified"].reads == ("layout", "record") and not STRATEGIES["block"].reads
    with pytest.raises(ValueError, match="strategy must be one of"):
        strategies.strategy("beam")


def repeat_last(model, prompts, spec, control):
    """A toy decoder: no forward at all, it commits the prompt's last token again, one per step."""
    b, dev = len(prompts), torch.device("cpu")
    answer = Committed.empty(b, spec, 1, dev)
    last = torch.tensor([[p[-1]] for p in prompts])

    def forward(ctl) -> Step:
        start = torch.zeros(b, dtype=torch.long)
        end = commit(answer, last, start, start + 1, spec)
        return Step(last, torch.ones(b, 1), start, end, answer.done.tolist(), ctl.threshold, answer.out,
                    answer.generated)

    yield from decode_loop(control, answer, forward, lambda stop: None)


def test_a_new_decoder_is_one_entry(model, tokenizer, monkeypatch):
    """Registered in the table, a decoder runs through generate() and stream() with the shared commit(): the cap
    at max_new_tokens, one event per step, its default threshold."""
    entry = Strategy(repeat_last, threshold=0.5, lossless=False, one_token=True)
    monkeypatch.setitem(STRATEGIES, "repeat", entry)
    monkeypatch.setattr(strategies, "NAMES", (*strategies.NAMES, "repeat"))
    out = generate(model, tokenizer, ["hello", "a longer prompt"], strategy="repeat", max_new_tokens=5)
    assert out.forwards == 5 and all(len(set(ids)) == 1 and len(ids) == 5 for ids in out.token_ids)
    events = list(stream(model, tokenizer, "hello", strategy="repeat", max_new_tokens=3))
    assert len(events) == 3 and events[-1].done == [True] and {e.threshold for e in events} == {0.5}
    monkeypatch.setitem(STRATEGIES, "repeat", replace(entry, headroom_blocks=10**6, one_token=False))
    with pytest.raises(ValueError, match="too long"):
        generate(model, tokenizer, "hello", strategy="repeat", max_new_tokens=5)
