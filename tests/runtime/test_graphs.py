"""CUDA graphs over a static runtime's forwards (a GPU only: skipped elsewhere)."""

from __future__ import annotations

import pytest
import torch

from mars_core import TreeLayout, generate
from mars_core.runtime import Runtime, forward, graphs, slots

from trained import ANSWERS, mars_trained

PROMPTS = list(ANSWERS)[:3]
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")


def test_replayed_graphs_decode_what_eager_forwards_decode(tokenizer, monkeypatch):
    model = mars_trained("llama", tokenizer).to("cuda")
    monkeypatch.setattr(slots, "_FREE", [])
    kw = dict(strategy="verified", block_size=4, threshold=0.3, max_new_tokens=40, runtime=Runtime(static=True),
              layout=TreeLayout(lookup_drafts=0))
    captured = []
    real = graphs.Captured.__init__
    monkeypatch.setattr(graphs.Captured, "__init__", lambda self, *a: (captured.append(1), real(self, *a))[-1])
    replayed = generate(model, tokenizer, PROMPTS, **kw)
    again = generate(model, tokenizer, PROMPTS, **kw)  # the same cache and graphs, reset
    monkeypatch.setattr(forward, "capturable", lambda device: False)
    eager = generate(model, tokenizer, PROMPTS, **kw)
    assert captured and replayed.token_ids == again.token_ids == eager.token_ids
    assert replayed.tokens_per_forward > 1.3
    assert len(captured) <= 4  # one graph per bucket (widths 4, 8, 12, 16), the second decode none
