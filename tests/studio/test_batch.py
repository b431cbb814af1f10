"""The Batch tab's handlers called directly, on a tiny model registered in models.MODELS."""

from __future__ import annotations

import json
import time
import warnings

import gradio as gr
import pytest

from mars_core import StreamEvent
from studio import inputs, models
from studio.batch import html as batch_html
from studio.batch import state as batch_state
from studio.batch import tab as batch

PROMPTS = [
    "Count from one to ten",
    "List three colours",
    "hello",
    "What is the capital of France?",
    "Step by step: 12 * 3",
    "The quick brown fox",
]
TEXT = "\n".join(PROMPTS)


pytestmark = pytest.mark.usefixtures("served")  # tests/studio/conftest.py: the tiny model, served


# the batch's outputs, in order: cells, slot chart, stats, message line, trace
PANES, PLOT, STATS, MESSAGE, TRACE = range(5)


def final(outputs: list) -> dict:
    return outputs[-1][TRACE]


def per_sample(counts: list[list[int]]) -> list[list[int]]:
    """[forward][sample] -> [sample][forward]."""
    return [list(row) for row in zip(*counts)]


def reference_new_blocks(counts: list[list[int]], finished_at: list, block_size: int) -> list[int]:
    """The forwards that start a block, by the token counts alone: the live samples' least total reaches k·B."""
    totals, block, starts = [0] * len(finished_at), 1, []
    for f, row in enumerate(counts):
        live = [i for i, end in enumerate(finished_at) if end is None or end >= f]
        if f > 0 and min(totals[i] for i in live) >= block * block_size:
            starts.append(f)
            block += 1
        totals = [t + c for t, c in zip(totals, row)]
    return starts


def test_parse_prompts_one_per_non_empty_line():
    assert batch_state.parse_prompts("  a \n\n b\nc\n   \nd\n") == ["a", "b", "c", "d"]
    assert len(batch_state.parse_prompts("\n".join("p" * 8))) == 8
    assert batch_state.parse_prompts("\n".join(batch.EXAMPLES)) == batch.EXAMPLES and len(batch.EXAMPLES) == 6
    with pytest.raises(ValueError, match="Give 4 to 8 prompts, one per line; got 3"):
        batch_state.parse_prompts("a\n\nb\nc")
    with pytest.raises(ValueError, match="got 0"):
        batch_state.parse_prompts("  \n ")
    with pytest.raises(ValueError, match="Prompt 2 too long"):
        batch_state.parse_prompts("\n".join(["a", "x" * (inputs.MAX_PROMPT_CHARS + 1), "b", "c"]))
    with pytest.raises(ValueError, match="must be text"):
        batch_state.parse_prompts(None)


def test_tau_one_block_batch_is_ar():
    session = batch_state.BatchSession()
    outputs = list(batch.batch_race(TEXT, 1.0, 4, 24, session))
    trace = final(outputs)
    block, ar = trace["block"], trace["ar"]
    assert trace["status"] == "done" and trace["message"] == ""
    assert len(outputs) == 24  # one frame per pair of forwards
    assert block["texts"] == ar["texts"] and block["ids"] == ar["ids"]
    assert trace["same_as_ar"] == [True] * 6
    assert all(c <= 1 for row in block["counts"] for c in row)
    assert block["counts"] == [[1] * 6] * 24 and block["forwards"] == ar["forwards"] == 24
    assert block["tokens"] == ar["tokens"] == 6 * 24 and [len(i) for i in block["ids"]] == [24] * 6
    assert block["new_blocks"] == [4, 8, 12, 16, 20]  # τ = 1 fills a block of 4 in 4 forwards
    assert block["seconds"] > 0 and block["tokens_per_second"] > 0 and ar["tokens_per_second"] > 0
    panes, plot, stats, message, _ = outputs[-1]
    assert message == ""
    assert panes.count("same as AR ✓") == 6 and "differs" not in panes
    assert "**1.00 steps per forward**" in stats and "**6 of 6** answers equal" in stats
    assert "0 of 144 sample-forwards waiting" in stats
    verified = trace["verified"]  # the third batch: each answer its AR answer, several tokens a forward
    assert trace["verified_same_as_ar"] == [True] * 6 and verified["ids"] == ar["ids"]
    assert panes.count("verified = AR ✓") == 6 and f"**Verified batch**: {verified['forwards']} forwards" in stats
    assert verified["forwards"] <= ar["forwards"] and verified["tokens"] == ar["tokens"]
    wall = stats.splitlines()[-1]
    assert wall.startswith("Wall clock, a measurement on a shared CPU") and "**" not in wall
    assert session.controls is None


def test_where_no_tree_pays_at_the_batch_size_the_tab_says_why_verified_feeds_one_token(monkeypatch):
    """A machine where a forward's cost grows with every token fed (seconds = batch x width: a compute-bound CPU):
    the verified batch decodes one token a forward, AR's forwards and answers, and the stats say why, with the
    curve's price of the least tree (a draft and the next 3 masks: 5 tokens a sample, 5x one); where width is
    nearly free the note is not there."""
    from dataclasses import replace

    from mars_core.runtime import CostCurve

    dear = CostCurve.from_function(lambda b, w: 1e-3 * b * w, batch_sizes=(1, 4, 16), widths=tuple(range(1, 33)))
    served = models.get_runtime
    monkeypatch.setattr(models, "get_runtime", lambda name: replace(served(name), cost=dear))
    outputs = list(batch.batch_race(TEXT, 0.9, 4, 8, batch_state.BatchSession()))
    trace, stats = final(outputs), outputs[-1][STATS]
    assert trace["status"] == "done"
    assert trace["verified"]["forwards"] == trace["ar"]["forwards"] and trace["verified"]["ids"] == trace["ar"]["ids"]
    why = trace["one_token_here"]
    assert "costs 5.0× a one-token forward" in why and "one token a forward here" in why and why in stats
    cheap = CostCurve.from_function(lambda b, w: 1e-3 * (1 + 0.01 * b * w), batch_sizes=(1, 4, 16),
                                    widths=tuple(range(1, 33)))
    assert batch.one_token_here(replace(served(None), cost=cheap), 6, 4) == ""


def test_low_threshold_commits_several_tokens_and_fast_samples_wait():
    outputs = list(batch.batch_race(TEXT, 0.1, 4, 32, batch_state.BatchSession()))
    trace = final(outputs)
    block, ar = trace["block"], trace["ar"]
    counts = block["counts"]
    assert trace["status"] == "done"
    assert max(c for row in counts for c in row) > 1  # some forward commits several tokens for a sample
    assert any(0 in row and max(row) > 0 for row in counts)  # someone waits while another commits
    assert block["forwards"] < ar["forwards"] == 32 and block["tokens"] == ar["tokens"] == 6 * 32
    assert [sum(row) for row in per_sample(counts)] == [len(i) for i in block["ids"]] == [32] * 6
    assert block["new_blocks"] == reference_new_blocks(counts, block["finished_at"], 4)
    for i, row in enumerate(per_sample(counts)):  # a sample waits only when it has filled its block
        for f, c in enumerate(row):
            if c == 0:
                filled = sum(row[:f])
                assert filled % 4 == 0 and filled >= 4 * (1 + sum(1 for s in block["new_blocks"] if s <= f))
    steps = ar["forwards"] / block["forwards"]
    assert f"**{steps:.2f} steps per forward**" in outputs[-1][2]
    assert outputs[-1][2].count("waiting at a block boundary") == 1


def test_the_slot_chart_is_a_heatmap_of_the_counts_with_block_lines():
    outputs = list(batch.batch_race(TEXT, 0.1, 4, 32, batch_state.BatchSession()))
    trace, plot = final(outputs), outputs[-1][1]
    assert plot.type == "plotly"
    fig = json.loads(plot.plot)
    heatmap = fig["data"][0]
    assert heatmap["type"] == "heatmap"
    ends = trace["block"]["finished_at"]
    expected = [[c if f <= end else None for f, c in enumerate(row)]  # blank once the sample is done
                for row, end in zip(per_sample(trace["block"]["counts"]), ends)]
    assert heatmap["z"] == expected and min(ends) < max(ends) == trace["block"]["forwards"] - 1
    assert heatmap["y"][0] == "1: Count from one to…" and heatmap["y"][2] == "3: hello"
    assert heatmap["colorscale"][0][1] == batch_html.WAIT_COLOUR != heatmap["colorscale"][2][1]
    assert [s["x0"] for s in fig["layout"]["shapes"]] == [f - 0.5 for f in trace["block"]["new_blocks"]]
    assert all(s["line"]["dash"] == "dot" for s in fig["layout"]["shapes"])


def test_slots_figure_blanks_finished_samples():
    counts = [[2, 1], [2, 1], [0, 1], [0, 1]]  # sample 0 filled its block (B = 4) after 2 forwards, then waited
    fig = batch_html.slots_figure(counts, ["1: a", "2: b"], 4, [4], [None, 2])
    assert fig["data"][0]["z"] == [[2, 2, 0, 0], [1, 1, 1, None]]
    assert fig["data"][0]["zmin"] == -0.5 and fig["data"][0]["zmax"] == 4.5
    assert fig["layout"]["shapes"][0]["x0"] == 3.5


def test_batch_run_records_waits_finishes_and_blocks(tiny):
    """Made-up events (B = 2): sample 0 fills block 0 first and waits, then ends early; sample 1 goes on alone."""
    tok = tiny[1]
    a, b, c, d, e, f, g, h, i = tok("red, green, blue. Apples are red and")["input_ids"][:9]
    forwards = [  # (token ids per sample, accepted_from per sample, done per sample)
        ([[a, b], [c]], [0, 0], [False, False]),
        ([[], [d]], [2, 1], [False, False]),  # sample 0 waits at the block boundary
        ([[e], [f, g]], [0, 0], [True, False]),  # new block; sample 0 ends (a stop token)
        ([[], [h]], [0, 0], [True, False]),  # new block: the finished sample's accepted_from stays 0
        ([[], [i]], [0, 1], [True, True]),  # mid-block: only the finished sample is at 0
    ]
    events = [
        StreamEvent(forward=n, elapsed=0.0, threshold=0.5, token_ids=ids, confidences=[[0.9] * len(x) for x in ids],
                    texts=[tok.decode(x) for x in ids], done=done, proposed_ids=ids, proposed_confidences=[],
                    accepted_from=starts)
        for n, (ids, starts, done) in enumerate(forwards)
    ]
    run = batch_state.BatchRun("MARS (block)", iter(events), tok, 2)
    for _ in range(6):
        run.advance()
    assert run.finished and run.counts == [[2, 1], [0, 1], [1, 2], [0, 1], [0, 1]]
    assert run.finished_at == [2, 4] and run.done() == [True, True]
    assert run.new_blocks() == [2, 3] == reference_new_blocks(run.counts, run.finished_at, 2)
    assert [run.waits(0), run.waits(1)] == [1, 0]  # after it finished, sample 0 is done, not waiting
    assert run.ids == [[a, b, e], [c, d, f, g, h, i]] and run.texts[0] == tok.decode([a, b, e])
    assert [chunk[0] for chunk in run.chunks[1]] == [0, 1, 2, 3, 4] and len(run.chunks[1][2][1]) == 2
    fig = batch_html.slots_figure(run.counts, ["1: x", "2: y"], 2, run.new_blocks(), run.finished_at)
    assert fig["data"][0]["z"] == [[2, 0, 1, None, None], [1, 1, 2, 1, 1]]


@pytest.mark.parametrize(
    "text, threshold, block_size, max_new, message",
    [
        ("\n".join(PROMPTS[:3]), 0.9, 4, 16, "Give 4 to 8 prompts, one per line; got 3"),
        ("\n".join(PROMPTS + PROMPTS[:3]), 0.9, 4, 16, "Give 4 to 8 prompts, one per line; got 9"),
        ("\n".join([*PROMPTS[:4], "x" * (inputs.MAX_PROMPT_CHARS + 1)]), 0.9, 4, 16, "Prompt 5 too long"),
        (TEXT, 1.5, 4, 16, "Threshold τ must be between 0.05 and 1, got 1.5."),
        (TEXT, 0.9, 0, 16, "Block size B must be between 1 and"),
        (TEXT, 0.9, 4, 0, "Max new tokens must be between 8 and"),
        (TEXT, 0.9, 4, batch.MAX_NEW_TOKENS + 1, "Max new tokens must be between 8 and"),
        ("\n".join([*PROMPTS[:3], "word " * 700]), 0.9, 4, 16, "prompt too long"),  # mars_core's context check
    ],
)
def test_bad_input_gives_one_error_frame_and_never_decodes(monkeypatch, text, threshold, block_size, max_new,
                                                            message):
    monkeypatch.setattr(batch, "stream", lambda *a, **k: pytest.fail("decoded despite a bad input"))
    session = batch_state.BatchSession()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no toast
        outputs = list(batch.batch_race(text, threshold, block_size, max_new, session))
    assert len(outputs) == 1
    panes, plot, stats, said, trace = outputs[0]
    assert trace["status"] == "error" and message in trace["message"]
    assert said.startswith("⚠") and message in said and said.count("⚠") == 1  # one message, on the message line
    assert all(isinstance(x, type(gr.skip())) for x in (panes, plot, stats))  # nothing on screen is wiped
    assert trace["block"] == trace["ar"] == trace["verified"] == {} and session.controls is None


def test_a_model_that_fails_to_load_gives_a_message(monkeypatch, tmp_path):
    monkeypatch.setattr(models, "CONFIG", models.AppConfig(model=str(tmp_path / "missing")))
    outputs = list(batch.batch_race(TEXT, 0.9, 4, 8, batch_state.BatchSession()))
    assert outputs[-1][TRACE]["status"] == "error"
    assert {o[TRACE]["status"] for o in outputs[:-1]} <= {"preparing"}  # the preparation, said while it runs
    assert "Could not load model" in outputs[-1][MESSAGE]


def test_stop_mid_run_ends_stopped_and_keeps_the_text():
    session = batch_state.BatchSession()
    running = batch.batch_race(TEXT, 0.9, 4, 200, session)
    before = [next(running) for _ in range(3)]
    assert models.TRACKER.active == 1 and len(session.controls) == 3
    batch_state.stop_batch(session)
    assert all(c.stopped for c in session.controls)
    rest = list(running)
    assert len(rest) == 1  # every batch ends before its next forward
    trace, kept = final(rest), before[-1][TRACE]
    assert trace["status"] == "stopped" and "stopped" in rest[0][2]
    assert trace["block"]["forwards"] == trace["ar"]["forwards"] == trace["verified"]["forwards"] == 3
    assert trace["block"]["texts"] == kept["block"]["texts"] and trace["ar"]["texts"] == kept["ar"]["texts"]
    tokens = [len(ids) for ids in trace["block"]["ids"]]
    assert min(tokens) >= 3 and tokens == [sum(row) for row in per_sample(trace["block"]["counts"])]
    assert all(f"MARS (block): {n} tokens" in rest[0][0] for n in tokens) and "· running" in rest[0][0]
    assert session.controls is None


def test_an_answer_ahead_of_ar_agrees_so_far(tiny):
    """Mid-run or stopped, the bold count of answers equal to AR's reads what is known of both: a sample ahead of AR's
    (verified commits several tokens a forward) agrees while AR's tokens are a prefix of it; one longer than AR's
    finished answer, or with another token, does not."""
    def made(ids: list[list[int]], finished_at: list) -> batch_state.BatchRun:
        run = batch_state.BatchRun("a side", iter(()), tiny[1], len(ids))
        run.ids, run.finished_at = ids, finished_at
        return run

    ar = made([[1, 2], [1, 2], [5], [1, 2, 3], [9]], [None, 3, None, 4, 1])
    ahead = made([[1, 2, 3, 4], [1, 2, 3], [6, 7], [1, 2], [9]], [None, None, 2, None, 1])
    assert batch_html.same_as_ar(ahead, ar) == [True, False, False, True, True]
    assert batch_html.answers_same(ahead, ar, 5) == [None] * 5  # the cells wait for both to finish


def test_stop_while_the_model_prepares_ends_the_batch_at_once(monkeypatch, loading_other):
    """Stop while the served model still prepares (minutes on a first start) ends the batch at its next look, its
    slot given back, without waiting for the preparation to end."""
    entered, _ = loading_other
    monkeypatch.setattr(models, "CONFIG", models.AppConfig(model="other"))
    session = batch_state.BatchSession()
    running = batch.batch_race(TEXT, 0.9, 4, 16, session)
    next(running)
    assert entered.wait(10)  # "other" is loading now, and stays so until released
    batch_state.stop_batch(session)
    began = time.monotonic()
    rest = list(running)
    assert time.monotonic() - began < 5 and final(rest)["status"] == "stopped"
    assert models.TRACKER.active == 0


def test_closing_a_half_consumed_run_gives_back_its_slot():
    session = batch_state.BatchSession()
    running = batch.batch_race(TEXT, 0.9, 4, 200, session)
    next(running)
    next(running)
    assert models.TRACKER.active == 1
    running.close()  # what Gradio's cancel does to the generator
    assert models.TRACKER.active == 0 and session.controls is None


def test_a_batch_waits_for_a_free_generation_slot_and_stays_stoppable(monkeypatch):
    monkeypatch.setattr(models, "CONFIG", models.AppConfig(model="tiny", concurrency=1))
    slot, session = models.slots(), batch_state.BatchSession()
    assert slot.acquire(timeout=5)  # another generation holds the only slot
    try:
        running = batch.batch_race(TEXT, 0.9, 4, 8, session)
        waiting = next(running)
        assert waiting[TRACE]["status"] == "waiting" and batch.WAITING in waiting[STATS]
        assert models.TRACKER.active == 0
        assert json.loads(waiting[1].plot)["data"][0]["y"][0] == "1: Count from one to…"
        batch_state.stop_batch(session)
        rest = list(running)
        assert [o[TRACE]["status"] for o in rest] == ["stopped"] and rest[0][TRACE]["block"] == {}
        assert session.controls is None
    finally:
        slot.release()


def test_a_waiting_batch_runs_once_the_slot_is_free(monkeypatch):
    monkeypatch.setattr(models, "CONFIG", models.AppConfig(model="tiny", concurrency=1))
    slot = models.slots()
    assert slot.acquire(timeout=5)
    running = batch.batch_race(TEXT, 0.9, 4, 8, batch_state.BatchSession())
    try:
        assert next(running)[TRACE]["status"] == "waiting"
    finally:
        slot.release()
    trace = final(list(running))
    assert trace["status"] == "done" and trace["block"]["tokens"] == trace["ar"]["tokens"] == 6 * 8
    assert slot.acquire(blocking=False)  # the batch gave its slot back
    slot.release()


def test_stop_without_a_run_does_nothing():
    session = batch_state.BatchSession()
    batch_state.stop_batch(session)
    assert session.controls is None


def test_panes_escape_prompts_and_show_a_placeholder():
    page = batch_html.panes_html(["<script>x</script>", "b", "c", "d"])
    assert "<script>" not in page and "&lt;script&gt;" in page and page.count("MARS (block)</div>") == 4
    assert "(the batch streams here)" in batch_html.panes_html([])
    assert batch_html.row_label(0, "one two three four five") == "1: one two three four…"
    assert batch_html.row_label(7, "short") == "8: short"
