"""No-cache reference decoders: recompute the whole sequence every step, one prompt, plain loops.

They spell out the method as simply as possible, so the cached decoders can be checked against them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from mars_core.decoding.verified import LOOKUP_PRIOR


def _at(threshold: float | Callable[[int], float], forward: int) -> float:
    """A fixed threshold, or a schedule: the threshold of forward number `forward`."""
    return threshold(forward) if callable(threshold) else threshold


def _predict(model, seq: list[int], from_slots: list[int], threshold):
    """Greedy token and its probability at each given slot of a plain causal forward over seq."""
    logits = model(torch.tensor([seq])).logits[0].float()
    probs = logits.softmax(-1)
    toks = [int(logits[s].argmax()) for s in from_slots]
    return toks, [float(probs[s, t]) for s, t in zip(from_slots, toks)]


def _predict_two(model, seq: list[int], from_slots: list[int]):
    """Like _predict, plus the second choice and its probability at each slot."""
    probs = model(torch.tensor([seq])).logits[0].float().softmax(-1)
    top = [probs[s].topk(2) for s in from_slots]
    return ([int(t.indices[0]) for t in top], [float(t.values[0]) for t in top],
            [int(t.indices[1]) for t in top], [float(t.values[1]) for t in top])


@torch.no_grad()
def reference_sliding(model, prompt: list[int], block_size: int, threshold, max_new: int, mask_id: int,
                      stop_ids: set[int]) -> tuple[list[int], int]:
    """Committed tokens + B-1 masks each step; returns (generated tokens, forwards)."""
    out, forwards = [], 0
    while len(out) < max_new:
        seq = prompt + out
        slots = [len(seq) - 1] + [len(seq) + j for j in range(block_size - 1)]
        toks, conf = _predict(model, seq + [mask_id] * (block_size - 1), slots, threshold)
        tau = _at(threshold, forwards)
        forwards += 1
        take = 1
        while tau < 1 and take < block_size and conf[take] >= tau:
            take += 1
        for t in toks[:take]:
            if len(out) < max_new:
                out.append(t)
                if t in stop_ids:
                    return out, forwards
    return out, forwards


@torch.no_grad()
def reference_block(model, prompt: list[int], block_size: int, threshold, max_new: int, mask_id: int,
                    stop_ids: set[int]) -> tuple[list[int], int]:
    """Blocks of B slots over prompt + finished blocks; returns (generated tokens, forwards)."""
    out, forwards = [], 0
    while True:
        block: list[int] = []
        while len(block) < block_size:
            seq = prompt + out + block + [mask_id] * (block_size - len(block))
            start = len(prompt) + len(out)  # slot s of the block is predicted from position start + s - 1
            slots = [start + s - 1 for s in range(len(block), block_size)]
            toks, conf = _predict(model, seq, slots, threshold)
            tau = _at(threshold, forwards)
            forwards += 1
            take = 1
            while tau < 1 and take < len(toks) and conf[take] >= tau:
                take += 1
            for t in toks[:take]:
                block.append(t)
                if t in stop_ids or len(out) + len(block) >= max_new:
                    return out + block, forwards
        out += block


def _odds(conf: list[float], j: int) -> float:
    """P(exactly j of the drafts match), the confidences read as independent odds."""
    odds = 1.0
    for c in conf[:j]:
        odds *= c
    return odds * (1 - conf[j]) if j < len(conf) else odds


def _lookup(text: list[int], start: int, ngrams: tuple[int, ...], width: int) -> list[int]:
    """Prompt lookup: what followed the latest earlier occurrence of the text's last n tokens (longest n first)."""
    for n in sorted(ngrams, reverse=True):
        if len(text) - start <= n:
            continue
        tail = text[-n:]
        for p in range(len(text) - n - 1, start - 1, -1):
            if text[p : p + n] == tail:
                return text[p + n : p + n + width]
    return []


@torch.no_grad()
def reference_verified(model, prompt: list[int], block_size: int, threshold: float, max_new: int, mask_id: int,
                       stop_ids: set[int], group_floor: float, lookup: int = 0, ngrams: tuple[int, ...] = (3, 2),
                       lookup_odds: float = 0.6, sibling_floor: float | None = None) -> tuple[list[int], int]:
    """Verify the drafts with one plain causal forward over prompt + out + drafts; where d_{m+1} missed and its
    sibling (the mask slot's second choice, fed when c_1..c_m q2 >= sibling_floor) is AR's token, take it and the
    token after it; propose the next drafts from masks after the committed prefix (the group the decoder would
    use, if it would feed it: a matched sibling's always), or from prompt lookup when its chain promises more.
    Returns (tokens, forwards): one forward per step, as the decoder takes."""
    g = block_size - 1
    out, forwards = [], 0
    drafts, conf, second, second_p, looked = [], [], [], [], False
    hits = tries = 0  # lookup drafts matched, and reached (matched or a chain's first miss)
    while len(out) < max_new:
        seq = prompt + out
        k = 0
        while threshold < 1 and k < len(drafts) and conf[k] >= threshold:
            k += 1
        ar, _ = _predict(model, seq + drafts[:k], [len(seq) - 1 + a for a in range(k + 1)], threshold)
        m = 0
        while m < k and ar[m] == drafts[m]:
            m += 1
        if looked and k:
            hits, tries = hits + m, tries + min(m + 1, k)
        sibling = (m < k and not looked and sibling_floor is not None and second_p[m] > 0
                   and math.prod(conf[:m]) * second_p[m] >= sibling_floor and second[m] == ar[m])
        if sibling:  # the token after e_{m+1}, read at its own place
            prefix = drafts[:m] + [second[m]]
            ar = prefix + _predict(model, seq + prefix, [len(seq) + m], threshold)[0]
            m += 1
        fed = sibling or ((threshold < 1 and g > 0 and _odds(conf[:k], m) >= group_floor) if forwards
                          else threshold < 1 and g > 0)
        forwards += 1
        if fed:
            base = len(seq) + m
            drafts, conf, second, second_p = _predict_two(model, seq + ar[:m] + [mask_id] * g,
                                                          [base + t for t in range(g)])
        else:
            drafts, conf, second, second_p = [], [], [], []
        looked = False
        for t in ar[: m + 1]:
            if len(out) < max_new:
                out.append(t)
                if t in stop_ids:
                    return out, forwards
        if lookup and threshold < 1 and g > 0:
            found = _lookup(prompt + out, 0, ngrams, lookup)
            odds = (LOOKUP_PRIOR * lookup_odds + hits) / (LOOKUP_PRIOR + tries)  # this answer's own lookup record
            found_conf = []  # the mask draft's confidence where both agree, at most 1 - it where they differ
            for i, t in enumerate(found):
                c = conf[i] if i < len(conf) else 0.0
                mask_says = drafts[i] if i < len(drafts) else None
                found_conf.append(max(c, odds) if t == mask_says else min(odds, 1 - c))
            run = lambda cs: sum(math.prod(cs[: i + 1]) for i in range(len(cs)))  # noqa: E731
            leading = lambda cs: next((i for i, c in enumerate(cs) if c < threshold), len(cs))  # noqa: E731
            if run(found_conf[: leading(found_conf)]) > run(conf[: leading(conf)]):
                drafts, conf, looked = found, found_conf, True
    return out, forwards
