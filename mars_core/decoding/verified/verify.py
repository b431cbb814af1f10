"""Verification and commit: which drafts the model's own predictions confirm, what is committed, what the cache keeps.

Greedy: the prediction read at the last pending token is the exact AR token for position n; it is compared with d_1,
the prediction read at d_1 with d_2, and so on. With m drafts matching, commit d_1..d_m plus the bonus token (the AR
prediction after them): m+1 tokens, exactly what greedy AR produces. Where d_{m+1} misses and its sibling e_{m+1}
is AR's token there, e_{m+1} counts as matched and the bonus is read at e_{m+1}'s slot. Sampling keeps the AR
distribution with the speculative-sampling rule (accept x with probability min(1, p(x)/q(x)), else draw from the
normalised residual max(0, p - q)). The cache keeps the pending tokens and the matched drafts (the first fed columns:
their keys/values saw real tokens only, and their slots are their positions); the rest is scratch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...runtime.forward import keep
from ..commit import Committed, commit
from ..control import DecodeControl
from ..sampling import confidence_of, distribution, draw, greedy
from ..spec import DecodeSpec
from .plan import update_yield
from .tree import Tree, leading


@dataclass
class DecodeState:
    """What verified decoding carries between forwards, per sample: the answer, the text lookup searches, what the
    cache holds, and the running records the plan reads."""

    prompts: list[list[int]]  # the prompts (host lists): lookup searches them, then the answer
    answer: Committed  # the answer so far (out: [b, max_new_tokens + D + 1])
    length: torch.Tensor  # [b] n, tokens committed in the sequence (prompt and answer, pending ones included)
    draft_yield: torch.Tensor  # [] drafts matched per sample and forward (running mean; plan.update_yield)
    lookup_hits: torch.Tensor  # [b] prompt-lookup drafts matched so far
    lookup_tries: torch.Tensor  # [b] prompt-lookup drafts reached so far (matched, or the first miss of a chain)


@dataclass
class Verdict:
    """What verification found, per sample."""

    m: torch.Tensor  # [b] tokens matched: drafts on the chain, plus 1 where the sibling e_m matched
    tokens: torch.Tensor  # [b, K+1] tokens[:, :m] the matched ones, tokens[:, m] the bonus
    conf: torch.Tensor  # [b, K+1] their confidences
    by_sibling: torch.Tensor  # [b] the m-th matched token was the sibling e_m, not d_m


def speculative(p: torch.Tensor, drafts: torch.Tensor, q: torch.Tensor | None, fed: torch.Tensor,
                generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Speculative sampling over K drafts: (accepted count m [b], tokens [b, K+1] = accepted drafts, then the
    token drawn at slot m). p [b, K+1, V] is the model's distribution at each verify slot; q [b, K, V] the
    drafts' own (None: greedy drafts, a point mass each)."""
    b, k1, vocab = p.shape
    if q is None:
        q = torch.zeros(b, k1 - 1, vocab, device=p.device).scatter_(-1, drafts[..., None], 1.0)
    q = torch.cat([q * fed[..., None], torch.zeros_like(p[:, :1])], 1)  # nothing to subtract after the last draft
    p_d = p[:, :-1].gather(-1, drafts[..., None]).squeeze(-1)
    q_d = q[:, :-1].gather(-1, drafts[..., None]).squeeze(-1)
    u = torch.rand(p_d.shape, generator=generator, device=p.device)
    m = leading((u * q_d <= p_d) & fed)  # accept x with probability min(1, p(x)/q(x))
    at = m[:, None, None].expand(-1, 1, vocab)
    rest = (p.gather(1, at) - q.gather(1, at)).clamp_min(0).squeeze(1)  # residual max(0, p - q) at slot m
    rest = torch.where(rest.sum(-1, keepdim=True) > 0, rest, p.gather(1, at).squeeze(1))
    y = draw(rest / rest.sum(-1, keepdim=True), generator)
    slots = torch.arange(k1, device=p.device)
    padded = torch.cat([drafts, y[:, None]], 1)
    return m, torch.where(slots < m[:, None], padded, y[:, None])


def verify(logits: torch.Tensor, tree: Tree, ctl: DecodeControl, generator: torch.Generator | None) -> Verdict:
    """The verdict from the verify slots' logits: slot P-1+a predicts position n+a, so greedy m is the leading run
    of d_a == argmax at slot P-2+a; tokens[m] is the bonus. Where d_{m+1} missed and its sibling e_{m+1} is that
    argmax, e_{m+1} counts as matched and the bonus is read at e_{m+1}'s slot (m+2 tokens). Sampling: the
    speculative rule instead of equality (siblings are not read)."""
    K = tree.drafts.shape[1]
    if ctl.temperature == 0:
        chosen, sure = greedy(logits, ctl.confidence)  # every verify row's argmax and its confidence
        tokens, conf = chosen[:, : K + 1], sure[:, : K + 1]
        m = leading((tokens[:, :K] == tree.drafts) & tree.fed) if K else torch.zeros_like(tokens[:, 0])
    else:
        p = distribution(logits, ctl)
        m, tokens = speculative(p[:, : K + 1], tree.drafts, tree.q, tree.fed, generator)
        conf = confidence_of(p[:, : K + 1], tokens, ctl.confidence)
    by_sibling = torch.zeros_like(m, dtype=torch.bool)
    if tree.siblings and ctl.temperature == 0:
        column = torch.full((K + 2,), -1, dtype=torch.long, device=m.device)  # depth a -> e_a's verify row
        column[list(tree.siblings)] = torch.arange(len(tree.siblings), device=m.device) + K + 1
        c, at = column[m + 1], m.clamp_max(K - 1)[:, None]
        by_sibling = ((m < K) & (c >= 0) & tree.sibling_fed.gather(1, at).squeeze(1)
                      & (tree.sibling_ids.gather(1, at) == tokens.gather(1, m[:, None])).squeeze(1))
        row = c.clamp_min(0)[:, None]
        after, after_conf = chosen.gather(1, row), sure.gather(1, row)  # [b, 1] the AR token after e_{m+1}
        slot = (m + 1).clamp_max(K)[:, None]
        tokens = tokens.scatter(1, slot, torch.where(by_sibling[:, None], after, tokens.gather(1, slot)))
        conf = conf.scatter(1, slot, torch.where(by_sibling[:, None], after_conf, conf.gather(1, slot)))
        m = m + by_sibling
    return Verdict(m, tokens, conf, by_sibling)


def commit_verdict(state: DecodeState, verdict: Verdict, spec: DecodeSpec) -> torch.Tensor:
    """Append tokens[:, :m+1] to the answer (cut at max_new_tokens and after a stop token); returns end [b]."""
    zero = torch.zeros_like(verdict.m)
    return commit(state.answer, verdict.tokens, zero, verdict.m + 1, spec)


def track_yield(state: DecodeState, tree: Tree, m: torch.Tensor) -> None:
    """Move the running mean of drafts matched per sample by the forwards that checked drafts, back toward its prior
    in those that checked none (plan.update_yield; no host sync)."""
    state.draft_yield = update_yield(state.draft_yield, m, tree.fed.any(1) if tree.fed.shape[1] else None)


def settle(cache, state: DecodeState, tree: Tree, verdict: Verdict) -> None:
    """The cache keeps the real pending tokens and the drafts matched on the chain (a matched sibling is fed again as
    a pending token: it was not at its position); the sequence grows by m+1."""
    keep(cache, tree.pending_valid.sum(1) + verdict.m - verdict.by_sibling.long())
    state.length = state.length + verdict.m + 1


def checked_path(tree: Tree, verdict: Verdict) -> torch.Tensor:
    """[b, K] the drafts checked along the branch each sample took: d_1..d_K, with e_m in d_m's place where the
    sibling matched (what the stream reports as this forward's drafts)."""
    if not tree.siblings:
        return tree.drafts
    m = verdict.m
    at = (m - 1).clamp(0, tree.drafts.shape[1] - 1)[:, None]
    took = verdict.by_sibling[:, None] & (torch.arange(tree.drafts.shape[1], device=m.device) == at)
    return torch.where(took, tree.sibling_ids.gather(1, at), tree.drafts)
