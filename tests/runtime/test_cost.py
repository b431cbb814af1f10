"""The forward cost curve: interpolation, measurement on a model, and the per-machine cache."""

from __future__ import annotations

import json

import pytest
import torch

from mars_core.runtime import Runtime, cost, timing
from mars_core.runtime.cost import CostCurve, forward_cost, interpolate, measure_cost

PLAIN = Runtime()


def busy(monkeypatch: pytest.MonkeyPatch, value: bool) -> None:
    """The load average says the machine is (or is not) busy, to the cost curve's check and to timing.kept alike."""
    monkeypatch.setattr(cost, "machine_busy", lambda: value)
    monkeypatch.setattr(timing, "machine_busy", lambda: value)


def test_interpolate_is_linear_inside_and_extends_the_end_segments():
    xs, ys = (1, 2, 4), [10.0, 12.0, 20.0]
    assert interpolate(1, xs, ys) == 10.0 and interpolate(3, xs, ys) == 16.0
    assert interpolate(6, xs, ys) == 28.0  # the last segment's slope, 4 per unit
    assert interpolate(0, xs, ys) == 8.0  # the first segment's slope
    assert interpolate(5, (1,), [3.0]) == 3.0
    assert interpolate(9, (1, 2), [2.0, 1.5]) == 1.5  # past the last point, never falling (a noisy timing)


def test_curve_reads_by_batch_and_width():
    curve = CostCurve.from_function(lambda b, w: 0.01 * b * w + 0.05, batch_sizes=(1, 4), widths=(1, 2, 8))
    assert curve.at(1, [1, 2, 8]) == pytest.approx([0.06, 0.07, 0.13])
    assert curve.at(2, [1, 4]) == pytest.approx([0.07, 0.13])  # both axes linear: exact for a bilinear formula
    assert curve.at(16, [16]) == pytest.approx([0.01 * 16 * 16 + 0.05])  # extrapolated past both ends
    assert curve.at(1, [0]) == curve.at(1, [1])
    assert CostCurve.from_json(curve.to_json()) == curve


def test_shape_moved_reads_the_shape_either_way():
    """Two timings of widths (1, 4, 8): twice as slow with the same shape has not moved; dearer or cheaper width by
    more than the factor has."""
    from mars_core.runtime.curve import shape_moved

    then = [0.020, 0.032, 0.040]  # 1.6x at 4, 2x at 8
    assert not shape_moved(then, [0.040, 0.066, 0.082], 1.15)
    assert shape_moved(then, [0.020, 0.032, 0.048], 1.15)  # 2.4x at 8
    assert shape_moved(then, [0.020, 0.026, 0.040], 1.15)  # 1.3x at 4


@pytest.mark.parametrize("bad", [
    dict(batch_sizes=(1,), widths=(1, 2), seconds=((1.0,),)),  # a column short
    dict(batch_sizes=(1,), widths=(2, 1), seconds=((1.0, 2.0),)),  # not ascending
    dict(batch_sizes=(1,), widths=(1, 2), seconds=((1.0, 0.0),)),  # a time of zero
])
def test_a_malformed_curve_is_refused(bad):
    with pytest.raises(ValueError, match="CostCurve"):
        CostCurve(**bad)


def test_measure_times_every_batch_size_and_width(model):
    curve = measure_cost(model, PLAIN, batch_sizes=(1, 4), widths=(1, 2, 8), rounds=1, budget=16)
    assert curve.batch_sizes == (1, 4) and curve.widths == (1, 2, 8)
    assert all(s > 0 for row in curve.seconds for s in row)
    assert curve.machine["dtype"] == "float32" and curve.machine["threads"] >= 1 and curve.machine["cpu"]


def test_a_batch_s_context_is_one_sample_s_forward_kept_in_every_sample(model, monkeypatch):
    """Before a batch's timed forwards every sample holds the context, fed as one sample's forward (a batch of 16
    prefilling the context itself took longer than all its timed forwards)."""
    fed = []

    def timed(m, rt, cache, ids, ctx, kept=False):
        fed.append((tuple(ids.shape), kept, cache.at.tolist()))
        cache.keep(torch.full_like(cache.at, ids.shape[1] * kept))
        return 0.01

    monkeypatch.setattr(cost, "_timed_forward", timed)
    measure_cost(model, PLAIN, batch_sizes=(1, 4), widths=(1, 2), context=6, rounds=1)
    assert [f[0] for f in fed if f[1]] == [(1, 6), (1, 6)]  # batch 1's context, then batch 4's: one sample each
    assert {tuple(at) for shape, kept, at in fed if not kept and shape[0] == 4} == {(6, 6, 6, 6)}


def test_noisy_timings_never_extrapolate_to_zero():
    """Batch 16 times widths up to 8 only; timings that happen to slope down must not make width 32 free (a curve
    with a time <= 0 is refused, and load() would fail on a busy machine)."""
    timed, measured = (1, 2, 4, 8), [0.05, 0.06, 0.09, 0.07]
    assert interpolate(32, timed, measured) == 0.07  # the line through (4, 0.09), (8, 0.07) is below zero there
    assert interpolate(3, timed, measured) == pytest.approx(0.075)  # inside: the plain interpolation
    assert interpolate(16, (1, 2), [0.01, 0.02]) == pytest.approx(0.16)  # rising: the line


def test_the_curve_is_measured_once_per_machine_and_model(model, tmp_path, monkeypatch):
    calls = []
    fixed = CostCurve.from_function(lambda b, w: 0.001 * w, widths=(1, 2))
    monkeypatch.setattr(cost, "measure_cost", lambda m, rt: calls.append(m) or fixed)
    monkeypatch.setattr(cost, "spot_seconds", lambda m, rt: [0.001, 0.004])  # the machine as fast as when it was timed
    busy(monkeypatch, False)
    assert forward_cost(model, PLAIN, tmp_path) == fixed
    assert forward_cost(model, PLAIN, tmp_path) == fixed  # read back from the file
    assert len(calls) == 1 and len(list(tmp_path.glob("*.json"))) == 1
    (next(tmp_path.glob("*.json"))).write_text("{not json")
    assert forward_cost(model, PLAIN, tmp_path) == fixed and len(calls) == 2  # a damaged file is measured again
    assert forward_cost(model, PLAIN, tmp_path, refresh=True) == fixed and len(calls) == 3


def test_a_curve_timed_on_a_busy_machine_is_read_back_only_while_busy(model, tmp_path, monkeypatch):
    """Other work inflates every timing: such a curve is kept marked so, read back while the machine is still busy (a
    curve timed then would be inflated too: the suite's processes time it once, not each), and timed again by the
    first load that finds the machine quiet."""
    calls = []
    fixed = CostCurve.from_function(lambda b, w: 0.001 * w, widths=(1, 2))
    monkeypatch.setattr(cost, "measure_cost", lambda m, rt: calls.append(m) or fixed)
    monkeypatch.setattr(cost, "spot_seconds", lambda m, rt: [0.001, 0.004])  # as fast as when it was timed
    busy(monkeypatch, True)
    assert forward_cost(model, PLAIN, tmp_path) == fixed and forward_cost(model, PLAIN, tmp_path) == fixed
    kept = next(tmp_path.glob("*.json"))
    assert len(calls) == 1 and json.loads(kept.read_text())[timing.BUSY] is True
    busy(monkeypatch, False)
    assert forward_cost(model, PLAIN, tmp_path) == fixed and len(calls) == 2  # quiet: timed again
    assert timing.BUSY not in json.loads(kept.read_text())  # and kept plain: read back from now on
    assert forward_cost(model, PLAIN, tmp_path) == fixed and len(calls) == 2


def test_a_kept_curve_slower_than_the_machine_now_is_timed_again(model, tmp_path, monkeypatch):
    """A curve timed while one of two cores ran other work (the load average did not count it busy) reads too slow:
    when a quiet load finds it STALE times slower than forwards timed now at a spot width, the curve is timed again
    and rewritten; within that margin, or while the machine is busy, the kept curve is read."""
    inflated = CostCurve.from_function(lambda b, w: 0.046 if w == 1 else 0.054, widths=(1, 2, 4))
    fresh = CostCurve.from_function(lambda b, w: 0.040 + 0.001 * w, widths=(1, 2, 4))
    assert cost.SPOT_WIDTHS == (1, 4)
    calls = []
    monkeypatch.setattr(cost, "measure_cost", lambda m, rt: calls.append(m) or fresh)
    (tmp_path / f"{PLAIN.key(model)}-{cost.FORMAT}.json").write_text(inflated.to_json())

    busy(monkeypatch, True)  # busy now: a timing now would be inflated too
    monkeypatch.setattr(cost, "spot_seconds", lambda m, rt: pytest.fail("timed on a busy machine"))
    assert forward_cost(model, PLAIN, tmp_path) == inflated and not calls

    busy(monkeypatch, False)
    monkeypatch.setattr(cost, "spot_seconds", lambda m, rt: [0.042, 0.050])  # 1.10x and 1.08x: within the margin
    assert forward_cost(model, PLAIN, tmp_path) == inflated and not calls

    monkeypatch.setattr(cost, "spot_seconds", lambda m, rt: [0.042, 0.044])  # width 4 reads 1.23x: timed under load
    assert forward_cost(model, PLAIN, tmp_path) == fresh and len(calls) == 1
    assert CostCurve.from_json(next(tmp_path.glob("*.json")).read_text()) == fresh  # rewritten


def test_spot_seconds_times_real_forwards(model):
    now = cost.spot_seconds(model, PLAIN)
    assert len(now) == len(cost.SPOT_WIDTHS) and all(0 < s < 5 for s in now)


def test_a_spike_in_one_round_does_not_move_the_curve(model, monkeypatch):
    """The fastest of the rounds is kept: a forward that waited on other work in one round is not its cost."""
    spikes = iter([1.0, 5.0, 0.01, 0.02] * 50)  # warm-up, then a stalled round, then two quiet ones
    monkeypatch.setattr(cost, "_timed_forward", lambda *a, **kw: next(spikes))
    curve = measure_cost(model, PLAIN, batch_sizes=(1,), widths=(1,), rounds=3)
    assert curve.seconds == ((0.01,),)


def test_a_narrow_forward_never_reads_dearer_than_a_wider_one(model, monkeypatch):
    """Kernels that stall after a change of kernel (MKL's one-row sgemm after a run of oneDNN's wide forwards on an
    Intel Xeon) must not price one token above two: the curve is made non-decreasing in width."""
    monkeypatch.setattr(cost, "_timed_forward",
                        lambda m, rt, c, ids, ctx, **kw: {1: 0.045, 2: 0.037, 4: 0.049}.get(ids.shape[1], 0))
    curve = measure_cost(model, PLAIN, batch_sizes=(1,), widths=(1, 2, 4), rounds=1)
    assert curve.seconds == ((0.037, 0.037, 0.049),)


def test_an_engine_whose_odd_widths_cost_more_is_priced_as_timed(model, monkeypatch, tmp_path):
    """llama.cpp's Q8_0 kernels take rows in pairs: 5 rows cost more than 6, and the engine feeds 5 as 5. Its Timing
    keeps each width as timed (the planner must not price 5 at 6's cost), where torch's is made non-decreasing; a
    curve kept under the old rule (another name) is not read for it."""
    table = {1: 0.012, 4: 0.031, 5: 0.040, 6: 0.037}
    monkeypatch.setattr(cost, "_timed_forward", lambda m, rt, c, ids, ctx, **kw: table.get(ids.shape[1], 0))
    assert measure_cost(model, PLAIN, batch_sizes=(1,), widths=(1, 4, 5, 6), rounds=1).seconds == (
        (0.012, 0.031, 0.037, 0.037),)
    monkeypatch.setattr(cost, "timing_of", lambda m: cost.ENGINE)
    assert measure_cost(model, PLAIN, batch_sizes=(1,), widths=(1, 4, 5, 6), rounds=1).seconds == (
        (0.012, 0.031, 0.040, 0.037),)
    busy(monkeypatch, False)
    monkeypatch.setattr(cost, "spot_seconds", lambda m, rt: [0.012, 0.031, 0.041])
    old = CostCurve((1,), (1, 4, 5, 6, 8), ((0.012, 0.031, 0.037, 0.037, 0.041),))  # not stale: read if named so
    (tmp_path / f"{PLAIN.key(model)}-{cost.FORMAT}.json").write_text(old.to_json())
    monkeypatch.setattr(cost, "measure_cost", lambda m, rt: CostCurve((1,), (1, 4, 5, 6), ((0.012, 0.031, 0.040,
                                                                                             0.037),)))
    assert cost.ENGINE.kept_as != cost.FORMAT and forward_cost(model, PLAIN, tmp_path).at(1, [5]) == [0.040]


def test_each_runtime_gets_its_own_curve():
    """A curve timed with plain F.linear layers is not read back for oneDNN-packed ones, nor one timed with attention
    row by row for SDPA (or the other way)."""
    from mars_core.runtime.linear import pack_linears

    from tiny import tiny_qwen2

    model = tiny_qwen2(64)
    keys = {Runtime().key(model), Runtime(rows=True).key(model)}
    linears = pack_linears(model)
    if linears:
        keys.add(Runtime(linears=linears).key(model))
    assert len(keys) == 2 + bool(linears)


def test_widths_past_the_budget_are_priced_by_what_batch_1_pays_for_the_tokens(model, monkeypatch):
    """A large batch times only its narrowest widths (the token budget); where those read equal, the row once stayed
    flat and priced every wider forward as free. Past the widest width timed, a batch pays what batch 1 pays for as
    many more tokens."""
    def forward(m, rt, c, ids, ctx, **kw):
        b, w = ids.shape
        return 0.010 + 0.001 * w if b == 1 else 0.059  # batch 4: its two timed widths read equal (noise)

    monkeypatch.setattr(cost, "_timed_forward", forward)
    curve = measure_cost(model, PLAIN, batch_sizes=(1, 4), widths=(1, 2, 4, 8), rounds=1, budget=8)
    one, four = curve.seconds
    assert one == pytest.approx((0.011, 0.012, 0.014, 0.018))
    assert four[:2] == (0.059, 0.059)  # timed: 4 x 2 tokens is the budget
    # 4 x 4 = 16 tokens against 4 x 2 = 8: batch 1 pays 0.008 s more for 16 tokens than for 8 (extended past its 8)
    assert four[2] == pytest.approx(0.059 + 0.008) and four[3] == pytest.approx(0.059 + 0.024)
