"""The app's handlers called directly, on a tiny model registered in models.MODELS."""

from __future__ import annotations

import contextlib
import importlib
import json
import re
import threading
import time
import warnings
from pathlib import Path

import gradio as gr
import pytest
import torch

import app
from mars_core import generate, stream, training_attention_mask
from mars_core.serving import adaptive_threshold
from studio import explorer, inputs, lanes, models
from studio.race import figures as race_figures
from studio.race import html as race_html
from studio.race import loop as race_loop
from studio.race import state as race_state
from studio.race import tab as race
from studio.walkthrough import tab as walkthrough
from studio.walkthrough import verified as walk_verified

from tiny import tiny_qwen2

PROMPT = "Count from one to ten"


pytestmark = pytest.mark.usefixtures("served")  # tests/studio/conftest.py: the tiny model, served


# race's outputs, in order
OUT = ("ar", "mars", "verified", "forwards", "time", "acceptance", "stats", "message", "trace")


def part(frame: tuple, name: str):
    return frame[OUT.index(name)]


def marked(page: str) -> list[str]:
    """Tokens outlined as the first departure from AR (class dep)."""
    return re.findall(r'class="[^"]*\bdep\b[^"]*"', page)


def final(outputs: list) -> dict:
    return part(outputs[-1], "trace")


def test_race_streams_every_lane_and_tau_one_is_ar():
    session = race_state.RaceSession()
    outputs = list(race.race(PROMPT, 1.0, 4, 0.0, 40, False, session))
    assert len(outputs) >= 20  # one update per forward of each lane
    trace = final(outputs)
    assert trace["status"] == "done"
    assert trace["ar"]["text"] == trace["mars"]["text"] == trace["verified"]["text"]  # τ = 1 and verified: AR
    assert set(trace["mars"]["counts"]) == set(trace["ar"]["counts"]) == {1}
    assert trace["mars"]["tokens"] == trace["ar"]["tokens"] == trace["verified"]["tokens"] == 40
    assert trace["departs_at"] == {"mars": None, "verified": None}
    ar_html, mars_html, verified_html, forwards_plot, time_plot, _, stats, message, _ = outputs[-1]
    assert message == ""
    assert ar_html.count("forward ") >= 40 and "done" in mars_html and "done" in verified_html
    plot = json.loads(forwards_plot.plot)
    assert forwards_plot.type == "plotly" and {d["name"] for d in plot["data"]} == {
        "MARS τ", "MARS verified", "AR", "τ (MARS τ lane)"}
    assert plot["layout"]["yaxis2"]["domain"][1] < plot["layout"]["yaxis"]["domain"][0]  # τ in its own panel
    assert "same answer as AR, 1.00× fewer forwards" in stats and "40 forwards" in stats and "in force 1.00" in stats
    assert "τ in force 1.00" in mars_html and "τ in force" not in ar_html  # on the lane it governs
    assert "Measured on this shared CPU" in stats and "**" not in stats.split("Measured")[1]  # wall-clock: not bold
    times = trace["mars"]["times"]
    assert times == sorted(times) and trace["mars"]["seconds"] == pytest.approx(times[-1])
    assert session.mars is None and session.ar is None and session.verified is None


def test_acceptance_by_draft_position_counts_only_drafts_that_were_checked():
    """(drafts checked, matched) per forward: d_a counts as checked once every draft before it matched."""
    run = race_state.Run("MARS verified", iter(()), None, counts=[1, 3, 1, 4, 2],
                         checks=[(3, 2), (3, 0), (3, 3), (2, 1)])
    acc = race_state.acceptance(run)
    assert acc["forwards_checking"] == 4 and acc["mean_accepted"] == 1.5 and acc["tokens_per_forward"] == 2.2
    assert [(p["checked"], p["matched"]) for p in acc["positions"]] == [(4, 3), (3, 2), (2, 1)]
    assert acc["positions"][0]["rate"] == 0.75
    plot = race_figures.acceptance_figure(run)
    assert plot["data"][0]["x"] == ["d1", "d2", "d3"] and plot["data"][0]["text"] == ["3/4", "2/3", "1/2"]
    assert "mean accepted length 1.50 drafts<br>per forward that checked drafts (4 forwards) · 2.20 tokens per " \
        "forward" in plot["layout"]["title"]["text"]
    assert race_state.acceptance(None)["positions"] == [] and "no drafts checked yet" in json.dumps(
        race_figures.acceptance_figure(None))


def test_the_race_reports_the_verified_lanes_acceptance_live():
    outputs = list(race.race(PROMPT, 0.9, 4, 0.0, 40, False, race_state.RaceSession()))
    acc = final(outputs)["acceptance"]
    trace = final(outputs)
    assert acc["forwards_checking"] >= 1 and acc["drafts_checked"] == trace["verified"]["drafted"]
    assert acc["mean_accepted"] * acc["forwards_checking"] == trace["verified"]["matched"]
    assert acc["tokens_per_forward"] == trace["verified"]["tokens_per_forward"]
    first = acc["positions"][0]
    assert first["checked"] == acc["forwards_checking"]  # d_1 is checked in every forward that checks drafts
    charts = [part(frame, "acceptance") for frame in outputs[:-1]]
    assert any(hasattr(c, "plot") for c in charts)  # live: drawn while the race runs (with the other charts)
    assert json.loads(part(outputs[-1], "acceptance").plot)["data"][0]["x"][0] == "d1"


def test_a_departure_from_ar_is_said_and_marked():
    """At a low τ the random tiny model's MARS answer leaves AR's: the headline says where, not a bold speedup,
    and the MARS pane outlines that token; the verified lane keeps AR's answer."""
    trace = final(outputs := list(race.race(PROMPT, 0.05, 4, 0.0, 40, False, race_state.RaceSession())))
    k = trace["departs_at"]["mars"]
    assert k is not None and trace["mars"]["ids"][:k] == trace["ar"]["ids"][:k]
    assert trace["mars"]["ids"][k : k + 1] != trace["ar"]["ids"][k : k + 1]
    assert trace["departs_at"]["verified"] is None and trace["verified"]["ids"] == trace["ar"]["ids"]
    stats = part(outputs[-1], "stats")
    assert f"departs from AR's answer at token {k + 1}" in stats and "same answer as AR" in stats
    assert len(marked(part(outputs[-1], "mars"))) == 1
    assert not marked(part(outputs[-1], "verified"))


def test_threshold_change_acts_on_the_running_generation():
    session = race_state.RaceSession()
    # long enough that the scheduler's thread, running ahead of the page, cannot end the lane before the change
    running = race.race(PROMPT, 1.0, 4, 0.0, 200, False, session)
    for _ in range(4):
        next(running)
    race.set_threshold(0.05, session)
    trace = final([*running])
    taus, counts = trace["mars"]["thresholds"], trace["mars"]["counts"]
    # from the lane's next forward on (where lanes share forwards, the scheduler may have run a few past the page)
    changed = taus.index(0.05)
    assert changed >= 4 and set(taus[:changed]) == {1.0} and set(taus[changed:]) == {0.05}
    assert set(counts[:changed]) == {1} and max(counts[changed:]) > 1
    assert session.threshold == 0.05


def test_a_threshold_change_is_marked_on_the_lane_it_governs():
    """Where τ changed, the MARS τ lane says so: a chip in its text at the forward that first used the new τ, and
    the change in the line under its counters (not on the AR lane)."""
    session = race_state.RaceSession()
    # long enough that the scheduler's thread, running ahead of the page, cannot end the lane before the change
    running = race.race(PROMPT, 1.0, 4, 0.0, 200, False, session)
    for _ in range(4):
        next(running)
    race.set_threshold(0.05, session)
    last = [*running][-1]
    taus = part(last, "trace")["mars"]["thresholds"]
    k = taus.index(0.05)
    mars = part(last, "mars")
    assert f"τ 1.00 → 0.05 from forward {k + 1}" in mars and mars.count('class="tau-mark"') == 1
    assert "τ→0.05" in mars and "τ→" not in part(last, "ar") and "τ in force" not in part(last, "verified")
    chip = mars.index('class="tau-mark"')
    assert mars[:chip].count('class="tk') == sum(part(last, "trace")["mars"]["counts"][:k])  # before its forward


def test_the_verified_lanes_draft_counts_add_up():
    """fed = matched + first mismatches + not compared, and the acceptance bars count the compared ones."""
    outputs = list(race.race(PROMPT, 0.9, 4, 0.0, 64, False, race_state.RaceSession()))
    trace = part(outputs[-1], "trace")
    positions = trace["acceptance"]["positions"]
    compared = sum(p["checked"] for p in positions)
    matched = sum(p["matched"] for p in positions)
    assert trace["verified"]["drafted"] >= compared and matched == trace["verified"]["matched"]
    stats, pane = part(outputs[-1], "stats"), part(outputs[-1], "verified")
    fed, unread = trace["verified"]["drafted"], trace["verified"]["drafted"] - compared
    assert f"{fed} drafts fed, {compared} compared, {matched} matched" in stats
    assert f"{fed} drafts fed: {matched} matched, {compared - matched} mismatched" in pane
    assert (f"{unread} not compared" in pane) == (unread > 0)


def test_the_verified_lanes_promise_is_said_in_one_place():
    assert race_html.verified_guarantee(True) == "identical to one-token decoding"
    assert race_html.verified_guarantee(False) == "identical up to rounding"
    assert "identical up to rounding" in race_html.pane_html(None, key="verified")
    assert "identical to one-token decoding" in race_html.pane_html(None, key="verified", exact=True)
    assert "AR's answer" not in race_html.pane_html(None, key="verified", exact=True)


def test_the_verified_lane_says_what_this_machines_runtime_passed(served, monkeypatch):
    """The lane's title follows the served model's runtime: "identical to one-token decoding" where its width check
    passed on this machine (a prepared runtime), "up to rounding" under a plain one."""
    from mars_core import DecodeControl
    from mars_core.runtime import ATTENTION, prepare

    from tiny import tiny_qwen2, tiny_tokenizer

    def title() -> str:
        controls = {k: DecodeControl(threshold=t) for k, t in (("ar", 1.0), ("mars", 0.9), ("verified", 0.3))}
        frames = list(race_loop.run_race("Count to five.", 4, 8, controls, race_state.RaceSession()))
        return frames[-1][2]  # the verified lane's pane

    assert "identical up to rounding" in title()  # registered without a runtime: plain torch, nothing promised
    tok = tiny_tokenizer(mask_token=True)
    model = tiny_qwen2(len(tok), attn_implementation=ATTENTION)
    monkeypatch.setitem(models.MODELS, "tiny", (model, tok))
    monkeypatch.setitem(models.RUNTIMES, "tiny", prepare(model, measure_cost=False))
    assert models.get_runtime("tiny").invariant and "identical to one-token decoding" in title()
    keep: dict = {}  # under a static runtime (--static-shapes) the race runs the static decoders, verified still AR's
    monkeypatch.setitem(models.RUNTIMES, "tiny", prepare(model, measure_cost=False, static=True))
    controls = {k: DecodeControl(threshold=t) for k, t in (("ar", 1.0), ("mars", 0.9), ("verified", 0.3))}
    list(race_loop.run_race("Count to five.", 4, 8, controls, race_state.RaceSession(), keep=keep))
    assert keep["verified"].ids == keep["ar"].ids and keep["exact"]


def test_the_models_preparation_is_said_step_by_step(monkeypatch, tmp_path, caplog):
    """Preparing a model goes through named steps (a model folder: one, loading and timing); while it runs the page's
    line says the step, its number and its seconds, and the log says each step; once loaded, nothing is said."""
    build = lambda: [models.BUILD] if models.rows.must_build() else []  # noqa: E731 - our kernel, not yet in the cache
    assert [what for what, _ in models.stages(str(tmp_path))] == [*build(), models.LOAD, models.PREPARE]
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setenv("MARS_CACHE", str(tmp_path / "cache"))
    assert [what for what, _ in models.stages(str(gguf))] == [models.CONVERT, *build(), models.LOAD, models.PREPARE]
    monkeypatch.setattr(models, "CONFIG", models.AppConfig(model="slow"))
    prep = models.Preparation([models.CONVERT, models.LOAD])
    monkeypatch.setitem(models.PREPARING, "slow", prep)
    with caplog.at_level("INFO", logger="mars_studio"):
        prep.enter("slow", 1)
    text, ready = models.status_markdown()
    assert not ready and "Preparing `slow`: step 2 of 2, loading the weights" in text and "s in all" in text
    assert "preparing model slow: step 2 of 2: loading the weights" in caplog.text
    prep.error = "no such file"
    assert "could not be prepared: no such file" in models.status_markdown()[0]
    monkeypatch.setitem(models.MODELS, "slow", models.MODELS["tiny"])
    assert models.status_markdown() == ("", True)


def test_our_kernel_builds_beside_the_first_step(monkeypatch, tmp_path):
    """Where our rows kernel must still be built, the first step (converting a GGUF file) starts its build in the
    background first, so the compiler runs beside the conversion; the BUILD step then waits for what is left of it.
    Where it is built, the first step is the conversion alone."""
    loading = importlib.import_module("mars_core.load")
    done: list[str] = []
    monkeypatch.setattr(loading, "build_rows_kernel_meanwhile", lambda device: done.append("build"))
    monkeypatch.setattr(loading, "convert_gguf", lambda path: done.append("convert"))
    monkeypatch.setenv("MARS_CACHE", str(tmp_path / "cache"))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    for must in (True, False):
        monkeypatch.setattr(models.rows, "must_build", lambda: must)
        steps = models.stages(str(gguf))
        assert [what for what, _ in steps] == [models.CONVERT, *([models.BUILD] if must else []), models.LOAD,
                                               models.PREPARE]
        done.clear()
        steps[0][1]()
        assert done == (["build", "convert"] if must else ["convert"])


def test_bad_threshold_from_the_slider_is_refused_with_one_message():
    session = race_state.RaceSession()
    said = race.set_threshold(1.7, session)  # one message for the message line: no toast, no traceback
    assert said == "⚠ Threshold τ must be between 0.05 and 1, got 1.7." and session.threshold == 0.9
    # the Run that follows with the same typed value says the same, on the same line, touching nothing else
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no toast (gr.Warning) anywhere
        outputs = list(race.race(PROMPT, 1.7, 4, 0.0, 8, False, session))
    assert len(outputs) == 1 and final(outputs)["status"] == "error"
    assert part(outputs[0], "message") == said and final(outputs)["message"] == said
    assert all(isinstance(part(outputs[0], k), type(gr.skip())) for k in OUT[:7])  # nothing on screen is wiped
    assert race.set_threshold(0.5, session) == "" and session.threshold == 0.5  # a good value clears it


def test_the_page_hands_typed_values_to_the_handlers():
    """The browser clamps a typed value to the slider's range: the page script keeps what was typed, and the Run's
    js step passes it on (so the server's check speaks). Checked in a browser in tests/studio/test_browser.py."""
    page = inputs.page_js()
    assert all(f'"{elem}"' in page for elem in inputs.WATCHED) and "marsTyped" in page
    assert "delete typed[id]" in inputs.typed_js(["race-threshold"], True)
    assert "delete typed[id]" not in inputs.typed_js(["race-threshold"], False)
    assert "return null" in inputs.typed_js(["race-threshold"], False)  # a change mid-typing: nothing to check yet
    assert "return null" not in inputs.typed_js(["race-threshold"], True)  # a Run checks what the box shows


def test_a_threshold_still_being_typed_changes_nothing():
    session = race_state.RaceSession()
    said = race.set_threshold(None, session)  # what the page sends for "0" on the way to "0.3"
    assert session.threshold == 0.9 and isinstance(said, type(gr.skip()))


def test_adapt_to_load_lowers_the_threshold_in_force():
    session = race_state.RaceSession()
    with models.TRACKER, models.TRACKER:  # two other generations are running
        outputs = list(race.race(PROMPT, 0.9, 4, 0.0, 12, True, session))
    expected = adaptive_threshold(0.9, 3)
    assert set(final(outputs)["mars"]["thresholds"]) == {expected}
    stats = part(outputs[-1], "stats")
    assert f"τ in force {expected:.2f}" in stats and "adapting to load" in stats
    assert f"τ in force {expected:.2f}" in part(outputs[-1], "mars")


def test_adapt_switch_acts_mid_run():
    session = race_state.RaceSession()
    with models.TRACKER, models.TRACKER, models.TRACKER:
        running = race.race(PROMPT, 0.9, 4, 0.0, 200, False, session)  # as above: the change comes before its end
        for _ in range(3):
            next(running)
        race.set_adapt(True, session)
        taus = final([*running])["mars"]["thresholds"]
    changed = taus.index(adaptive_threshold(0.9, 4))  # from the lane's next forward (the scheduler's may run ahead)
    assert changed >= 3 and set(taus[:changed]) == {0.9} and set(taus[changed:]) == {adaptive_threshold(0.9, 4)}


def test_stop_ends_both_runs_before_their_next_forward():
    session = race_state.RaceSession()
    running = race.race(PROMPT, 0.9, 4, 0.0, 500, False, session)
    for _ in range(3):
        next(running)
    race.stop(session)
    rest = list(running)
    assert len(rest) <= 1
    trace = final(rest) if rest else None
    assert trace is None or trace["status"] == "stopped"
    assert session.mars is None


def test_a_lane_that_finished_before_stop_reads_done_the_others_stopped():
    """Stop pressed after the MARS τ lane finished its answer (a low τ: several tokens a forward) but before AR did:
    the race is stopped, AR's footer says so, and the τ lane's says done (it was not cut short)."""
    session = race_state.RaceSession()
    running = race.race(PROMPT, 0.05, 4, 0.0, 16, False, session)
    out = next(running)
    while final([out])["mars"].get("tokens", 0) < 16:
        out = next(running)
    assert final([out])["ar"]["tokens"] < 16, "AR finished as early: nothing to tell apart"
    race.stop(session)
    last = [out, *running][-1]
    assert final([last])["status"] == "stopped"
    assert "done · 16 tokens" in part(last, "mars") and "stopped · " in part(last, "ar")


def test_a_cancelled_race_gives_back_its_load_slot():
    session = race_state.RaceSession()
    running = race.race(PROMPT, 0.9, 4, 0.0, 500, False, session)
    next(running)
    next(running)
    assert models.TRACKER.active == 1
    running.close()  # what Gradio's cancel does to the generator
    assert models.TRACKER.active == 0 and session.mars is None


@pytest.mark.parametrize(
    "args, message",
    [
        (("", 0.9, 4, 0.0, 10), "Empty prompt"),
        (("   ", 0.9, 4, 0.0, 10), "Empty prompt"),
        (("x" * (inputs.MAX_PROMPT_CHARS + 1), 0.9, 4, 0.0, 10), "Prompt too long"),
        ((PROMPT, 0.0, 4, 0.0, 10), "Threshold τ must be between 0.05 and 1, got 0."),
        ((PROMPT, 1.5, 4, 0.0, 10), "Threshold τ must be between 0.05 and 1, got 1.5."),
        ((PROMPT, "abc", 4, 0.0, 10), "Threshold τ must be a number"),
        ((PROMPT, float("nan"), 4, 0.0, 10), "Threshold τ must be a number"),
        ((PROMPT, 0.9, 0, 0.0, 10), "Block size B must be between 1 and 16, got 0."),
        ((PROMPT, 0.9, 2.5, 0.0, 10), "whole number"),
        ((PROMPT, 0.9, 4, -1.0, 10), "Temperature must be between 0 and 2, got -1."),
        ((PROMPT, 0.9, 4, 0.0, 4), "Max new tokens must be between 8 and 512, got 4."),  # the slider's own range
        ((PROMPT, 0.9, 4, 0.0, inputs.MAX_NEW_TOKENS + 1), "Max new tokens must be between 8 and 512"),
        ((PROMPT, 0.9, 4, 0.0, None), "must be a number"),
        (("word " * 700, 0.9, 4, 0.0, 512), "prompt too long"),  # mars_core's context check
    ],
)
def test_bad_input_yields_a_message_not_a_traceback(args, message):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no toast
        outputs = list(race.race(*args, False, race_state.RaceSession()))
    said = part(outputs[-1], "message")
    assert part(outputs[-1], "trace")["status"] == "error"
    assert message in said and said.startswith("⚠") and said.count("⚠") == 1
    assert all(isinstance(part(outputs[-1], k), type(gr.skip())) for k in OUT[:7])  # one message, nothing wiped


def test_a_model_that_fails_to_load_gives_a_message(monkeypatch, tmp_path):
    monkeypatch.setattr(models, "CONFIG", models.AppConfig(model=str(tmp_path / "missing")))
    outputs = list(race.race(PROMPT, 0.9, 4, 0.0, 10, False, race_state.RaceSession()))
    assert "Could not load model" in part(outputs[-1], "message") and final(outputs)["status"] == "error"
    assert str(tmp_path / "missing") not in models.MODELS  # a failure is not cached: a retry tries again


def test_models_load_once_per_name(monkeypatch, tiny):
    calls = []
    monkeypatch.setattr(models, "load", lambda name=None: calls.append(name) or tiny)
    monkeypatch.delitem(models.MODELS, "other", raising=False)
    assert models.get_model("other") is models.get_model("other")
    assert calls == ["other"]
    del models.MODELS["other"]


def test_a_race_on_a_ready_model_starts_while_another_model_loads(loading_other):
    """The app prepares the Train tab's base model at start (up to a minute on a first start): a race on the served
    model neither waits for it nor blocks it (the generation slots and schedulers are found under a lock of their own,
    never the one a model's preparation holds)."""
    entered, _ = loading_other
    loading = threading.Thread(target=models.get_model, args=("other",), daemon=True)
    loading.start()
    assert entered.wait(10)  # "other" is loading now, and stays so until released
    began = time.monotonic()
    trace = final(list(race.race(PROMPT, 0.9, 4, 0.0, 8, False, race_state.RaceSession())))
    assert trace["status"] == "done" and time.monotonic() - began < 20 and loading.is_alive()


@pytest.mark.parametrize("batching", [True, False], ids=["shared-forwards", "own-forwards"])
def test_separate_ar_model(monkeypatch, tiny, batching):
    """--ar-model: the AR lane decodes that model (its answer is one-token decoding of it alone), the MARS lanes the
    served one, whether lanes share forwards with other visitors' (the scheduler of each model) or not."""
    other = tiny_qwen2(len(tiny[1]), seed=7, max_position_embeddings=1024), tiny[1]
    monkeypatch.setitem(models.MODELS, "ar-tiny", other)
    monkeypatch.setitem(models.SCHEDULERS, "ar-tiny", None)  # the scheduler made for it goes with the test
    monkeypatch.setattr(models, "CONFIG", models.AppConfig(model="tiny", ar_model="ar-tiny", batching=batching))
    trace = final(list(race.race(PROMPT, 1.0, 4, 0.0, 16, False, race_state.RaceSession())))
    own = [generate(m, tok, PROMPT, strategy="ar", max_new_tokens=16).texts[0] for m, tok in (other, tiny)]
    assert own[0] != own[1]  # two models, two answers
    assert [trace["ar"]["text"], trace["mars"]["text"]] == own
    assert "ar-tiny" in app.intro_markdown()


def test_sessions_do_not_share_settings_or_text():
    alone = [final(list(race.race(p, 0.3, 4, 0.0, 24, False, race_state.RaceSession()))) for p in (PROMPT, "hello")]
    a_session, b_session = race_state.RaceSession(), race_state.RaceSession()
    a = race.race(PROMPT, 0.3, 4, 0.0, 24, False, a_session)
    b = race.race("hello", 0.3, 4, 0.0, 24, False, b_session)
    outs_a, outs_b = [], []
    for out_a, out_b in zip(a, b):  # interleaved, as two users at once
        outs_a.append(out_a)
        outs_b.append(out_b)
        if len(outs_a) == 2:
            race.set_threshold(0.3, a_session)  # touches session a only
    outs_a += list(a)
    outs_b += list(b)
    assert b_session.threshold == 0.3 and a_session is not b_session
    for solo, together in zip(alone, (final(outs_a), final(outs_b))):
        assert solo["mars"]["text"] == together["mars"]["text"]
        assert solo["mars"]["counts"] == together["mars"]["counts"]


def test_pane_html_escapes_and_colours_by_tokens_per_forward(tiny):
    run = race_state.Run("MARS", iter(()), tiny[1])
    run.chunks = [(0, ["<script>"], [0.2], ""), (1, ["a", "b", "c"], [0.9, 0.95, 0.99], " · 2 of 3 drafts")]
    page = race_html.pane_html(run, "done")
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert f'class="tk {lanes.count_class(1)} fs ls low"' in page  # one token, confidence 0.2 < 0.5: dotted
    assert f'class="tk {lanes.count_class(3)} fs"' in page and f'class="tk {lanes.count_class(3)} ls"' in page
    for k, (_, colour, _) in enumerate(lanes.COUNT_COLOURS):  # each class is the colour of its count
        assert f".n{k}{{background:{colour}}}" in lanes.PANE_CSS
    assert "forward 1 · 3 tokens · confidence 0.95 · 2 of 3 drafts" in page
    assert not marked(page) and len(marked(race_html.pane_html(run, "done", depart=2))) == 1
    colours = [c for _, c, _ in lanes.COUNT_COLOURS]
    assert [lanes.count_colour(n) for n in (1, 2, 3, 4, 5, 8, 9, 16)] == [
        colours[0], colours[1], colours[2], colours[3], colours[4], colours[4], colours[5], colours[5]]


@pytest.mark.parametrize("n, block", [(1, 1), (5, 2), (8, 4), (9, 4), (16, 8), (6, 16)])
def test_mask_colours_follow_the_rules_and_agree_with_the_mask(n, block):
    cats = walkthrough.mask_categories(n, block)
    assert torch.equal(training_attention_mask(n, block), cats > 0)  # the rule colours are mars_core's mask
    fig = walkthrough.mask_figure(n, block)
    assert fig.data[0].z is not None
    assert (cats[n:, :n] == 0).all()  # clean -> noisy: never
    for q in range(n):
        for k in range(n):
            assert bool(cats[n + q, n + k] == 1) == (k <= q)
            assert bool(cats[q, k] == 2) == (k <= q and k // block == q // block)
            assert bool(cats[q, n + k] == 3) == (k // block < q // block)


def test_walkthrough_steps_show_inputs_proposals_and_verdicts():
    page, walk = walkthrough.walk_decode(PROMPT, 0.3, 4, 16)
    steps = walk.steps
    assert steps and walk.index == 0 and "Forward 1 of" in page
    assert sum(s["accepted"] for s in steps) == 16
    for s in steps:
        assert len(s["proposals"]) == len(s["confidences"]) == 4
        assert s["start"] == 0 and 1 <= s["accepted"] <= 4
        accepted = [walkthrough.verdict(s, j).startswith("✓") for j in range(4)]
        assert accepted == [j < s["accepted"] for j in range(4)]
        assert all(c >= 0.3 for c in s["confidences"][1:s["accepted"]])
    second, walk2 = walkthrough.walk_move(walk, 1)
    assert walk2.index == 1 and "Forward 2 of" in second and second.count("[MASK]") == 3
    assert walkthrough.walk_move(walk, -5)[1].index == 0
    assert walkthrough.walk_move(walk, 10**6)[1].index == len(steps) - 1
    assert "Decode" in walkthrough.walk_move(walkthrough.Walk(), 1)[0]


def test_walkthrough_at_tau_one_commits_one_token_per_forward():
    page, walk = walkthrough.walk_decode(PROMPT, 1.0, 3, 6)
    assert [s["accepted"] for s in walk.steps] == [1] * 6
    assert all(s["masks"] == 0 and len(s["proposals"]) == 1 for s in walk.steps)  # τ = 1 feeds no masks
    assert "no mask tokens" in page and "[MASK]" not in page


@pytest.mark.parametrize("pending, drafts, groups, fed, siblings", [
    (5, 0, (0,), [True] * 8, ()), (1, 3, (0, 1), [True] * 10, ()), (1, 4, (0, 1, 2, 4), [True] * 17, ()),
    (2, 3, (0, 2, 3), [False, True, True, True, False] + [True] * 6 + [False] * 3, ()), (1, 0, (), [True], ()),
    (1, 3, (0, 1), [True] * 18, (1, 3)), (2, 3, (0,), [False] + [True] * 7 + [False] * 4 + [True] * 4, (1, 2))])
def test_tree_colours_follow_the_rules_and_agree_with_the_decoders_template(pending, drafts, groups, fed, siblings):
    """The walkthrough's rule colours, written from the rule text, against the decoder's own tree_template and what
    its forward sees of it (runtime.visible: a slot not fed is seen by none but itself), siblings and their groups
    included."""
    from mars_core.decoding.feed import tree_template
    from mars_core.runtime import visible

    cats = walk_verified.tree_categories(pending, drafts, list(groups), 3, fed, list(siblings))
    mask = visible(tree_template(pending, drafts, groups, 3, siblings), torch.tensor([fed]))
    assert torch.equal(cats > 0, mask[0])
    if drafts and len(groups) > 1:  # G_j's first mask sees the pending tokens and d_1..d_j, nothing after
        row = pending + drafts + 3
        assert cats[row, pending + groups[1] - 1] == 5 and cats[row, pending + groups[1] : pending + drafts].sum() == 0
    if siblings and fed[-4]:  # the last sibling e_a sees d_1..d_{a-1}, not d_a, and its group's masks see e_a
        e, a = len(fed) - 4, siblings[-1]
        assert cats[e, pending + a - 2] == (8 if a > 1 else 0) and cats[e, pending + a - 1] == 0
        assert cats[e + 3, e] == 9 and cats[e + 3, pending + a - 1] == 0


def test_verified_walkthrough_draws_the_mask_the_decoder_fed(tiny):
    """Every forward of the verified walkthrough, drawn from the decoder's records: the drawn mask equals the mask
    the model got (captured at the model's decoder), cell for cell, the cache as one column every slot sees."""
    model, _ = tiny
    fed = []
    hook = model.get_decoder().register_forward_pre_hook(
        lambda m, a, k: fed.append(k["attention_mask"][0, 0].clone()), with_kwargs=True)
    try:
        page, fig, walk = walk_verified.walk_verified(PROMPT, 0.05, 4, 32)
    finally:
        hook.remove()
    steps = walk.steps
    assert len(steps) == len(fed) > 5 and "Forward 1 of" in page and "the mask it fed" in fig.layout.title.text
    for s in steps:  # the rule colours are the decoder's recorded mask, cell for cell
        assert torch.equal(walk_verified.step_categories(s) > 0, torch.tensor(s["mask"], dtype=torch.bool))
    for index, mask in enumerate(fed):
        view, figure, _ = walk_verified.verified_move(walkthrough.Walk(steps, 0), index)
        z = torch.tensor(figure.data[0].z)
        cache, width = steps[index]["cache"], mask.shape[0]  # one sample: column c written at slot cache + c
        assert not mask[:, cache + width :].any()  # the slots past the forward: scratch, seen by none
        if cache:
            seen = mask[:, :cache]
            assert bool(seen.all())  # one column loses nothing: every fed slot sees the whole cache
            assert bool((z[:, 0] == 1).all())
            z = z[:, 1:]
        assert torch.equal(z > 0, mask[:, cache : cache + width]), f"forward {index + 1}"
        assert f"Forward {index + 1} of {len(steps)}" in view
    assert sum(len(s["committed"]) for s in steps) == 32
    assert "".join(t for s in steps for t in s["committed"]) == "".join(
        e.texts[0] for e in stream(model, walkthrough.models.get_model("tiny")[1], PROMPT, strategy="ar",
                                   max_new_tokens=32))  # verified: AR's answer


def test_verified_walkthrough_explains_checks_groups_and_lookup():
    """Each forward says what it fed, how each draft fared, which group proposes the next drafts, why groups were
    not fed (the odds the decoder computed), and when prompt lookup's chain was checked instead."""
    page, fig, walk = walk_verified.walk_verified(PROMPT, 0.05, 4, 32)
    steps = walk.steps
    pages = [walk_verified.verified_move(walk, i)[0] for i in range(len(steps))]
    assert "The prefill" in pages[0] and "G<sub>0</sub>" in pages[0]
    for s, view in zip(steps, pages):
        if s["drafts"]:
            assert view.count("✓ d<sub>") == s["m"] - s["by_sibling"]  # one ✓ per matched draft on the chain
            # the first mismatch, when there was one (where a sibling matched, there it is)
            assert ("✗ d<sub>" in view) == (s["m"] - s["by_sibling"] < s["drafts"])
            assert ("but its sibling e<sub>" in view) == s["by_sibling"]
        assert "the bonus" in view or "one token" in view
    unfed = [(s, v) for s, v in zip(steps, pages) if s["drafts"] and len(s["groups"]) < s["drafts"] + 1]
    assert unfed and all("✗ not fed" in v for _, v in unfed)  # why: P(exactly j match), the decoder's own odds
    s, view = unfed[0]
    missing = next(j for j in range(s["drafts"] + 1) if j not in s["groups"])
    assert f"{walk_verified.percent(s['chosen_odds'][missing])}</td><td" in view
    assert any("Prompt lookup instead" in v for v in pages)
    assert any(s["source"] == "lookup" and "from prompt lookup" in v for s, v in zip(steps, pages))
    assert "G<sub>" in walk_verified.verified_move(walk, 1)[0]
    for s, view in zip(steps, pages):  # plain words: what the cache holds, what was fed, what "pending" is
        assert f"Already in the cache:</b> {s['cache']} token" in view and f"Fed in this forward: {s['width']} token" \
            in view and "committed tokens that are not in the cache" in view
    assert all("less likely than the floor" in v or "would cost more time" in v for _, v in unfed)  # why not fed


def test_the_tree_masks_axis_labels_stay_readable_at_any_prompt_length():
    """The first forward feeds the whole prompt: its labels are thinned so they do not overlap; the tree's own slots
    (drafts, masks) and the last pending token always keep theirs."""
    labels = [f"t{i}" for i in range(300)] + ["d1 a", "d2 b", "G0·m1", "G0·m2"]
    shown = walk_verified.readable_ticks(labels, False, 300)
    assert len(shown) <= walk_verified.MAX_TICKS + 4 and shown == sorted(set(shown))
    assert {299, 300, 301, 302, 303} <= set(shown) and 0 in shown
    assert walk_verified.readable_ticks(["cache (9 tokens)", "a", "b"], True, 1) == [0, 1, 2]  # short: all shown
    page, fig, walk = walk_verified.walk_verified("word " * 200, 0.3, 4, 8)
    assert len(fig.layout.xaxis.tickvals) <= walk_verified.MAX_TICKS + 1 + 4 * 4


def test_verified_walkthrough_draws_and_explains_siblings(tokenizer):
    """A model whose mask slots really draft, every sibling fed: the forwards where a sibling matched say so (the
    draft that missed, the sibling that matched, the bonus read after it, H_m proposing the next drafts), and the
    drawn mask, siblings and their groups included, is the mask the decoder fed."""
    from mars_core import TreeLayout
    from mars_core.runtime import prepare

    from trained import ANSWERS, mars_trained

    model = mars_trained("qwen2", tokenizer)
    runtime = prepare(model, measure_cost=False)  # trees sized without a timed curve: the same on a loaded machine
    records, steps = [], []
    for text in ["Count from one to ten, please", "List three colours and a fruit", *ANSWERS]:
        first = len(records)
        for event in stream(model, tokenizer, text, strategy="verified", threshold=0.3, max_new_tokens=40,
                            layout=TreeLayout(sibling_floor=0.0), record=records.append, runtime=runtime):
            before = records[-2] if len(records) - first > 1 else None
            steps.append(walk_verified.verified_step(tokenizer, records[-1], before, event, "", 3))
    took = [i for i, s in enumerate(steps) if s["by_sibling"]]
    assert took and any(s["siblings"] for s in steps)
    for s in steps:  # the rule colours, siblings and their groups included, are the decoder's recorded mask
        assert torch.equal(walk_verified.step_categories(s) > 0, torch.tensor(s["mask"], dtype=torch.bool))
    for i in took:
        view, figure, _ = walk_verified.verified_move(walkthrough.Walk(steps, i), 0)
        assert "but its sibling e<sub>" in view and "the bonus: the model's token after e<sub>" in view
        assert f"H<sub>{steps[i]['m']}</sub>, hung after the sibling" in view or steps[i]["done"]
        assert torch.equal(torch.tensor(figure.data[0].z)[:, 1:] > 0, records[i].seen[0])
    assert any(f"e{a}" in " ".join(walk_verified.axis_labels(s)) for s in steps for a in s["siblings"])


def test_verified_walkthrough_bad_input():
    page, fig, walk = walk_verified.walk_verified("", 0.3, 4, 8)
    assert "Empty prompt" in page and walk.steps == [] and "Press Decode verified" in fig.layout.title.text
    assert "Press <b>Decode verified</b>" in walk_verified.verified_move(walkthrough.Walk(), 1)[0]


def test_walkthrough_bad_input():
    page, walk = walkthrough.walk_decode("", 0.9, 4, 8)
    assert "Empty prompt" in page and walk.steps == []


def test_walkthrough_and_sweep_wait_for_a_free_generation_slot(monkeypatch):
    """Like the race and the batch (models.in_a_slot): while every slot is taken they say so, and a page that leaves
    (Gradio closes the generator) ends the wait without decoding; once the slot is free they run."""
    monkeypatch.setattr(models, "CONFIG", models.AppConfig(model="tiny", concurrency=1))
    slot = models.slots()
    assert slot.acquire(timeout=5)  # another generation holds the only slot
    try:
        walking = walkthrough.walk_steps(PROMPT, 0.3, 4, 8)
        sweeping = explorer.sweep("1, 0.3", 4, 8, ["lists"], 2, progress=lambda *a, **k: None)
        assert models.WAITING in next(walking)[0] and next(sweeping)[3] == models.WAITING
        assert "free generation slot" in models.WAITING  # not a compile's notice
        assert models.TRACKER.active == 0
        sweeping.close()
    finally:
        slot.release()
    page, walk = list(walking)[-1]
    assert "Forward 1 of" in page and walk.steps and slot.acquire(blocking=False)  # the slot was given back
    slot.release()


@pytest.mark.parametrize("temperature", [0.0, 0.5], ids=["greedy", "sampled"])
def test_a_race_the_scheduler_does_not_run_waits_for_a_slot(monkeypatch, temperature):
    """Lanes share forwards (the scheduler's queue in place of a slot) only where greedy: a sampled race decodes on
    its own, so it waits for a generation slot like every other run of the model."""
    monkeypatch.setattr(models, "CONFIG", models.AppConfig(model="tiny", concurrency=1))
    slot = models.slots()
    assert slot.acquire(timeout=5)  # another generation holds the only slot
    running = race.race(PROMPT, 0.5, 4, temperature, 8, False, race_state.RaceSession())
    try:
        first = next(running)
    finally:
        running.close()  # its lanes end (the scheduler's requests with them)
        slot.release()
    assert (first[-1]["status"] == "waiting") == (temperature > 0)


def test_a_wait_for_a_slot_says_so_at_once_then_every_few_seconds(monkeypatch):
    """models.in_a_slot: the waiting notice at once, then again only every SLOT_AGAIN s however often it looks for a
    slot (each frame costs the app's event loop), and once more when the slot is had; Stop still ends the wait at its
    next look."""
    monkeypatch.setattr(models, "CONFIG", models.AppConfig(model="tiny", concurrency=1))
    monkeypatch.setattr(models, "SLOT_POLL", 0.01)
    monkeypatch.setattr(models, "SLOT_AGAIN", 0.2)
    stop = threading.Event()
    slot = models.slots()
    assert slot.acquire(timeout=5)  # another generation holds the only slot
    try:
        waiting = models.in_a_slot(iter(["ran"]), lambda: "waiting", stop.is_set, lambda: "gave up")
        began, said = time.monotonic(), [next(waiting)]
        while time.monotonic() - began < 0.5:
            said.append(next(waiting))
        looks = 0.5 / models.SLOT_POLL  # about 50 looks at the slot: 3 or 4 notices
        assert said[0] == "waiting" and set(said) == {"waiting"} and 2 <= len(said) <= 5 < looks / 4
        stop.set()
        assert list(waiting) == ["gave up"]
        waiting = models.in_a_slot(iter(["ran"]), lambda: "waiting")
        assert next(waiting) == "waiting"
    finally:
        slot.release()
    assert list(waiting) == ["waiting", "ran"]  # one frame once the slot is had (a page that left ends there)
    assert slot.acquire(blocking=False)  # and the slot was given back
    slot.release()


def test_sweep_handler_gives_chart_table_and_csv():
    seen = []
    fig, table, path, status = explorer.run_sweep("1, 0.3, 0.05", 4, 8, ["lists", "counting"], 5,
                                             progress=lambda f, d=None: seen.append(f))
    assert list(table["threshold"]) == [1.0, 0.3, 0.05] and table["quality"].iloc[0] == 1.0
    assert Path(path).read_text().splitlines()[0].startswith("threshold,tokens_per_forward,quality")
    assert len(Path(path).read_text().splitlines()) == 4
    assert "5 prompts" in status and seen[-1] == 1.0
    assert len(fig.data) == 2


def test_sweep_plan_lists_the_prompts_and_bounds_the_forwards():
    page = explorer.plan("1, 0.5", 4, 16, ["lists", "counting"], 4)
    assert "4 prompts × 2 decodings (τ = 1 included) = 8 answers" in page and "at most 128 forwards" in page
    assert " ms " not in page and "min" not in page  # no time guessed from a forward timed elsewhere
    assert [line[:3] for line in page.splitlines() if line[:1].isdigit()] == ["1. ", "2. ", "3. ", "4. "]
    assert "*lists*" in page and "*counting*" in page
    assert "1 prompt × 1 decoding" in explorer.plan("1", 4, 8, ["lists"], 1)  # τ = 1 alone: one decoding
    assert explorer.plan("2", 4, 16, ["lists"], 4).startswith("⚠ Thresholds must be between 0.05 and 1, got 2.")
    assert explorer.plan("1", 4, 16, [], 4).startswith("⚠ Pick at least one")
    assert explorer.plan("1", 4, 16, ["lists"], 10**6).startswith("⚠ Prompts must be between 1 and")


def test_the_sweeps_estimate_comes_from_its_own_answers():
    assert "0 of 10 answers" in explorer.estimate(3.0, 0, 10) and "left" not in explorer.estimate(3.0, 0, 10)
    said = explorer.estimate(12.0, 4, 10)  # 3 s an answer so far: 6 left, 18 s
    assert "**12 s elapsed, about 18 s left**" in said and "about 30 s in all" in said
    frames = list(explorer.sweep("1, 0.3", 4, 8, ["lists"], 2, progress=lambda *a: None))
    assert frames[-1][0] is not None and re.search(r"in \*\*\d+ s\*\*", frames[-1][3])


def test_sweep_in_verified_mode_keeps_every_answer():
    fig, table, path, status = explorer.run_sweep("1, 0.3, 0.05", 4, 16, ["lists", "counting"], 4, "verified",
                                                  progress=lambda *a, **k: None)
    assert list(table["quality"]) == [1.0, 1.0, 1.0] and list(table["exact_match"]) == [1.0, 1.0, 1.0]
    assert "in verified" in status and "verified" in fig.layout.title.text
    per_forward, per_second = fig.data  # quality is 1 throughout: the chart shows tokens per forward and per second
    assert list(per_forward.x) == [0.05, 0.3, 1.0]
    assert list(per_forward.y) == pytest.approx(list(table["tokens_per_forward"])[::-1], abs=1e-3)
    assert per_second.yaxis == "y2" and list(per_second.y) == pytest.approx(list(table["tokens_per_second"])[::-1],
                                                                             abs=1e-3)
    assert per_forward.y[-1] == 1.0 and per_forward.y[0] > 1.0  # τ = 1 checks no drafts
    rows = [{"threshold": 1.0, "tokens_per_forward": 1.0, "tokens_per_second": 10.0},
            {"threshold": 0.3, "tokens_per_forward": 2.5, "tokens_per_second": 16.0}]
    assert "draft threshold 0.3, 2.50 tokens per forward and 1.60× the tokens per second" in explorer.speed_note(rows)
    rows[1]["tokens_per_second"] = 9.0  # noise on a shared CPU: τ = 1 was fastest, and the status says so
    said = explorer.speed_note(rows)
    assert "Fastest here: τ = 1 (no drafts" in said and "0.3, made 2.50 tokens per forward at 0.90×" in said
    assert "noisy" in said and "noisy" in explorer.speed_note(rows[1:])


@pytest.mark.parametrize(
    "taus, cats, message",
    [("", ["lists"], "at least one threshold"), ("0.9, x", ["lists"], "numbers"),
     ("1.3", ["lists"], "between 0.05 and 1"), ("1", [], "category"), ("1", ["poetry"], "unknown prompt categories")],
)
def test_sweep_handler_bad_input(taus, cats, message):
    fig, table, path, status = explorer.run_sweep(taus, 4, 8, cats, progress=lambda *a, **k: None)
    skip = type(gr.skip())
    assert all(isinstance(x, skip) for x in (fig, table, path)) and re.search(message, status)


def test_build_ui_wires_named_endpoints_and_a_queue():
    demo = app.build_ui()
    names = {d["api_name"] for d in demo.config["dependencies"]}
    assert {"race", "set_threshold", "set_adapt", "stop", "walkthrough", "walkthrough_verified", "sweep",
            "mask"} <= names
    race_dep = next(d for d in demo.config["dependencies"] if d["api_name"] == "race")
    # Stop ends the race from inside (its controls), not through Gradio's cancel (which marks outputs as errors)
    assert race_dep["id"] not in [c for d in demo.config["dependencies"] for c in (d["cancels"] or [])]
    race_fn = next(f for f in demo.fns.values() if f.api_name == "race")
    assert race_fn.concurrency_limit is None  # the race takes an app-wide slot itself (models.slots)
    assert demo._queue.default_concurrency_limit == models.CONFIG.concurrency


def test_space_allows_only_the_fixed_model_list(monkeypatch):
    monkeypatch.setenv("SPACE_ID", "someone/mars-studio")
    models.check_model_choice(None)
    models.check_model_choice("Xalphinions/MARS-Qwen2.5-0.5B-blk4")
    with pytest.raises(ValueError, match="On a Space"):
        models.check_model_choice("/etc/passwd")
    with pytest.raises(SystemExit):
        app.main(["--model", "/some/local/path", "--no-preload"])


def test_main_honours_env_and_flags(monkeypatch):
    monkeypatch.setattr(models, "CONFIG", models.CONFIG)  # main() sets it: the next tests get it back as it was
    launched = {}

    class Demo:
        def launch(self, **kwargs):
            launched.update(kwargs)

    monkeypatch.setattr(app, "build_ui", lambda: Demo())
    # the interpreter's switch interval (this test process keeps its own)
    monkeypatch.setattr(app.sys, "setswitchinterval", lambda seconds: launched.update(switch=seconds))
    monkeypatch.setenv("GRADIO_SERVER_NAME", "0.0.0.0")
    monkeypatch.setenv("GRADIO_SERVER_PORT", "7999")
    app.main(["--no-preload", "--model", "tiny", "--ar-model", "tiny", "--concurrency", "2"])
    assert launched["server_name"] == "0.0.0.0" and launched["server_port"] == 7999
    assert launched["switch"] == models.SWITCH_SECONDS < 1e-3  # races keep their pace beside Python-bound work
    assert models.CONFIG == models.AppConfig(model="tiny", ar_model="tiny", concurrency=2)
    app.main(["--no-preload", "--port", "7123"])
    assert launched["server_port"] == 7123 and models.CONFIG.model is None
    monkeypatch.setenv("MARS_MODEL", "default")  # the Space's way to name the embedded model: the same as none
    app.main(["--no-preload"])
    assert models.CONFIG.model is None and models.CONFIG.ar_model is None and not models.CONFIG.static
    app.main(["--no-preload", "--static-shapes"])
    assert models.CONFIG.static
    monkeypatch.delenv("MARS_COMPILE", raising=False)  # the default: compiled on a bf16 CPU (AMX or AVX512-BF16)
    for cuda, flavor, on in ((False, "avx512_bf16", True), (False, "amx", True), (True, "amx", False),
                             (False, None, False)):
        monkeypatch.setattr("torch.cuda.is_available", lambda cuda=cuda: cuda)
        monkeypatch.setattr("mars_core.runtime.rows.flavor", lambda flavor=flavor: flavor)
        app.main(["--no-preload"])
        assert models.CONFIG.compile is on, (cuda, flavor)
        app.main(["--no-preload", "--dtype", "bf16"])
        assert models.CONFIG.compile is on, (cuda, flavor)
        app.main(["--no-preload", "--dtype", "fp32"])  # compiled fp32 is not measured: not by default
        assert not models.CONFIG.compile, (cuda, flavor)
        monkeypatch.setenv("MARS_ROWS_KERNEL", "0")  # nor is the compiled forward without our rows kernel
        app.main(["--no-preload"])
        assert not models.CONFIG.compile, (cuda, flavor)
        monkeypatch.delenv("MARS_ROWS_KERNEL")
    app.main(["--no-preload", "--no-compile"])
    assert not models.CONFIG.compile
    monkeypatch.setenv("MARS_COMPILE", "0")
    app.main(["--no-preload"])
    assert not models.CONFIG.compile
    app.main(["--no-preload", "--compile"])
    assert models.CONFIG.compile
    assert launched["css"] == app.CSS and launched["theme"] is app.THEME and "marsTyped" in launched["js"]


def test_default_model_note_reads_the_shipped_eval(tmp_path):
    report = tmp_path / "eval.json"
    rows = [{"threshold": 0.9, "category": "all", "tokens_per_forward": 1.234},
            {"threshold": 0.9, "category": "predictable", "tokens_per_forward": 2.345},
            {"threshold": 1.0, "category": "all", "tokens_per_forward": 1.0}]
    report.write_text(json.dumps({"rows": rows}))
    note = app.default_model_note(str(report))
    assert "1.23 tokens per forward" in note and "2.35 on predictable" in note and "verified" not in note
    rows.append({"strategy": "verified", "threshold": 0.9, "category": "all", "tokens_per_forward": 2.468})
    report.write_text(json.dumps({"rows": rows}))  # a verified row at the same τ does not hide the sliding one
    note = app.default_model_note(str(report))
    assert "1.23 tokens per forward" in note and "verified, 2.47 tokens per forward" in note
    assert app.default_model_note(str(tmp_path / "missing.json")) == ""
    assert app.default_model_note() != ""  # the shipped assets/records/model/eval_smollm2_mars_b4.json has τ = 0.9 rows


def test_the_recorded_example_is_what_the_page_shows_first(tmp_path, monkeypatch):
    path = race.record_example(tmp_path / "race_example.json")  # the served (tiny) model, the default settings
    record = json.loads(path.read_text())
    assert record["prompt"] == race.DEFAULT_PROMPT and record["max_new_tokens"] == race.SLIDERS["max new tokens"][3]
    assert record["lanes"]["ar"]["ids"] == record["lanes"]["verified"]["ids"]  # fp32 tiny model: exact
    summary = record["summary"]  # what README's table of it reads (mars_core/evaluation/tables/readme.py)
    assert summary["verified"]["same_as_ar"] and summary["ar"]["tokens"] == len(record["lanes"]["ar"]["ids"])
    assert summary["ar"]["forwards"] == len(record["lanes"]["ar"]["counts"]) and summary["ar"]["tokens_per_second"] > 0
    assert part(race.example_outputs(path), "trace")["status"] == "ready"  # another model: not its recording
    monkeypatch.setattr(models, "CONFIG", models.AppConfig())  # the default model: the recording is shown
    shown = race.example_outputs(path)
    trace = part(shown, "trace")
    assert trace["status"].startswith("recorded on") and "press Run to race live" in trace["status"]
    assert [trace[k]["text"] for k in race.LANES] == [record["lanes"][k]["text"] for k in race.LANES]
    assert "same answer as AR" in part(shown, "stats") and "forward 0" in part(shown, "mars")
    # its timings are the recording's: the small print says where and when they were taken, not "this machine"
    small = part(shown, "stats").split("<small>")[1]
    assert small.startswith(f"Recorded on {record['recorded']} ({record['machine']}, {record['dtype']}; forward ")
    assert "this shared CPU" not in small and record["forward"] in small
    # the forward said without how long that process took to compile it (not a fact of the race's timings)
    assert race.recorded_forward("compiled (kept artifacts in 17 s); linear layers on our AVX2 kernel") == (
        "compiled; linear layers on our AVX2 kernel")
    assert race.recorded_forward("uncompiled: no C++ compiler") == "uncompiled: no C++ compiler"
    assert race.example_outputs(tmp_path / "missing.json")[-1]["status"] == "ready"


def test_every_tab_says_the_models_preparation_while_it_waits_for_it(monkeypatch):
    """A Run that comes while the model is being prepared says the step (then runs): the race and the batch on their
    message line, the walkthrough in its view, the explorer in its status."""
    from studio.batch import state as batch_state
    from studio.batch import tab as batch

    said = "**Preparing `tiny`: step 1 of 1, loading the weights** · 3 s in this step"
    monkeypatch.setattr(models, "preparing", lambda names, stopped=lambda: False: iter([said]))
    first = next(race.race(PROMPT, 0.9, 4, 0.0, 8, False, race_state.RaceSession()))
    assert part(first, "message") == said and part(first, "trace")["status"] == "preparing"
    assert next(batch.batch_race("a\nb\nc\nd", 0.9, 4, 8, batch_state.BatchSession()))[3] == said
    assert "Preparing `tiny`: step 1 of 1, loading the weights" in next(walkthrough.walk_steps(PROMPT, 0.9, 4, 8))[0]
    assert "step 1 of 1" in next(walk_verified.verified_steps(PROMPT, 0.3, 4, 8))[0]
    assert next(explorer.sweep("1", 4, 8, ["lists"], 1, progress=lambda *a: None))[3] == said


def test_a_busy_app_sends_each_page_fewer_frames(monkeypatch):
    """With others generating, a page's frames come at most every (others / APP_FRAMES) seconds (the last always):
    the app's frames stay about APP_FRAMES a second however many visitors race."""
    monkeypatch.setattr(lanes, "FRAME_SECONDS", 0.0)
    monkeypatch.setattr(lanes, "APP_FRAMES", 6.0)
    alone, busy = lanes.Throttle(), lanes.Throttle()
    assert alone.due(10, False) and alone.due(10, False)  # alone: every time it is asked
    with contextlib.ExitStack() as running:
        for _ in range(13):  # 13 generations: 12 others
            running.enter_context(models.TRACKER)
        assert busy.due(10, False) and not busy.due(10, False)  # then not again within 2 s
        assert busy.due(10, True)  # the last frame always comes


def test_a_queued_race_says_its_place_when_it_changes(monkeypatch):
    """While its lanes wait for room on the scheduler, the race's message line changes with its place, and only
    then: a frame costs the busy app's event loop (gr.skip() outputs included), so an unchanged place sends none."""
    from types import SimpleNamespace

    places = iter([3, 3, 3, 2, 2, 0, None])
    lane = SimpleNamespace(events=SimpleNamespace(ahead=lambda: next(places)))
    monkeypatch.setattr(race_loop, "QUEUE_POLL", 0.0)
    monkeypatch.setattr(models, "scheduler", lambda name: SimpleNamespace(cap=6))
    said = list(race_loop.queued({"ar": lane}, {"ar": race_loop.DecodeControl()}))
    assert said == ["In the queue: 3 races ahead of yours (up to 6 races share each forward here)…",
                    "In the queue: 2 races ahead of yours (up to 6 races share each forward here)…",
                    "In the queue: yours is next (up to 6 races share each forward here)…"]
    places = iter([3, 3, 3, None])  # and said again after QUEUE_AGAIN seconds unchanged (a page that left is closed
    monkeypatch.setattr(race_loop, "QUEUE_AGAIN", 0.0)  # only when its generator yields)
    assert len(list(race_loop.queued({"ar": lane}, {"ar": race_loop.DecodeControl()}))) == 3
