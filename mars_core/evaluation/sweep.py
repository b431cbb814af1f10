"""Threshold sweep: tokens per forward against quality over a prompt set, one row per threshold.

Quality is agreement with the threshold-1.0 answer of the same model, strategy and block size: at
τ = 1 MARS commits one token per forward and is exactly greedy autoregressive decoding, the method's
exactness reference. Agreement is the shared-prefix fraction of tokens: the length of the common
prefix of the two answers' token ids over the length of the longer one (1.0 = identical answer).
Decoding is greedy, so the sweep is deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..generate import GenerationResult, generate
from ..runtime import Runtime
from .metrics import agreement
from .prompts import DEFAULT_PROMPTS

__all__ = ["SWEEP_THRESHOLDS", "threshold_sweep", "SWEEP_COLUMNS"]

SWEEP_THRESHOLDS = (1.0, 0.95, 0.9, 0.8, 0.7, 0.6, 0.5)  # a sweep's thresholds unless given
SWEEP_COLUMNS = (
    "threshold", "tokens_per_forward", "quality", "exact_match", "forwards", "tokens", "seconds",
    "tokens_per_second", "prompts",
)
Progress = Callable[[float, str], Any]


def _prompt_texts(prompts: Sequence[str | dict] | None) -> list[str]:
    """Prompt strings from strings or {"prompt": ...} dicts (the default set when None)."""
    items = DEFAULT_PROMPTS if prompts is None else prompts
    if isinstance(items, (str, dict)):
        items = [items]
    texts = [p["prompt"] if isinstance(p, dict) else p for p in items]
    if not texts:
        raise ValueError("the prompt set is empty: give at least one prompt")
    if not all(isinstance(t, str) and t.strip() for t in texts):
        raise ValueError("every prompt must be a non-empty string (or a dict with a non-empty 'prompt')")
    return texts


def _check_thresholds(thresholds: Sequence[float]) -> list[float]:
    """The thresholds as floats, each in (0, 1], duplicates dropped, highest first."""
    values = [thresholds] if isinstance(thresholds, (int, float)) else list(thresholds)
    if not values:
        raise ValueError("give at least one threshold")
    for t in values:
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 < t <= 1.0:
            raise ValueError(f"every threshold must be in (0, 1] (1 = one token per forward), got {t!r}")
    return sorted({float(t) for t in values}, reverse=True)


def _row(threshold: float, results: list[GenerationResult], references: list[GenerationResult]) -> dict:
    """Aggregate one threshold's results into a table row."""
    forwards = sum(sum(r.sample_forwards) for r in results)
    tokens = sum(r.generated_tokens for r in results)
    seconds = sum(r.seconds for r in results)
    scores = [agreement(ref.token_ids[0], r.token_ids[0]) for ref, r in zip(references, results)]
    return {
        "threshold": threshold,
        "tokens_per_forward": tokens / max(forwards, 1),
        "quality": sum(scores) / len(scores),
        "exact_match": sum(s == 1.0 for s in scores) / len(scores),
        "forwards": forwards,
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_second": tokens / seconds if seconds > 0 else 0.0,
        "prompts": len(results),
    }


def threshold_sweep(
    model: torch.nn.Module,
    tokenizer: Any,
    prompts: Sequence[str | dict] | None = None,
    thresholds: Sequence[float] = SWEEP_THRESHOLDS,
    *,
    block_size: int = 4,
    max_new_tokens: int = 64,
    strategy: str = "sliding",
    progress: Progress | None = None,
    runtime: Runtime | None = None,
) -> list[dict]:
    """Decode every prompt at every threshold (greedy, one prompt at a time); one row per threshold, highest first.

    Each row holds threshold, tokens_per_forward (committed tokens over forwards, summed over prompts),
    quality (mean agreement with the τ = 1 answer), exact_match (share of answers identical to it),
    forwards, tokens, seconds, tokens_per_second and prompts. `progress(fraction, description)` is
    called before the first and after every generation (a gr.Progress fits). runtime: the kernels (default:
    generate()'s, prepared(model)).
    """
    texts = _prompt_texts(prompts)
    values = _check_thresholds(thresholds)
    runs = [t for t in values if t < 1.0]
    total, done = len(texts) * (len(runs) + 1), 0

    def run(threshold: float, label: str) -> list[GenerationResult]:
        nonlocal done
        results = []
        for i, text in enumerate(texts):
            if progress is not None:
                progress(done / total, f"{label}: prompt {i + 1}/{len(texts)}")
            results.append(
                generate(
                    model, tokenizer, text, strategy=strategy, block_size=block_size,
                    max_new_tokens=max_new_tokens, threshold=threshold, temperature=0.0, runtime=runtime,
                )
            )
            done += 1
        return results

    references = run(1.0, "reference τ = 1.0")
    rows = [_row(1.0, references, references)] if 1.0 in values else []
    for t in runs:
        rows.append(_row(t, run(t, f"τ = {t:g}"), references))
    if progress is not None:
        progress(1.0, "done")
    return rows
