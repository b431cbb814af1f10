"""mars_core.serving: the load counter and the adaptive-threshold policy."""

from __future__ import annotations

import threading

import pytest

from mars_core.serving import DEFAULT_FLOOR, DEFAULT_STEP, LoadTracker, adaptive_threshold


def test_tracker_counts_nested_and_concurrent_generations():
    tracker = LoadTracker()
    assert tracker.active == 0
    with tracker:
        assert tracker.active == 1
        with tracker:
            assert tracker.active == 2
        assert tracker.active == 1
    assert (tracker.active, tracker.peak, tracker.total) == (0, 2, 2)


def test_tracker_is_thread_safe():
    tracker, start = LoadTracker(), threading.Barrier(8)
    seen = []

    def work():
        start.wait()
        for _ in range(2000):
            with tracker:
                seen.append(tracker.active)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert tracker.active == 0 and tracker.total == 16000
    assert 1 <= tracker.peak <= 8 and min(seen) >= 1


def test_tracker_leaves_the_count_right_when_a_generation_raises():
    tracker = LoadTracker()
    with pytest.raises(ZeroDivisionError), tracker:
        1 / 0
    assert tracker.active == 0
    with pytest.raises(RuntimeError):
        tracker.exit()


def test_alone_decodes_at_the_base_threshold():
    for base in (1.0, 0.9, 0.3):
        assert adaptive_threshold(base, 0) == base
        assert adaptive_threshold(base, 1) == base


def test_each_extra_generation_lowers_by_a_step_down_to_the_floor():
    assert adaptive_threshold(0.9, 2) == pytest.approx(0.9 - DEFAULT_STEP)
    assert adaptive_threshold(0.9, 3) == pytest.approx(0.9 - 2 * DEFAULT_STEP)
    assert adaptive_threshold(1.0, 100) == DEFAULT_FLOOR
    values = [adaptive_threshold(0.95, n) for n in range(1, 30)]
    assert values == sorted(values, reverse=True)  # never rises with load
    assert min(values) == DEFAULT_FLOOR


def test_a_base_below_the_floor_is_kept_and_custom_policies_apply():
    assert adaptive_threshold(0.4, 10) == 0.4
    assert adaptive_threshold(0.9, 3, step=0.1, floor=0.6) == pytest.approx(0.7)
    assert adaptive_threshold(0.9, 9, step=0.1, floor=0.6) == pytest.approx(0.6)
    assert adaptive_threshold(0.9, 5, step=0.0) == 0.9


@pytest.mark.parametrize(
    "args", [(0.0, 1), (1.5, 1), (0.9, -1), (0.9, 1.5), (True, 1)]
)
def test_bad_arguments_raise_clear_errors(args):
    with pytest.raises(ValueError):
        adaptive_threshold(*args)
    with pytest.raises(ValueError):
        adaptive_threshold(0.9, 2, floor=0.0)
    with pytest.raises(ValueError):
        adaptive_threshold(0.9, 2, step=-0.1)
