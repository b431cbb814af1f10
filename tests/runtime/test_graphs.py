"""CUDA graphs over a static runtime's forwards: keyed by what makes the forward, a failed capture said and run
eagerly, every capture, replay and failure counted. The logic runs on the CPU with the capture stood in for; the
graphs themselves on a GPU only (skipped elsewhere)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from mars_core import TreeLayout, generate
from mars_core.runtime import Runtime, forward, graphs, slots

from trained import ANSWERS, mars_trained

PROMPTS = list(ANSWERS)[:3]
KW = dict(strategy="verified", block_size=4, threshold=0.3, max_new_tokens=40, layout=TreeLayout(lookup_drafts=0))
cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")


@pytest.fixture
def fresh(monkeypatch):
    """No free caches (nor their graphs) from other tests, and this test's own counts."""
    monkeypatch.setattr(slots, "_FREE", [])
    monkeypatch.setattr(graphs, "_COUNTS", Counter())
    monkeypatch.setattr(graphs, "_FAILED", {})


@pytest.fixture(scope="module")
def trained(tokenizer):
    return mars_trained("llama", tokenizer)


class Replays:
    """A CUDA graph stood in for on the CPU: `made` records each capture's width; a call runs the forward again."""

    made: list[int] = []

    def __init__(self, forward, inputs, pool=None) -> None:
        Replays.made.append(inputs[0].shape[1])
        self.forward, self.graph = forward, SimpleNamespace(pool=lambda: None)

    def __call__(self, *inputs):
        return self.forward(*inputs)


class Fails:
    """A capture that raises, as one did on the H100 (the forward itself runs fine eagerly)."""

    def __init__(self, forward, inputs, pool=None) -> None:
        raise RuntimeError("operation not permitted when stream is capturing")


def test_graphs_are_kept_by_what_makes_the_forward_not_by_the_runtime_object(trained, tokenizer, fresh, monkeypatch):
    """A Runtime made anew with the same kernels (mars-bench made one per call) replays the graphs already captured:
    one capture per width, none in the second decode; another forward (a call per row) captures its own."""
    monkeypatch.setattr(forward, "capturable", lambda device: True)
    monkeypatch.setattr(graphs, "Captured", Replays)
    Replays.made = []
    eager = generate(trained, tokenizer, PROMPTS, runtime=Runtime(static=True), **KW)
    first = generate(trained, tokenizer, PROMPTS, runtime=Runtime(static=True), **KW)
    widths = list(Replays.made)
    again = generate(trained, tokenizer, PROMPTS, runtime=Runtime(static=True), **KW)
    assert first.token_ids == again.token_ids == eager.token_ids
    assert widths and len(widths) == len(set(widths)) and Replays.made == widths  # the second decode: none
    counts = graphs.graph_counts()
    assert counts["captures"] == len(widths) and counts["failures"] == 0
    assert counts["replays"] == (first.forwards - 1) + (again.forwards - 1) + (eager.forwards - 1)  # not the prefill
    keys = [key for *_, cache in slots._FREE for key in cache.graphs]
    assert keys and all(key[3][0] == "verified" for key in keys)  # each step one graph: head and verdict included
    generate(trained, tokenizer, PROMPTS, runtime=replace(Runtime(static=True), units_alone=True), **KW)
    assert len(Replays.made) > len(widths)  # another forward: graphs of its own


def test_a_failed_capture_warns_once_per_width_and_that_width_runs_eagerly(trained, tokenizer, fresh, monkeypatch):
    """A capture that raises costs the answer nothing: a warning per width (not per forward), the width kept, and
    every later forward at that width eager; the counts say so."""
    want = generate(trained, tokenizer, PROMPTS, runtime=Runtime(static=True), **KW).token_ids
    monkeypatch.setattr(forward, "capturable", lambda device: True)
    monkeypatch.setattr(graphs, "Captured", Fails)
    with pytest.warns(RuntimeWarning, match="capture failed at width") as said:
        out = generate(trained, tokenizer, PROMPTS, runtime=Runtime(static=True), **KW)
        again = generate(trained, tokenizer, PROMPTS, runtime=Runtime(static=True), **KW)
    assert out.token_ids == again.token_ids == want
    counts = graphs.graph_counts()
    widths = {int(w) for w in counts["failed_widths"]}
    assert len([w for w in said if "capture failed" in str(w.message)]) == len(widths) > 0
    assert counts["failures"] == len(widths) and counts["captures"] == counts["replays"] == 0  # one try per width
    assert all("operation not permitted" in why for why in counts["failed_widths"].values())


@cuda_only
@pytest.mark.parametrize("lookup", [0, 7], ids=["masks", "lookup"])  # widths 4-16; with prompt lookup up to 32
def test_replayed_graphs_decode_what_eager_forwards_decode(trained, tokenizer, fresh, monkeypatch, lookup):
    model = trained.to("cuda")
    kw = {**KW, "layout": TreeLayout(lookup_drafts=lookup)}
    prompts = PROMPTS + list(ANSWERS)[4:]  # the fox answer repeats itself: lookup's widest trees
    captured = []
    real = graphs.Captured.__init__
    monkeypatch.setattr(graphs.Captured, "__init__", lambda self, *a: (captured.append(1), real(self, *a))[-1])
    replayed = generate(model, tokenizer, prompts, runtime=Runtime(static=True), **kw)
    again = generate(model, tokenizer, prompts, runtime=Runtime(static=True), **kw)  # the same cache and graphs, reset
    monkeypatch.setattr(forward, "capturable", lambda device: False)
    eager = generate(model, tokenizer, prompts, runtime=Runtime(static=True), **kw)
    assert captured and replayed.token_ids == again.token_ids == eager.token_ids
    assert replayed.tokens_per_forward > 1.3 and graphs.graph_counts()["failures"] == 0
    assert len(captured) <= 2 * (4 if lookup == 0 else 8)  # a graph per width (4, 8, .. 32) and step; none again
