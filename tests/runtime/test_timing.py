"""The timing and keeping helpers every measurement goes through: warm-up and rounds, an untimed after(), and JSON
kept atomically."""

from __future__ import annotations

import json

from mars_core.runtime import timing


def test_round_seconds_warms_up_then_times_each_round_with_after_untimed():
    calls = []
    times = timing.round_seconds(lambda: calls.append("work"), 3, after=lambda: calls.append("after"), warmup=2)
    assert len(times) == 3 and all(t >= 0 for t in times)
    assert calls == ["work", "after"] * 5  # two warm-up calls, three timed ones, each followed by after()


def test_fastest_and_median_read_the_same_rounds(monkeypatch):
    rounds = iter([0.3, 0.1, 0.2])
    monkeypatch.setattr(timing, "round_seconds", lambda *a, **k: [next(rounds) for _ in range(3)])
    assert timing.fastest_seconds(lambda: None, 3) == 0.1
    rounds = iter([0.3, 0.1, 0.2])
    assert timing.median_seconds(lambda: None, 3) == 0.2


def test_write_json_keeps_a_value_atomically_and_read_json_refuses_damage(tmp_path):
    path = tmp_path / "new" / "folder" / "value.json"
    timing.write_json(path, {"a": [1, 2]}, indent=2)
    assert json.loads(path.read_text()) == {"a": [1, 2]} and timing.read_json(path) == {"a": [1, 2]}
    assert [p.name for p in path.parent.iterdir()] == ["value.json"]  # no temporary file left beside it
    path.write_text("{half")
    assert timing.read_json(path) is None and timing.read_json(None) is None
    timing.write_json(None, {"a": 1})  # nowhere to keep it: nothing happens


def test_machine_busy_reads_the_load_average(monkeypatch):
    monkeypatch.setattr(timing.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(timing.os, "getloadavg", lambda: (2.5, 0.0, 0.0))
    assert timing.machine_busy()
    monkeypatch.setattr(timing.os, "getloadavg", lambda: (1.5, 0.0, 0.0))
    assert not timing.machine_busy()


def test_kept_measures_once_and_reads_a_timing_taken_on_a_busy_machine_only_while_busy(tmp_path, monkeypatch):
    measured = []

    def measure() -> int:
        measured.append(1)
        return len(measured)

    def value(path, **options) -> int:
        return timing.kept(path, lambda d: int(d["n"]), measure, lambda n: {"n": n}, **options)

    monkeypatch.setattr(timing, "machine_busy", lambda: False)
    path = tmp_path / "n.json"
    assert value(path) == 1 and value(path) == 1 and len(measured) == 1  # read back, not measured again
    path.write_text('{"m": 5}')  # one it cannot read: measured again and kept
    assert value(path) == 2 and json.loads(path.read_text()) == {"n": 2}
    monkeypatch.setattr(timing, "machine_busy", lambda: True)
    busy, bits = tmp_path / "busy.json", tmp_path / "bits.json"
    assert value(busy) == 3 and json.loads(busy.read_text()) == {"n": 3, timing.BUSY: True}  # inflated: marked
    assert value(busy) == 3 and len(measured) == 3  # busy still: read back (a timing now is no cleaner)
    assert value(bits, timed=False) == 4 and json.loads(bits.read_text()) == {"n": 4}  # not a timing: plain
    assert value(None) == 5  # nowhere to keep it
    monkeypatch.setattr(timing, "machine_busy", lambda: False)
    assert value(busy) == 6 and json.loads(busy.read_text()) == {"n": 6}  # quiet now: timed again, kept plain
    assert value(busy) == 6 and value(bits, timed=False) == 4 and len(measured) == 6
    assert value(path, holds=lambda n: n == 2) == 2 and len(measured) == 6  # still holds: read back
    assert value(path, holds=lambda n: False) == 7 and json.loads(path.read_text()) == {"n": 7}  # no longer: again
