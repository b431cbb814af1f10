"""Pace: width priced by the decode's own forwards, t(w) = t1 + k (s_w - s_1), from the curve as timed."""

from __future__ import annotations

import pytest
import torch

from mars_core.decoding.verified.pace import K_RANGE, WEIGHT, Pace

CURVE = torch.tensor([0.010, 0.010, 0.012, 0.014, 0.016, 0.018])  # s_w for w = 0..5: 20% of a forward per token


def test_a_decode_starts_from_the_curve_as_timed():
    pace = Pace.from_curve(CURVE)
    assert pace.t1 == pytest.approx(0.010) and pace.k == 1.0
    assert torch.allclose(pace.seconds(), CURVE)


def test_plain_forwards_move_t1_and_keep_the_price_of_width():
    pace = Pace.from_curve(CURVE)
    for _ in range(40):  # plain forwards now take 20 ms, not 10
        pace.observe(1, 0.020)
    seconds = pace.seconds()
    assert seconds[1] == pytest.approx(0.020, rel=1e-3)
    assert torch.allclose(seconds[2:] - seconds[1], CURVE[2:] - CURVE[1])  # k unchanged: width's price in seconds


def test_wider_forwards_move_k_towards_what_they_cost():
    pace = Pace.from_curve(CURVE)
    pace.observe(4, 0.010 + 2 * (0.016 - 0.010))  # width 4 cost twice the curve's price over one token
    assert pace.k == pytest.approx(1 + WEIGHT)
    for _ in range(40):
        pace.observe(3, 0.010 + 2 * (0.014 - 0.010))
    assert pace.k == pytest.approx(2.0, rel=1e-3)
    assert pace.seconds()[5] == pytest.approx(0.010 + 2 * 0.008, rel=1e-3)
    for _ in range(40):  # width free of cost now: k falls, never below its floor
        pace.observe(5, 0.010)
    assert pace.k == pytest.approx(K_RANGE[0], rel=1e-3)


def test_one_slow_forward_cannot_price_width_out():
    pace = Pace.from_curve(CURVE)
    pace.observe(2, 10.0)  # a forward held up by other work: k moves by WEIGHT times its cap at most
    assert pace.k == pytest.approx(1 + WEIGHT * (K_RANGE[1] - 1))
    wide = Pace.from_curve(CURVE)
    wide.observe(50, 0.030)  # past the curve's widths: priced by its widest
    assert wide.k == pytest.approx(1 + WEIGHT * (min(0.020 / 0.008, K_RANGE[1]) - 1))


def test_a_flat_curve_says_nothing_of_k():
    pace = Pace.from_curve(torch.full((6,), 0.01))
    pace.observe(4, 0.05)
    assert pace.k == 1.0


def test_a_pace_rebased_on_fewer_samples_keeps_what_it_learned():
    """Samples finished: the plan reads a curve at fewer samples (decode.repriced); the pace keeps its k, and its t1
    scales with the new curve's one-token seconds."""
    from types import SimpleNamespace

    from mars_core import TreeLayout
    from mars_core.decoding.verified.decode import repriced
    from mars_core.runtime import CostCurve

    pace = Pace.from_curve(CURVE)
    pace.observe(4, 0.010 + 2 * (0.016 - 0.010))  # width costs more than the curve says: k moves up
    pace.observe(1, 0.015)  # and a plain forward more too
    fewer = CURVE * 0.5  # the curve at the live samples
    rebased = pace.rebased(fewer)
    assert rebased.k == pace.k > 1 and rebased.t1 == pytest.approx(pace.t1 * 0.5)
    assert torch.allclose(rebased.seconds(), rebased.t1 + pace.k * (fewer - fewer[1]))
    by_batch = CostCurve.from_function(lambda b, w: 0.01 * b * (1 + 0.2 * (w - 1)), batch_sizes=(1, 8))
    r = SimpleNamespace(config=TreeLayout(cost=by_batch), spec=None, depth=1, g=1, model=SimpleNamespace(device="cpu"),
                        pace=pace, priced_for=4, seconds=None)
    repriced(r, 2)
    assert r.priced_for == 2 and r.pace.k == pace.k and torch.allclose(r.seconds, r.pace.seconds())
    r.pace = None  # no pace (the default on a CPU): the curve at the live samples as it is
    repriced(r, 1)
    assert r.seconds.tolist() == pytest.approx(by_batch.at(1, range(len(r.seconds))))
