"""The chain: the drafts the next forward checks, from the mask slots of the group each sample goes on with or from
prompt lookup, and the tree they are fed in (with the groups and siblings the plan chose).

The next drafts are G_m's predictions (mask t predicts position n+m+1+t: the right shift of training), kept left to
right while their confidence >= threshold: the threshold only prunes drafts, it never changes the answer. Prompt
lookup (lookup.py) proposes the tokens that followed the latest earlier occurrence of the text's last n-gram; per
sample the forward checks the chain with the longer expected run of matches, sum_i c_1 ... c_i.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache

import torch

from ..control import DecodeControl
from ..lookup import expected_run, lookup_confidence, lookup_rows
from ..sampling import confidence_of, distribution, draw, first_argmax
from .config import VerifiedConfig
from .plan import FLOORS, group_odds, plan_by_cost, sibling_odds
from .tree import Tree, leading, pad_to, sibling_columns
from .verify import DecodeState, Verdict


@dataclass
class Chain:
    """The drafts proposed for the next forward, padded to D: only the first `count` per sample are checked."""

    tokens: torch.Tensor  # [b, D]
    conf: torch.Tensor  # [b, D] c_1 .. c_D (0 where nothing was proposed)
    q: torch.Tensor | None  # [b, D, V] their distributions when sampling (None: greedy)
    count: torch.Tensor  # [b] leading drafts kept: confidence >= threshold (set by next_chain)
    from_lookup: torch.Tensor  # [b] prompt lookup's chain won over the mask slots'
    second: torch.Tensor | None = None  # [b, D] each mask slot's second choice (greedy mask chains only)
    second_p: torch.Tensor | None = None  # [b, D] its probability (0 where there is none)


@dataclass
class Choice:
    """What the next forward feeds beside the pending tokens: the chain's first count[i] drafts, the groups hung
    after them and the siblings beside them."""

    chain: Chain
    group_fed: torch.Tensor  # [b, D+1] G_j is fed for sample i
    sibling_fed: torch.Tensor  # [b, D] e_a (with H_a) is fed for sample i


@lru_cache(maxsize=256)
def places(items: tuple[int, ...], size: int, device: torch.device) -> torch.Tensor:
    """[size]: each item's place among items, -1 elsewhere. A constant of the tree's layout, made once: a CUDA graph
    reads it (a tensor made from a list inside a capture would be a copy from the host)."""
    index = torch.full((size,), -1, dtype=torch.long)
    index[list(items)] = torch.arange(len(items))
    return index.to(device)


def mask_chain(head: Callable[[torch.Tensor], torch.Tensor], hidden: torch.Tensor, all_logits: torch.Tensor | None,
               tree: Tree, verdict: Verdict, *, done: torch.Tensor, ctl: DecodeControl, pad_id: int, g: int,
               depth: int, generator: torch.Generator | None = None) -> Chain:
    """The next drafts from the group each sample goes on with, G_m (or H_m where e_m matched): mask t predicts
    position n+m+1+t. The argmax, or a draw when sampling, with the argmax's confidence; confidence 0 where that
    group was not fed. Greedy chains also carry each slot's second choice and its probability (the siblings the
    next forward may feed). The group's logits are read from all_logits where read_logits computed them, else
    from its hidden rows."""
    b, dev, m = hidden.shape[0], hidden.device, verdict.m
    none = torch.zeros_like(m), torch.zeros_like(done)
    if not tree.groups and not tree.siblings:
        tokens = torch.full((b, depth), pad_id, dtype=torch.long, device=dev)
        return Chain(tokens, torch.zeros((b, depth), device=dev), None, *none)
    P, K = tree.pending.shape[1], tree.drafts.shape[1]
    index = places(tree.groups, depth + 1, dev)  # G_j -> its place among the fed groups
    start = P + K + index[m].clamp_min(0) * g  # the first mask of G_m among the fed slots
    has = (index[m] >= 0) & tree.group_fed.gather(1, m[:, None]).squeeze(1)
    if tree.siblings:  # H_m's masks follow e_m
        place = torch.zeros((depth + 1,), dtype=torch.long, device=dev)
        place[list(tree.siblings)] = sibling_columns(tree, g) + 1
        start, has = torch.where(verdict.by_sibling, place[m], start), has | verdict.by_sibling
    has = has & ~done
    rows = start[:, None] + torch.arange(g, device=dev)
    if all_logits is not None:
        logits = all_logits[torch.arange(b, device=dev)[:, None], rows - (P - 1)]  # indexing beats gather: speed.md
    else:
        logits = head(hidden.gather(1, rows[..., None].expand(-1, -1, hidden.shape[-1])))
    if ctl.temperature > 0:
        q = distribution(logits, ctl)
        conf = torch.where(has[:, None], confidence_of(q, first_argmax(logits.float()), ctl.confidence), 0.0)
        return Chain(pad_to(draw(q, generator), depth, pad_id), pad_to(conf, depth, 0.0), pad_to(q, depth, 0.0),
                     *none)
    logits = logits.float()
    top = first_argmax(logits)  # the first of equal maxima, as verify's greedy() takes
    q = logits.softmax(-1)
    conf = confidence_of(q, top, ctl.confidence)
    second = first_argmax(q.scatter(-1, top[..., None], -1.0))  # the runner-up (faster than topk(2): docs/speed.md)
    second_p = torch.where(has[:, None], q.gather(-1, second[..., None]).squeeze(-1), 0.0)
    return Chain(pad_to(top, depth, pad_id), pad_to(torch.where(has[:, None], conf, 0.0), depth, 0.0), None,
                 *none, pad_to(second, depth, pad_id), pad_to(second_p, depth, 0.0))


def live_only(chain: Chain, done: torch.Tensor) -> Chain:
    """The chain with no confidence (nor second choice) for the samples done by now: mask_chain ran before this
    forward's commit (inside the forward's CUDA graph), its `done` the one before it."""
    dead = done[:, None]
    second_p = None if chain.second_p is None else torch.where(dead, 0.0, chain.second_p)
    return replace(chain, conf=torch.where(dead, 0.0, chain.conf), second_p=second_p)


LOOKUP_PRIOR = 4.0  # pseudo-drafts at config.lookup_odds that a sample's own lookup record is added to


def lookup_odds(state: DecodeState, config: VerifiedConfig) -> torch.Tensor:
    """[b, 1] a lookup draft's chance of matching, given the ones before it matched, per sample: its own record of
    lookup drafts reached and matched, on a prior of LOOKUP_PRIOR drafts at config.lookup_odds (a text that
    repeats itself, such as a table or a list, soon reads near 0.9; one that does not, lower)."""
    odds = (LOOKUP_PRIOR * config.lookup_odds + state.lookup_hits) / (LOOKUP_PRIOR + state.lookup_tries)
    return odds[:, None]


def track_lookup(state: DecodeState, tree: Tree, m: torch.Tensor) -> None:
    """Add this forward's lookup drafts to each sample's record: m matched of min(m + 1, k) reached."""
    if tree.fed.shape[1] == 0:  # no drafts fed: nothing to add
        return
    k = tree.fed.sum(1)
    looked = tree.from_lookup & (k > 0)
    state.lookup_hits = state.lookup_hits + torch.where(looked, m, 0)
    state.lookup_tries = state.lookup_tries + torch.where(looked, torch.minimum(m + 1, k), 0)


def with_lookup(chain: Chain, state: DecodeState, threshold: float, config: VerifiedConfig, pad_id: int) -> Chain:
    """Per sample, the mask chain or prompt lookup's over the prompt and the answer so far, whichever promises
    the longer run of matches (each cut where its confidence falls below the threshold)."""
    depth = chain.tokens.shape[1]
    count = leading(chain.conf >= threshold)
    if config.lookup_drafts == 0:
        return replace(chain, count=count)
    out, generated, dev = state.answer.out.tolist(), state.answer.generated.tolist(), chain.tokens.device
    text = [p + row[:n] for p, row, n in zip(state.prompts, out, generated)]
    rows, count_found = lookup_rows(text, [0] * len(text), [len(t) for t in text], config.lookup_ngrams,
                                    config.lookup_drafts)
    if not any(count_found):  # nothing repeats: the mask chain as it is
        return replace(chain, count=count)
    found = pad_to(torch.tensor(rows, dtype=torch.long, device=dev), depth, pad_id)
    found_count = torch.tensor(count_found, device=dev)
    # against the drafter's first choices: sampled drafts would make the choice depend on the draw, and a mask
    # chain kept only for some draws is no longer drawn from q (its check would not keep AR's distribution)
    choices = chain.tokens if chain.q is None else first_argmax(chain.q)
    found_conf = lookup_confidence(found, choices, chain.conf, lookup_odds(state, config))
    found_count = torch.minimum(found_count, leading(found_conf >= threshold))
    looked = expected_run(found_conf, found_count) > expected_run(chain.conf, count)
    q = chain.q
    if q is not None:  # a lookup draft is a point mass
        point = torch.zeros_like(q).scatter_(-1, found[..., None], 1.0)
        q = torch.where(looked[:, None, None], point, q)
    pick = looked[:, None]
    second_p = None if chain.second_p is None else torch.where(pick, 0.0, chain.second_p)  # lookup has no second
    return Chain(torch.where(pick, found, chain.tokens), torch.where(pick, found_conf, chain.conf), q,
                 torch.where(looked, found_count, count), looked, chain.second, second_p)


def next_chain(proposed: Chain, state: DecodeState, threshold: float, *, config: VerifiedConfig, g: int,
               pad_id: int, seconds: torch.Tensor | None, floors: tuple[float, ...] = FLOORS) -> Choice:
    """The drafts the next forward checks, the groups hung after them and the siblings beside them: by cost where
    there are seconds by width (plan_by_cost, over `floors`), else G_j is fed when j <= count and P(exactly j drafts
    match) >= the group floor, e_a when P(it is used) >= the sibling floor. At threshold 1 (or without masks, g = 0)
    no draft is worth checking: a plain one-token forward."""
    b, depth = proposed.tokens.shape
    done = state.answer.done
    if threshold >= 1.0 or g == 0:
        none = torch.zeros(b, dtype=torch.bool, device=proposed.tokens.device)
        chain = Chain(proposed.tokens, proposed.conf, proposed.q, none.long(), none)
        return Choice(chain, none[:, None].expand(b, depth + 1), none[:, None].expand(b, depth))
    chain = with_lookup(proposed, state, threshold, config, pad_id)
    floor, sib = config.sibling_floor, None
    if floor is not None:  # below the sibling floor neither rule feeds one
        sib = sibling_odds(chain.conf, chain.second_p, chain.count, done)
        sib = torch.where(sib >= floor, sib, 0.0)
    if seconds is not None:
        count, group_fed, sibling_fed = plan_by_cost(chain.conf, chain.count, done, seconds,
                                                     draft_yield=state.draft_yield, g=g, sib=sib, floors=floors)
        return Choice(replace(chain, count=count), group_fed, sibling_fed)
    likely = group_odds(chain.conf, chain.count) >= config.group_floor
    steps = torch.arange(depth + 1, device=chain.tokens.device)
    sibling_fed = torch.zeros_like(chain.conf, dtype=torch.bool) if sib is None else sib > 0
    return Choice(chain, (steps <= chain.count[:, None]) & likely & ~done[:, None], sibling_fed)


def next_tree(verdict: Verdict, choice: Choice, done: torch.Tensor, threshold: float, *, groups: tuple[int, ...],
              siblings: tuple[int, ...], drafts: int, any_sibling: bool) -> Tree:
    """The next tree: the bonus token pending (after the matched sibling, where one matched: it was not at its
    position),
    the chain's first `drafts` tokens (the longest count), the groups and siblings any sample feeds."""
    live, m, chain = ~done, verdict.m, choice.chain
    pending, pending_valid = verdict.tokens.gather(1, m[:, None]), live[:, None]
    if any_sibling:  # [e_m, bonus] where the sibling matched, [bonus, unfed] elsewhere
        took = verdict.by_sibling[:, None]
        sibling = verdict.tokens.gather(1, (m - 1).clamp_min(0)[:, None])
        pending = torch.cat([torch.where(took, sibling, pending), pending], 1)
        pending_valid = torch.cat([pending_valid, took & live[:, None]], 1)
    second = None if chain.second is None else chain.second[:, :drafts]
    sibling_fed = choice.sibling_fed[:, :drafts] & live[:, None] if siblings else None
    return Tree(pending=pending, pending_valid=pending_valid, drafts=chain.tokens[:, :drafts],
                fed=(torch.arange(drafts, device=m.device) < chain.count[:, None]) & live[:, None],
                q=None if chain.q is None else chain.q[:, :drafts], from_lookup=chain.from_lookup, groups=groups,
                group_fed=choice.group_fed & live[:, None], threshold=threshold, siblings=siblings,
                sibling_ids=second, sibling_fed=sibling_fed)
