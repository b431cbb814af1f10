"""plan_by_cost against a brute-force reference: explicit loops over every draft cap K and floor f, computing the
gain its docstring states, on many random inputs (batch 1 and 3, with and without siblings, some finished rows)."""

from __future__ import annotations

import random

import pytest
import torch

from mars_core.decoding.verified.plan import FLOORS, GROUP_YIELD_WEIGHT, YIELD_PRIOR, plan_by_cost, update_yield


def exactly(c: list[float], k: int, j: int) -> float:
    """P(exactly j of the first k drafts match), the confidences c_1..c_k read as independent odds."""
    if j > k:
        return 0.0
    p = 1.0
    for a in range(j):
        p *= c[a]
    return p * (1 - c[j]) if j < k else p


def brute_force(conf, count, done, seconds, draft_yield, g, sib):
    """Every (K, f): (score, count, group_fed, sibling_fed) from the documented formula, in plain Python floats."""
    b, depth = len(conf), len(conf[0])
    checking = seconds[1] / seconds[min(1 + g, len(seconds) - 1)]
    proposals = GROUP_YIELD_WEIGHT * checking * max(1.0, draft_yield)
    # drafts pay: a forward checking a group's g drafts beside the next group beats 1 + y plain ones; then no plan
    # is a plain forward (nothing checked, no group fed: it would end the drafts)
    regime = (1 + draft_yield) * seconds[1] > seconds[min(1 + 2 * g, len(seconds) - 1)]
    plans = []
    for K in range(depth + 1):
        for f in FLOORS:
            caps = [min(K, count[i]) for i in range(b)]
            gain, widest, groups, siblings = 0.0, 0, set(), set()
            group_fed = [[False] * (depth + 1) for _ in range(b)]
            sibling_fed = [[False] * depth for _ in range(b)]
            for i in range(b):
                if done[i]:
                    continue
                k = caps[i]
                widest = max(widest, k)
                run, reach = 1.0, 1.0
                for a in range(k):
                    reach *= conf[i][a]
                    run += reach
                gain += run
                for j in range(k + 1):
                    p = exactly(conf[i], k, j)
                    if p >= f:
                        group_fed[i][j] = True
                        groups.add(j)
                        gain += proposals * p
                for a in range(k):  # e_{a+1}
                    s = sib[i][a]
                    if s > 0 and s >= f:
                        sibling_fed[i][a] = True
                        siblings.add(a)
                        gain += (1 + proposals) * s
            width = 1 + widest + len(groups) * g + len(siblings) * (1 + g)
            if regime and width == 1:  # a plain forward would end the drafts
                continue
            plans.append((gain / seconds[width], caps, group_fed, sibling_fed))
    return plans


def random_case(rng: random.Random, b: int, siblings: bool, curve: str = "rising"):
    depth, g = rng.randint(1, 7), rng.randint(1, 4)
    conf = [[rng.choice([rng.random(), 1 - rng.random() ** 4, 0.0]) for _ in range(depth)] for _ in range(b)]
    no_drafts = rng.random() < 0.2  # plan_by_cost's shortcut where no sample has a draft
    count = [0 if no_drafts else rng.randint(0, depth) for _ in range(b)]
    done = [rng.random() < 0.25 for _ in range(b)]
    if all(done):
        done[rng.randrange(b)] = False
    widest = 2 + depth + (depth + 1) * g + depth * (1 + g)
    steps = [rng.uniform(0.0, 0.3) * rng.choice([0.05, 1.0]) for _ in range(widest + 1)]
    seconds = [1.0 + sum(steps[: w + 1]) for w in range(widest + 1)]  # rising: width never costs less
    if curve == "steep":  # width as dear as llama.cpp's Q8_0 on an AVX2 CPU (docs/speed.md)
        seconds = [1.0, 1.0] + [1.8 + 0.5 * (w - 2) for w in range(2, widest + 1)]
    elif curve == "bumpy":  # a measured curve need not rise everywhere (noise, kernel switches)
        seconds = [s * rng.uniform(0.85, 1.15) for s in seconds]
    sib = [[rng.choice([0.0, rng.random() * 0.6]) for _ in range(depth)] for _ in range(b)] if siblings else None
    return conf, count, done, seconds, rng.uniform(0.0, 3.0), g, sib


@pytest.mark.parametrize("b", [1, 3])
@pytest.mark.parametrize("siblings", [False, True], ids=["chain", "siblings"])
@pytest.mark.parametrize("curve", ["rising", "steep", "bumpy"])
def test_plan_by_cost_is_the_best_plan_of_the_brute_force(b, siblings, curve):
    rng = random.Random(1000 * b + siblings + 10 * len(curve))
    for _ in range(300):
        conf, count, done, seconds, y, g, sib = random_case(rng, b, siblings, curve)
        got = plan_by_cost(torch.tensor(conf), torch.tensor(count), torch.tensor(done), torch.tensor(seconds),
                           draft_yield=torch.tensor(y), g=g, sib=None if sib is None else torch.tensor(sib))
        got = tuple(t.tolist() for t in got)
        depth = len(conf[0])
        plans = brute_force(conf, count, done, seconds, y, g, sib or [[0.0] * depth for _ in range(b)])
        best = max(p[0] for p in plans)
        first = next(p for p in plans if p[0] >= best * (1 - 1e-5))  # float32 ties: the first of equals
        near = [p[1:] for p in plans if p[0] >= best * (1 - 1e-5)]
        assert got in [tuple(p) for p in near], (conf, count, done, seconds, y, g, sib)
        if len(near) == 1:
            assert got == tuple(first[1:])


def test_where_width_costs_nothing_every_likely_group_is_fed():
    """A flat curve: the widest plan wins, every draft checked and every group with any chance of use fed."""
    conf, count = torch.tensor([[0.9, 0.8, 0.5]]), torch.tensor([3])
    got_count, group_fed, _ = plan_by_cost(conf, count, torch.tensor([False]), torch.ones(40),
                                           draft_yield=torch.tensor(1.0), g=3)
    assert got_count.tolist() == [3] and group_fed.tolist() == [[True] * 4]


def test_the_search_is_skipped_only_where_no_draft_could_pay(monkeypatch):
    """drafts_may_pay is a bound: on a steep curve it skips the search for a weak chain and not for a strong one,
    and a skipped search answers what the search would (the brute-force test above covers both ways)."""
    import mars_core.decoding.verified.plan as plan

    searched = []
    real = plan.drafts_may_pay
    monkeypatch.setattr(plan, "drafts_may_pay", lambda *a, **k: searched.append(bool(real(*a, **k))) or real(*a, **k))
    steep = torch.tensor([1.0, 1.0] + [1.8 + 0.5 * (w - 2) for w in range(2, 40)])
    for conf in ([[0.3, 0.2, 0.1]], [[1.0, 1.0, 1.0]]):
        plan.plan_by_cost(torch.tensor(conf), torch.tensor([3]), torch.tensor([False]), steep,
                          draft_yield=torch.tensor(1.0), g=3)
    assert searched == [False, True]


def test_a_plain_forward_is_no_option_where_drafts_pay():
    """A group of 3 masks at 1.6x a token, over the 1.5x where the next forward's price of its proposals alone pays
    for it at 1.5 drafts matched, and a forward checking its drafts beside the next group at 2.2x: with 1.5 matched
    a forward, a step without drafts, or with drafts too weak to check, still feeds G_0 (a plain forward would leave
    every later forward without drafts), and a weak draft that the plain forward beat is checked instead. With 1
    matched (2 tokens for 2.2x) drafts do not pay, and the plain forward wins."""
    seconds = torch.tensor([1.0] + [1 + 0.2 * (w - 1) for w in range(1, 40)])
    done = torch.tensor([False])
    for y, fed in ((1.5, True), (1.0, False)):
        for conf, count in (([[0.0, 0.0, 0.0]], [0]), ([[0.05, 0.05, 0.05]], [3])):
            got_count, group_fed, _ = plan_by_cost(torch.tensor(conf), torch.tensor(count), done, seconds,
                                                   draft_yield=torch.tensor(y), g=3)
            assert got_count.tolist() == [0] and group_fed.tolist() == [[fed, False, False, False]], (y, conf)
        # one draft at 0.15: 1.15 tokens for 1.2x beats G_0 (0.92 a unit of time) but not a plain forward (1.0)
        got_count, group_fed, _ = plan_by_cost(torch.tensor([[0.15, 0.0, 0.0]]), torch.tensor([1]), done, seconds,
                                               draft_yield=torch.tensor(y), g=3)
        assert got_count.tolist() == [1 if fed else 0] and not group_fed.any(), y


def test_the_running_yield_returns_toward_its_prior_where_nothing_is_checked():
    """A forward that checked drafts moves y by their mean; one that checked none (nothing fed, or no sample fed
    any) moves a y below the prior up toward it, never past it, and leaves a higher one as it is."""
    m, some, none = torch.tensor([3.0, 1.0]), torch.tensor([True, True]), torch.tensor([False, False])
    assert update_yield(torch.tensor(0.5), m, some).item() == pytest.approx(0.7 * 0.5 + 0.3 * 2.0)
    y = torch.tensor(0.2)
    for checked in (None, none) * 8:
        up = update_yield(y, m, checked)
        assert y.item() < up.item() <= YIELD_PRIOR
        y = up
    assert y.item() > 0.95
    assert update_yield(torch.tensor(2.5), m, None).item() == 2.5
    assert update_yield(torch.tensor(2.5), m, none).item() == 2.5


def test_a_decode_whose_drafts_missed_tries_them_again():
    """On a curve where drafts pay from 0.9 matched a forward (t(7) = 1.9 t(1)) and a group after a plain forward
    alone does not (t(4) = 1.45 t(1)), a decode whose running yield fell to 0.3 feeds plain forwards, then G_0 again
    within a few: with y moved only where drafts were checked, it would feed plain forwards for good."""
    seconds = torch.tensor([1.0] + [1 + 0.15 * (w - 1) for w in range(1, 40)])
    conf, count, done = torch.zeros(1, 3), torch.tensor([0]), torch.tensor([False])
    y, plain = torch.tensor(0.3), 0
    while True:
        _, group_fed, _ = plan_by_cost(conf, count, done, seconds, draft_yield=y, g=3)
        if group_fed.any():
            break
        plain += 1
        assert plain <= 10, y
        y = update_yield(y, torch.zeros(1), None)
    assert 1 <= plain <= 10


def test_a_forward_that_fed_no_drafts_moves_the_yield_toward_its_prior():
    """track_yield, the decoder's call: a forward with no drafts fed (a plain one, or G_0 alone) moves a low y up;
    one whose drafts were checked moves it by their matches."""
    from types import SimpleNamespace

    from mars_core.decoding.verified.verify import track_yield

    state = SimpleNamespace(draft_yield=torch.tensor(0.3))
    track_yield(state, SimpleNamespace(fed=torch.zeros(2, 0, dtype=torch.bool)), torch.zeros(2, dtype=torch.long))
    assert state.draft_yield.item() == pytest.approx(0.7 * 0.3 + 0.3 * YIELD_PRIOR)
    before = state.draft_yield.item()
    track_yield(state, SimpleNamespace(fed=torch.ones(2, 3, dtype=torch.bool)), torch.tensor([0, 0]))
    assert state.draft_yield.item() == pytest.approx(0.7 * before)


@pytest.mark.parametrize("seconds,price,pays", [
    (lambda b, w: 0.01 * b * w, 5.0, False),  # every token a full token's work: the least tree (1 + 1 + 3) costs 5x
    (lambda b, w: 0.01, 1.0, True),  # width free
    (lambda b, w: 0.01 * (1 + 0.35 * (w - 1)), 2.4, False),  # 35% a token: 2.4x against 2 + 0.5 / 2.05 tokens
    (lambda b, w: 0.01 * (1 + 0.2 * (w - 1)), 1.8, True),
])
def test_the_least_tree_s_price_decides_whether_width_pays(seconds, price, pays):
    """tree_price: a forward of 1 + ceil(YIELD_PRIOR) + g tokens a sample over one of 1, at the batch asked; width pays
    where the tokens that tree commits as the plan prices them (1 + YIELD_PRIOR and its group's proposals, weighed by
    GROUP_YIELD_WEIGHT t(1) / t(1 + g)) exceed that price, as width_pays has always decided it."""
    from mars_core.decoding.verified.plan import one_token_only, tree_price, width_pays
    from mars_core.runtime import CostCurve

    curve = CostCurve.from_function(seconds, batch_sizes=(1, 4, 16), widths=tuple(range(1, 33)))
    g = 3
    assert tree_price(curve, 4, g) == pytest.approx(price)
    t = curve.at(4, range(7))
    gain = 1 + YIELD_PRIOR + GROUP_YIELD_WEIGHT * t[1] / t[1 + g] * max(1.0, YIELD_PRIOR)
    assert (gain * t[1] > t[2 + g]) is pays and width_pays(curve, 4, g) is pays
    assert one_token_only(curve, 4, g + 1) is not pays


def test_a_wider_tree_that_costs_less_lets_width_pay_on_a_curve_with_dear_odd_widths():
    """llama.cpp's curve is priced as timed, so 5 tokens can cost more than 6: the least tree (a draft and the next 3
    masks, 5 tokens) is priced at the least of its width and any wider one (a tree of 6 holds it and commits as
    much). On a non-decreasing curve that is its own width's price, as before."""
    from mars_core.decoding.verified.plan import tree_price, width_pays
    from mars_core.runtime import CostCurve

    dear_five = CostCurve((1,), (1, 2, 3, 4, 5, 6, 8), ((1.0, 1.4, 1.7, 1.8, 3.5, 2.0, 2.6),))
    assert tree_price(dear_five, 1, 3) == pytest.approx(2.0) and width_pays(dear_five, 1, 3)
    rising = CostCurve((1,), (1, 2, 3, 4, 5, 6, 8), ((1.0, 1.4, 1.7, 1.8, 3.5, 3.6, 4.0),))
    assert tree_price(rising, 1, 3) == pytest.approx(3.5) and not width_pays(rising, 1, 3)
