"""A quick look at what a model has learned, on a few held-out chat items: tokens per forward at a threshold τ and in
verified mode and, when asked, whether verified gives one-token decoding's answers and how often those are the
reference answers. What a live training run probes now and then (mars_core.training.live)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..generate import generate
from ..runtime import CostCurve, Runtime, prepare
from ..training.live import merged


def pooled_tokens_per_forward(results: Sequence[Any]) -> float:
    """Tokens committed over the forwards that committed them, pooled over answers (a long answer weighs more)."""
    tokens = sum(r.generated_tokens for r in results)
    return tokens / max(sum(sum(r.sample_forwards) for r in results), 1)


def decode_probe(model: torch.nn.Module, tokenizer: Any, items: Sequence[dict], block_size: int, *,
                 threshold: float = 0.9, max_new_tokens: int = 32, runtime: Runtime | None = None,
                 one_token: bool = False) -> dict[str, Any]:
    """Decode each item's prompt (its messages up to the last, the reference answer) greedily at τ = `threshold`
    and in verified mode: tau_tokens_per_forward and verified_tokens_per_forward. With `one_token`, one-token
    decoding too: verified_identical (answers equal to it, token for token), items, and ar_correct (one-token
    answers equal to the reference, ignoring surrounding spaces)."""
    settings = dict(block_size=block_size, max_new_tokens=max_new_tokens, runtime=runtime)
    prompts = [list(item["messages"][:-1]) for item in items]
    tau = [generate(model, tokenizer, [p], strategy="sliding", threshold=threshold, **settings) for p in prompts]
    verified = [generate(model, tokenizer, [p], strategy="verified", **settings) for p in prompts]
    out: dict[str, Any] = {"tau_tokens_per_forward": round(pooled_tokens_per_forward(tau), 3),
                           "verified_tokens_per_forward": round(pooled_tokens_per_forward(verified), 3)}
    if one_token:
        ar = [generate(model, tokenizer, [p], strategy="ar", **settings) for p in prompts]
        references = [item["messages"][-1]["content"].strip() for item in items]
        out.update(items=len(items),
                   verified_identical=sum(v.token_ids == a.token_ids for v, a in zip(verified, ar)),
                   ar_correct=sum(a.text.strip() == ref for a, ref in zip(ar, references)),
                   answers=[a.text for a in ar])
    return out


def live_probe(tokenizer: Any, items: Sequence[dict], block_size: int, dtype: torch.dtype,
               cost: CostCurve | None = None, max_new_tokens: int = 32) -> Callable[[torch.nn.Module], dict]:
    """A probe for mars_core.training.live.train_live: the model in training merged into a plain copy in `dtype`
    (what will be served) and decoded on `items` (decode_probe), verified's trees sized by `cost` (the served
    model's curve: the same trees the race feeds; None: the fixed rules)."""
    runtime = Runtime(cost=cost)

    def probe(model: torch.nn.Module) -> dict:
        return decode_probe(merged(model, dtype), tokenizer, items, block_size, max_new_tokens=max_new_tokens,
                            runtime=runtime)

    return probe


def final_check(wrapped: torch.nn.Module, tokenizer: Any, items: Sequence[dict], block_size: int, dtype: torch.dtype,
                *, max_new_tokens: int = 64, static: bool | None = None
                ) -> tuple[torch.nn.Module, Runtime, dict[str, Any]]:
    """The end of a live run: the LoRA merged into a plain model in `dtype`, its runtime prepared (the width check:
    runtime.invariant says whether verified is one-token decoding bit for bit here), and decode_probe's figures on
    `items` with one-token decoding too (verified_identical, ar_correct, items). Returns (model, runtime, figures)."""
    model = merged(wrapped, dtype)
    runtime = prepare(model, static=static)
    figures = decode_probe(model, tokenizer, items, block_size, max_new_tokens=max_new_tokens, runtime=runtime,
                           one_token=True)
    return model, runtime, figures
