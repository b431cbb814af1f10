"""What every decoder feeds a forward through: the prompts (each sample's tokens from slot 0, as alone), the cache a
decode borrows, which fed columns see which (a tree's template), and the rows whose logits it reads."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache

import torch

from ..runtime.forward import head, new_cache
from ..runtime.slots import decode_slots
from ..runtime.watch import refresh
from .spec import DecodeSpec


def right_pad(prompts: list[list[int]], pad_id: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompts left-aligned in [b, S] (a row's tokens take slots 0..len-1, as one-by-one) and their lengths."""
    S = max(len(p) for p in prompts)
    ids = torch.tensor([p + [pad_id] * (S - len(p)) for p in prompts], dtype=torch.long)
    return ids.to(dev), torch.tensor([len(p) for p in prompts], device=dev)


@contextmanager
def decode_cache(model: torch.nn.Module, prompts: list[list[int]], spec: DecodeSpec, widest: int) -> Iterator:
    """The cache one decode writes: the longest prompt, the answer and `widest` tokens a forward may feed past them
    (a static runtime: one length for every decoder, slots.decode_slots).
    The runtime's copies are checked against the model first (runtime/watch.py: a weight changed in place is served)."""
    refresh(model, spec.runtime)
    length = decode_slots(max(map(len, prompts)) + spec.max_new_tokens, widest, spec.runtime.static)
    with new_cache(model, len(prompts), length) as cache:
        yield cache


@lru_cache(maxsize=256)
def tree_template(pending: int, drafts: int, groups: tuple[int, ...], g: int, siblings: tuple[int, ...] = (),
                  device: torch.device | None = None) -> torch.Tensor:
    """Boolean [W, W] visibility among the fed columns: pending causal, drafts a chain after them, group G_j after
    the pending tokens and d_1..d_j, causal inside itself; sibling e_a beside d_a (after the pending tokens and
    d_1..d_{a-1}), its group H_a after e_a. Threshold decoding's [pending | masks] is (P, 0, (0,), B-1)."""
    width = pending + drafts + len(groups) * g + len(siblings) * (1 + g)
    seen = torch.zeros(width, width, dtype=torch.bool)
    seen[:pending, :pending] = torch.ones(pending, pending, dtype=torch.bool).tril()
    d = slice(pending, pending + drafts)
    seen[d, :pending] = True
    seen[d, d] = torch.ones(drafts, drafts, dtype=torch.bool).tril()
    for c, j in enumerate(groups):
        s = slice(pending + drafts + c * g, pending + drafts + (c + 1) * g)
        seen[s, : pending + j] = True
        seen[s, s] = torch.ones(g, g, dtype=torch.bool).tril()
    for c, a in enumerate(siblings):
        e = pending + drafts + len(groups) * g + c * (1 + g)
        s = slice(e, e + 1 + g)  # e_a, then H_a's masks: a causal run after c + d_1..d_{a-1}
        seen[s, : pending + a - 1] = True
        seen[s, s] = torch.ones(1 + g, 1 + g, dtype=torch.bool).tril()
    return seen.to(device)


def logits_at(model: torch.nn.Module, hidden: torch.Tensor, rows: torch.Tensor, spec: DecodeSpec) -> torch.Tensor:
    """Logits [b, n, V] of the hidden rows at rows [b, n] (the head reads only these)."""
    picked = hidden.gather(1, rows[..., None].expand(-1, -1, hidden.shape[-1]))
    return head(model, picked, spec.runtime)
