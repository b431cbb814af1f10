"""mars_core.evaluation.metrics: the measures the sweeps, mars-eval and the app report, on hand-made counts."""

from __future__ import annotations

from mars_core.evaluation.metrics import draft_acceptance


def test_draft_acceptance_counts_a_position_only_where_every_draft_before_it_matched():
    """(drafts checked, matched) per forward: d_a counts as checked once d_1 .. d_(a-1) all matched."""
    acc = draft_acceptance([(3, 2), (3, 0), (3, 3), (2, 1)], tokens=11, forwards=5)
    assert acc["forwards_checking"] == 4 and acc["drafts_checked"] == 11
    assert acc["mean_accepted"] == 1.5 and acc["tokens_per_forward"] == 2.2
    assert [(p["position"], p["checked"], p["matched"]) for p in acc["positions"]] == [(1, 4, 3), (2, 3, 2),
                                                                                       (3, 2, 1)]
    assert [p["rate"] for p in acc["positions"]] == [0.75, 2 / 3, 0.5]


def test_draft_acceptance_of_nothing_checked_is_empty():
    acc = draft_acceptance([])
    assert acc == {"forwards_checking": 0, "drafts_checked": 0, "mean_accepted": 0.0, "tokens_per_forward": 0.0,
                   "positions": []}
    assert draft_acceptance([], tokens=6, forwards=3)["tokens_per_forward"] == 2.0
