"""Width invariance on llama.cpp, checked: tokens fed k at a time against one at a time, logits compared bit for bit.

Verified decoding equals one-token decoding token for token when a row's logits do not depend on how many rows its
forward has (MARS_METHOD.md, "Identical, not just equal"). On llama.cpp one row takes ggml's dot products and two or
more take tinyBLAS, so a plain engine differs at width 1 (BF16 and F32 on the AVX2 EPYC); an invariant engine
(engine.py) feeds two rows or more every time and is identical at every width. The result is the torch runtime's
WidthCheck, so Runtime.guarantee() words it the same way.
"""

from __future__ import annotations

import torch

from ...runtime.engine import Engine
from ...runtime.runtime import WidthCheck

WIDTHS = (2, 4, 8, 16)


def feed_by(engine: Engine, prompt: list[int], tokens: list[int], width: int) -> torch.Tensor:
    """Logits [len(tokens), V] of `tokens` fed `width` at a time (causal runs) after the prompt."""
    cache, n = engine.new_cache(), len(prompt)
    engine.hidden_states(torch.tensor([prompt]), torch.arange(n)[None], causal(n), cache)
    cache.keep(n)
    rows = []
    for s in range(0, len(tokens), width):
        ids = torch.tensor([tokens[s : s + width]])
        k = ids.shape[1]
        rows.append(engine.hidden_states(ids, torch.arange(n + s, n + s + k)[None], causal(k), cache)[0])
        cache.keep(k)
    return torch.cat(rows)


def causal(width: int) -> torch.Tensor:
    """seen [1, W, W] of a causal run of `width` fed slots."""
    return torch.ones(1, width, width, dtype=torch.bool).tril()


def width_check(engine: Engine, prompt: list[int], tokens: list[int], widths: tuple[int, ...] = WIDTHS
                ) -> WidthCheck:
    """Rows of `tokens` fed at each width whose logits differ in any bit from feeding them one at a time."""
    base = feed_by(engine, prompt, tokens, 1)
    differing, max_abs = 0, 0.0
    for width in widths:
        rows = feed_by(engine, prompt, tokens, width)
        differing += int((rows != base).any(-1).sum())
        max_abs = max(max_abs, float((rows - base).abs().max()))
    return WidthCheck(tuple(widths), 1, len(tokens) * len(widths), differing, max_abs)
