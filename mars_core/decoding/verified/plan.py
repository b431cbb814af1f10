"""The plan: which drafts, groups and siblings the next forward feeds, from confidences and the cost curve alone.

A pure function of numbers: draft confidences c_1..c_D, each mask slot's second choice's probability, and seconds of
a forward by tokens fed. It never sees the tree's tensors (tests/test_layout.py keeps it so). With the confidences
read as independent odds, exactly j drafts match with probability
    P(m = j) = c_1 ... c_j (1 - c_{j+1})        P(m = k) = c_1 ... c_k
and the sibling e_a (d_a's second choice) is used with probability about c_1 ... c_{a-1} q2_a.
"""

from __future__ import annotations

import math
from itertools import accumulate

import torch

from ...runtime.curve import CostCurve

FLOORS = (2.0, 0.5, 0.35, 0.2, 0.1, 0.05, 0.0)  # group floors plan_by_cost tries, narrowest first (2.0: no group)
YIELD_WEIGHT = 0.3  # weight of the newest forward in the running mean of drafts matched
YIELD_PRIOR = 1.0  # where the running mean starts, and where it returns from below in forwards checking no drafts
# What a fed group is worth now, per draft it is expected to get matched next forward: those drafts are checked
# next forward at that forward's width cost, and that forward's plan counts their commits again, so counting them
# whole here counts them twice. Half measured best (docs/speed.md#packed-linear-layers, and on llama.cpp
# docs/llamacpp.md#speed).
GROUP_YIELD_WEIGHT = 0.5


def group_odds(conf: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """[b, D+1]: P(exactly j of the first count[i] drafts match), the confidences read as independent odds."""
    c = torch.where(torch.arange(conf.shape[1], device=conf.device) < count[:, None], conf, 0.0)
    ones = torch.ones_like(c[:, :1])
    return torch.cat([ones, c.cumprod(-1)], 1) * (1 - torch.cat([c, 0 * ones], 1))


def sibling_odds(conf: torch.Tensor, second_p: torch.Tensor | None, count: torch.Tensor, done: torch.Tensor
                 ) -> torch.Tensor:
    """[b, D]: P(e_a is used) = P(d_1..d_{a-1} match and the token at d_a's place is e_a) ~ c_1 ... c_{a-1} q2_a,
    for a <= count (0 elsewhere, and where there is no second choice: lookup chains and sampling)."""
    if second_p is None:
        return torch.zeros_like(conf)
    reach = torch.cat([torch.ones_like(conf[:, :1]), conf[:, :-1].cumprod(-1)], 1)
    drafted = torch.arange(conf.shape[1], device=count.device) < count[:, None]
    return torch.where(drafted & ~done[:, None], reach * second_p, 0.0)


def seconds_by_width(curve: CostCurve | None, batch: int, depth: int, g: int, device: torch.device | str = "cpu"
                     ) -> torch.Tensor | None:
    """[W+1] seconds of a forward by tokens fed per sample, up to the widest tree (two pending tokens, D drafts,
    every group and sibling), at this batch size; None without a curve or without masks (g = 0)."""
    if curve is None or g == 0:
        return None
    widest = 2 + depth + (depth + 1) * g + depth * (1 + g)
    return torch.tensor(curve.at(batch, range(widest + 1)), dtype=torch.float32, device=device)


def plan_by_cost(conf: torch.Tensor, count: torch.Tensor, done: torch.Tensor, seconds: torch.Tensor, *,
                 draft_yield: torch.Tensor, g: int, sib: torch.Tensor | None = None,
                 floors: tuple[float, ...] = FLOORS) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(count [b], group_fed [b, D+1], sibling_fed [b, D]) for the draft cap K and floor f that maximise
        (sum_i [1 + sum_{a <= K_i} c_1 ... c_a] + sum_i sum_{a fed} s_ia (1 + w y r)
         + w y r sum_i sum_{j fed} P_i(m = j)) / t(1 + K + |groups| g + |siblings| (1 + g))
    over K = 0..D and f in floors (a static runtime's fixed widths: 0 alone, every group up to K), sums over live
    samples i, with K_i = min(K, count_i), s_ia = P(sibling e_a is
    used) (sibling_odds; it commits one token more and its group proposes the next drafts), G_j fed when
    j <= K_i and P_i(m = j) >= f (m counted over the first K_i drafts), e_a when a <= K_i, s_ia > 0 and s_ia >= f,
    |groups| and |siblings| the unions over samples, y = max(1, draft_yield) the drafts a fed group's proposals are
    expected to get matched, w = GROUP_YIELD_WEIGHT and t the cost curve at this batch size (K: the longest K_i);
    r = t(1) / t(1 + g) prices those drafts in the forwards that will check them (about 1 at batch 1 on a CPU, 0.5
    at batch 8). K = 0 with no group is a plain one-token forward, so a tree is fed only where it is expected to
    commit more tokens per second than that; but where drafts pay on this curve (drafts_pay) the plain forward is no
    option: it feeds no group, so no later forward would have mask drafts to check. Ties go to the smaller K, then
    the higher floor. Where no sample has a draft, or no K >= 1 could beat K = 0 even at best (drafts_may_pay), the
    search is skipped."""
    b, depth = conf.shape
    live = ~done
    host = seconds.tolist()  # one copy: the narrow widths and the bound read floats
    t1, t_group = host[1], host[min(1 + g, len(host) - 1)]  # a group's drafts: 1 + g wide
    y = float(draft_yield)  # one host read (a sync on a GPU), for the proposals' worth and drafts_pay
    proposals = proposals_worth(host, g, y)
    # a plain forward feeds no group, so the next has no mask drafts, nor the one after: priced by the next forward
    # alone (above), G_0 lost to it wherever a group of masks cost over 1.37x a token (y <= 1), and the drafts stopped
    # for good. The floors must hold one <= 1 (K = 0 with G_0), the plan left where a plain forward is none
    regime = drafts_pay(host, y, g)
    g0 = regime or (1 + proposals) * t1 > t_group  # with K = 0: G_0 where it commits more per second than plain
    if not bool(count.any()):  # no drafts anywhere (one host read, far cheaper than the search): G_0 or nothing
        return no_drafts_plan(count, live, g0, depth)
    steps = torch.arange(depth + 1, device=conf.device)
    capped = torch.minimum(count[None, :], steps[:, None])  # [K, b]
    run = torch.cat([torch.zeros_like(conf[:, :1]), conf.cumprod(-1)], 1).cumsum(-1)  # run[i, a] = sum_{l<=a} c_1..c_l
    tokens = ((1 + run.gather(1, capped.T)).T * live).sum(-1)  # [K] expected commits, over live samples
    k0 = (1 + proposals) / t_group if regime else max(1 / t1, (1 + proposals) / t_group)  # best K = 0 plan's rate
    if not drafts_may_pay(tokens, capped, live, host, proposals=proposals, k0=k0, g=g, sib=sib):
        return no_drafts_plan(torch.zeros_like(count), live, g0, depth)
    sib = torch.zeros_like(conf) if sib is None else sib
    odds = group_odds(conf.repeat(depth + 1, 1), capped.reshape(-1)).view(depth + 1, b, depth + 1)  # [K, b, j]
    eligible = (steps <= capped[..., None]) & live[:, None]
    floor = torch.tensor(floors, device=conf.device)
    fed = eligible[:, None] & (odds[:, None] >= floor[None, :, None, None])  # [K, f, b, j]
    sib_fed = ((steps[:-1] < capped[..., None])[:, None] & (sib[None, None] >= floor[None, :, None, None])
               & (sib > 0) & live[:, None])  # [K, f, b, a]
    width = 1 + (capped * live).amax(-1)[:, None] + fed.any(2).sum(-1) * g + sib_fed.any(2).sum(-1) * (1 + g)
    gain = (tokens[:, None] + proposals * (odds[:, None] * fed).sum((-2, -1))
            + (1 + proposals) * (sib * sib_fed).sum((-2, -1)))
    rate = gain / seconds[width]
    if regime:  # a plain forward (nothing checked, no group) would end the drafts
        rate = torch.where(width == 1, -torch.inf, rate)
    best = rate.flatten().argmax()  # the first of equals: fewer drafts, fewer branches
    k, f = best // len(floors), best % len(floors)
    return capped[k], fed[k, f], sib_fed[k, f]


def proposals_worth(seconds: list[float], g: int, draft_yield: float) -> float:
    """What a fed group's proposals are worth now, in tokens: w y r (plan_by_cost), with y at least one matched draft:
    a low running yield would otherwise stop every group, and with them every draft, until forwards without drafts
    moved it back toward its prior (update_yield)."""
    return GROUP_YIELD_WEIGHT * seconds[1] / seconds[min(1 + g, len(seconds) - 1)] * max(1.0, draft_yield)


def width_pays(curve: CostCurve, batch: int, g: int) -> bool:
    """Whether any tree may commit more tokens per second than a one-token forward on this curve, its drafts matching
    as the plan assumes before it has seen any (YIELD_PRIOR a forward): a forward that checks that many certain drafts
    and hangs the next group (1 + ceil(YIELD_PRIOR) + g tokens) commits 1 + YIELD_PRIOR tokens and its group's
    proposals (proposals_worth), priced as plan_by_cost prices them. Where none does (llama.cpp's Q8_0 on an AVX2 CPU:
    a group of 3 masks after a draft costs 2.8-3x a token, docs/llamacpp.md#speed), the plan would feed plain forwards
    at the price of its bookkeeping: verified decoding is then one-token decoding (decode.verified_decode)."""
    seconds = least_tree_seconds(curve, batch, g)
    return tree_gain(seconds, g) * seconds[1] > seconds[-1]


def least_tree_seconds(curve: CostCurve, batch: int, g: int) -> list[float]:
    """Seconds of a forward by tokens a sample, widths 0 .. 1 + ceil(YIELD_PRIOR) + g: up to the least tree width_pays
    weighs (its drafts checked, the next group hung), at this batch size; that tree's at the least price of any width
    from its own up (a wider tree holds it and commits as much), where a curve is not non-decreasing (llama.cpp's:
    an odd width can cost more than the even one above it)."""
    tree = 1 + math.ceil(YIELD_PRIOR) + g
    seconds = curve.at(batch, range(max(tree, max(curve.widths)) + 1))
    return [*seconds[:tree], min(seconds[tree:])]


def tree_price(curve: CostCurve, batch: int, g: int) -> float:
    """What that least tree costs over a one-token forward at this batch size, by the curve (what the Batch tab says
    where it does not pay)."""
    seconds = least_tree_seconds(curve, batch, g)
    return seconds[-1] / seconds[1]


def tree_gain(seconds: list[float], g: int) -> float:
    """What that tree commits, in tokens, as plan_by_cost prices them: 1 + YIELD_PRIOR and its group's proposals."""
    return 1 + YIELD_PRIOR + proposals_worth(seconds, g, YIELD_PRIOR)


def one_token_only(curve: CostCurve | None, batch: int, block_size: int) -> bool:
    """Whether verified decoding of `batch` samples at this block size is one-token decoding by the curve: it has mask
    slots to draft with (B > 1), and no width pays on the curve it sizes its trees by (width_pays)."""
    return curve is not None and block_size > 1 and not width_pays(curve, batch, block_size - 1)


def drafts_pay(seconds: list[float], draft_yield: float, g: int) -> bool:
    """Whether drafts pay on this curve: a forward checking a group's g drafts beside the next group (1 + 2g tokens)
    commits 1 + y (y the running drafts matched) in less time than 1 + y plain forwards. Where it does, a plain
    forward that feeds no group (its drafts priced by the one next forward alone) would stop the drafts for good;
    where it does not, verified decoding feeds plain forwards until y, moving back toward its prior in them
    (update_yield), makes drafts pay again, or for good where they pay at no y <= 1
    (docs/speed.md#trees-sized-to-the-machine)."""
    return (1 + draft_yield) * seconds[1] > seconds[min(1 + 2 * g, len(seconds) - 1)]


def drafts_may_pay(tokens: torch.Tensor, capped: torch.Tensor, live: torch.Tensor, seconds: list[float], *,
                   proposals: float, k0: float, g: int, sib: torch.Tensor | None) -> bool:
    """Whether some draft cap K >= 1 could beat the best plan with K = 0 (k0 commits per second per live sample).
    A bound on each K's gain per second, in three cases by what the tree holds beside the drafts: nothing (the
    expected commits over 1 + K_max tokens), a group (every live sample's fed groups' odds sum to 1 at most; g tokens
    more), a sibling (every one fed; 1 + g more), each over the least seconds of any width from there on. Where none
    could, the search is skipped: most forwards where width is dear (llama.cpp's Q8_0 on an AVX2 CPU,
    docs/llamacpp.md#speed). A few numbers per K, so reckoned on the host (one copy)."""
    parts = [tokens, (capped * live).amax(-1).to(tokens.dtype), live.sum()[None].to(tokens.dtype)]
    if sib is not None:  # [K] every sibling fed
        drafts = torch.arange(sib.shape[1], device=sib.device)
        parts.append(((drafts < capped[..., None]) * (sib * live[:, None])).sum((-2, -1)))
    host = torch.cat(parts).tolist()
    k = len(tokens)
    gains, widest, (n,), sib_sum = host[:k], host[k: 2 * k], host[2 * k: 2 * k + 1], host[2 * k + 1:] or [0.0] * k
    least = list(accumulate(reversed(seconds), min))[::-1]  # least[w]: the fewest seconds at width >= w
    for gain, w, s in list(zip(gains, widest, sib_sum))[1:]:
        w, grouped = int(w), gain + n * proposals
        if max(gain / least[1 + w], grouped / least[1 + w + g],
               (grouped + (1 + proposals) * s) / least[2 + w + g]) > n * k0:
            return True
    return False


def no_drafts_plan(count: torch.Tensor, live: torch.Tensor, g0: bool, depth: int
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """plan_by_cost with K = 0 (no sample has a draft, or none could pay): no sibling, and G_0 (P(m = 0) = 1) fed to
    every live sample where g0: n (1 + proposals) / t(1 + g) > n / t(1), n the live samples (ties to no group)."""
    group_fed = torch.zeros((len(count), depth + 1), dtype=torch.bool, device=count.device)
    if g0:
        group_fed[:, 0] = live
    return count, group_fed, torch.zeros((len(count), depth), dtype=torch.bool, device=count.device)


def update_yield(draft_yield: torch.Tensor, m: torch.Tensor, checked: torch.Tensor | None) -> torch.Tensor:
    """The running mean of drafts matched per sample, moved by the forwards that checked drafts (checked [b]; None:
    nothing fed to check): y <- (1 - YIELD_WEIGHT) y + YIELD_WEIGHT mean(m over checked samples). Where none checked,
    a y below YIELD_PRIOR moves toward it alike: a low y makes drafts look as if they did not pay (drafts_pay), the plan
    then feeds no drafts, and a y that moved only where drafts were checked would never rise again: the decode would
    stay one-token decoding for good after a few misses (no sync either way)."""
    recovered = torch.maximum(draft_yield, (1 - YIELD_WEIGHT) * draft_yield + YIELD_WEIGHT * YIELD_PRIOR)
    if checked is None:
        return recovered
    n = checked.sum()
    mean = (m * checked).sum() / n.clamp_min(1)
    return torch.where(n > 0, (1 - YIELD_WEIGHT) * draft_yield + YIELD_WEIGHT * mean, recovered)
