"""End to end: `python app.py --model <tiny folder>` as a subprocess, driven with gradio_client."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from benchmarks import load_test

from tiny import tiny_qwen2, tiny_tokenizer

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = ["Count from one to ten", "What is the capital of France?", "hello", "List three colours"]


def save_tiny_model(folder: Path, **overrides) -> Path:
    """A tiny random Qwen2 with a mask token, saved in save_pretrained layout (what `--model` takes)."""
    tok = tiny_tokenizer(mask_token=True)
    model = tiny_qwen2(len(tok), max_position_embeddings=1024, **overrides)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


# `python app.py` on a free port, one torch thread, ended afterwards: the load test's launcher (launched_app(model,
# *args, timeout=...) yields the URL)
launched_app = functools.partial(load_test.launched_app, threads=1)


@pytest.fixture(scope="module")
def url(tmp_path_factory) -> Iterator[str]:
    # 16 layers: a race of a few hundred tokens lasts seconds, not a blink, on a quiet fast machine too, so the
    # tests can watch it stream, change its threshold and stop it (2 layers finished 512 tokens in 0.2 s on CI)
    folder = save_tiny_model(tmp_path_factory.mktemp("tiny_model"), num_hidden_layers=16)
    with launched_app(str(folder), "--concurrency", "4", "--dtype", "fp32") as address:  # fp32: verified == AR
        yield address


@pytest.fixture()
def client(url):
    from gradio_client import Client

    return Client(url, verbose=False)


# /race's outputs, in order
OUT = ("ar", "mars", "verified", "forwards", "time", "acceptance", "stats", "message", "trace")


def part(outputs, name: str):
    return outputs[OUT.index(name)]


def server_log(url: str) -> str:
    """What `python app.py` printed so far (launched_app writes it to load_test.app_log)."""
    return load_test.app_log(int(url.rstrip("/").rsplit(":", 1)[1])).read_text()


def race_args(prompt: str, threshold: float = 0.9, max_new_tokens: int = 48) -> tuple:
    """Positional inputs of /race: prompt, threshold, block size, temperature, max new tokens, adapt."""
    return prompt, threshold, 4, 0.0, max_new_tokens, False


def test_api_lists_the_endpoints(client):
    names = set(client.view_api(return_format="dict", print_info=False)["named_endpoints"])
    assert {"/race", "/set_threshold", "/stop", "/walkthrough", "/walkthrough_verified", "/sweep", "/mask", "/train",
            "/train_stop", "/train_race"} <= names


def test_race_streams_every_lane(client):
    job = client.submit(*race_args("Count from one to ten", 0.9, 192), api_name="/race")  # long enough to stream
    final = job.result(timeout=120)
    updates = job.outputs()
    assert len(updates) >= 5  # the page is updated at most every lanes.FRAME_SECONDS: several times here
    lengths = {k: [len(part(u, "trace")[k].get("counts", [])) for u in updates] for k in ("ar", "mars", "verified")}
    assert lengths["ar"] == sorted(lengths["ar"]) and len(set(lengths["ar"])) >= 4  # AR grows over several updates
    assert len(set(lengths["mars"])) >= 4 and len(set(lengths["verified"])) >= 4  # and so do the others, together
    trace = part(final, "trace")
    assert trace["status"] == "done"
    assert trace["ar"]["tokens"] == trace["mars"]["tokens"] == trace["verified"]["tokens"] == 192
    assert trace["verified"]["ids"] == trace["ar"]["ids"]  # fp32 tiny model: verified is AR's answer exactly
    assert set(trace["ar"]["counts"]) == {1}
    assert part(final, "forwards")["type"] == "plotly" and part(final, "time")["type"] == "plotly"
    assert all("forward 0" in part(final, k) for k in ("ar", "mars", "verified"))
    assert "tokens/forward" in part(final, "stats") and "Speedup" not in part(final, "stats")


def test_threshold_change_mid_stream_acts_on_the_next_forwards(client):
    job = client.submit(*race_args("Count from one to ten", 1.0, 192), api_name="/race")
    deadline = time.monotonic() + 60
    while len(job.outputs()) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    client.predict(0.05, api_name="/set_threshold")  # same client = same session
    trace = part(job.result(timeout=120), "trace")
    taus, counts = trace["mars"]["thresholds"], trace["mars"]["counts"]
    changed = taus.index(0.05)
    assert changed >= 3 and set(taus[:changed]) == {1.0} and set(taus[changed:]) == {0.05}
    assert set(counts[:changed]) == {1}
    assert max(counts[changed:]) > 1  # a low threshold accepts mask predictions at once
    assert trace["status"] == "done"


def test_stop_ends_the_race(client):
    job = client.submit(*race_args("Count from one to ten", 1.0, 512), api_name="/race")
    deadline = time.monotonic() + 60
    while len(job.outputs()) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    client.predict(api_name="/stop")
    final = job.result(timeout=30)  # the race ends by itself: no cancellation, no error
    assert time.monotonic() - started < 15
    last = part(final, "trace")
    assert last["status"] == "stopped" and 0 < last["mars"]["tokens"] < 512
    assert "stopped" in part(final, "ar") and "forward 0" in part(final, "ar")  # what was generated stays


# /train's outputs, in order
TRAIN_OUT = ("losses", "speeds", "status", "bar", "metrics", "prompt", "message")


def test_train_streams_its_metrics_with_its_defaults_then_stop_keeps_the_model_to_race(client):
    """/train called with no argument (the default corpus, B = 4, the default budget) streams updates whose metrics
    JSON has the step, seconds, AR loss, slot losses and the probes' tokens per forward; /train_stop ends it at its
    next step (no error), and /train_race races what it learned against the model before training."""
    job = client.submit(api_name="/train")
    deadline, metrics = time.monotonic() + 120, {}
    while time.monotonic() < deadline and not (metrics.get("step", 0) >= 3 and metrics.get("tau_tokens_per_forward")):
        updates = job.outputs()
        metrics = next((u[TRAIN_OUT.index("metrics")] for u in reversed(updates)
                        if isinstance(u[TRAIN_OUT.index("metrics")], dict)), {})
        time.sleep(0.2)
    assert {"step", "seconds", "ar_loss", "slot_losses", "tau_tokens_per_forward",
            "verified_tokens_per_forward"} <= set(metrics) and len(metrics["slot_losses"]) == 3
    client.predict(api_name="/train_stop")
    final = job.result(timeout=120)
    last = final[TRAIN_OUT.index("metrics")]
    assert "stopped" in last["state"] and 3 <= last["step"] < 400
    assert last["verified_identical"] == last["items"] == 3  # fp32: verified is one-token decoding
    offered = final[TRAIN_OUT.index("prompt")]  # the held-out prompts, as the dropdown's update
    prompt = offered["value"]
    assert prompt.startswith("Count from") and len(offered["choices"]) == 8
    raced = client.predict(prompt, api_name="/train_race")
    assert len(raced) == 7 and all("tokens in" in pane for pane in raced[:6]) and "after training" in raced[-1]


@pytest.mark.parametrize("args, message", [
    (("   ", 0.9, 4, 0.0, 48), "Empty prompt"),
    (("hi", 0.9, 4, 0.0, 100000), "Max new tokens must be between 8 and 512"),  # the slider's range, stated once
    (("hi", 1.5, 4, 0.0, 48), "Threshold τ must be between 0.05 and 1"),
    (("hi", 0.9, 99, 0.0, 48), "Block size B must be between 1 and 16"),
    (("hi", 0.9, 4, -1, 48), "Temperature must be between 0 and 2"),
    (("hi", 0.9, 4, 0.0, 12.5), "whole number"),  # within the slider, but not whole
    (("hi " * 1300, 0.9, 4, 0.0, 64), "prompt too long"),
])
def test_bad_input_gives_one_message_no_run_no_traceback(client, url, args, message):
    final = client.predict(*args, False, api_name="/race")
    trace = part(final, "trace")
    assert trace["status"] == "error" and message.lower() in part(final, "message").lower()
    assert message.lower() in trace["message"].lower()
    assert trace["ar"] == trace["mars"] == {}  # nothing ran
    assert "Traceback" not in server_log(url)  # a bad value is the user's input, not a server error


# Every route's inputs, each with values out of range: each call must give its one message (⚠ …) and no traceback.
BAD = {
    "/race": [("hi", 2, 4, 0.0, 48, False), ("hi", 0.9, 0, 0.0, 48, False), ("hi", 0.9, 4, 9, 48, False),
              ("hi", 0.9, 4, 0.0, 10**6, False), ("hi", 0.9, 4, 0.0, -3, False), ("", 0.9, 4, 0.0, 48, False),
              ("hi", "x", 4, 0.0, 48, False)],
    "/set_threshold": [(0.0,), (1.01,), (-5,), ("abc",)],
    "/batch": [("a\nb", 0.9, 4, 32), ("a\nb\nc\nd", 0, 4, 32), ("a\nb\nc\nd", 0.9, 17, 32),
               ("a\nb\nc\nd", 0.9, 4, 10**6), ("a\nb\nc\nd", 0.9, 4, 0)],
    "/mask": [(1000, 4), (8, 0), (1, 4), (8, 9.5)],
    "/sweep": [("1, 0.3", 4, 8, ["lists"], 10**6), ("1, 0.3", 4, 8, ["lists"], 0), ("1, 2", 4, 8, ["lists"], 2),
               ("1", 99, 8, ["lists"], 2), ("1", 4, 10**6, ["lists"], 2), ("1", 4, 8, ["poetry"], 2)],
    "/walkthrough": [("hi", 1.5, 4, 8), ("hi", 0.9, 9, 8), ("hi", 0.9, 4, 1000), ("", 0.9, 4, 8)],
    "/walkthrough_verified": [("hi", 0.0, 4, 8), ("hi", 0.3, 0, 8), ("hi", 0.3, 4, 65), ("hi", 0.3, 4, 2)],
    "/train": [("counting", "", 1, 5, 1), ("counting", "", 4, 0, 1), ("counting", "", 4, 5, 11),
               ("poetry", "", 4, 5, 1), ("counting", "", 4, "x", 1)],
}


def said(outputs) -> list[str]:
    """Every message (⚠ …) among a call's outputs, however deep (a trace dict holds it too: counted once per
    output)."""
    found = []
    for value in outputs if isinstance(outputs, (list, tuple)) else [outputs]:
        if isinstance(value, str) and "⚠" in value:
            found.append(value)
    return found


@pytest.mark.parametrize("route", sorted(BAD))
def test_every_route_refuses_every_bad_value_with_one_message_and_no_traceback(client, url, route):
    before = server_log(url)
    for args in BAD[route]:
        outputs = client.predict(*args, api_name=route)
        messages = said(outputs)
        assert len(messages) == 1, (route, args, outputs)  # one message, shown once
        assert "must" in messages[0] or "Empty" in messages[0] or "Give" in messages[0] or \
            "unknown" in messages[0], messages[0]
    new = server_log(url)[len(before):]
    assert "Traceback" not in new and "Error" not in new, new[-2000:]


def test_four_clients_at_once_get_what_they_get_alone(url):
    from gradio_client import Client

    def run(prompt: str) -> dict:
        return part(Client(url, verbose=False).predict(*race_args(prompt, 0.3, 24), api_name="/race"), "trace")

    alone = [run(p) for p in PROMPTS]
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        together = list(pool.map(run, PROMPTS))
    for a, b in zip(alone, together):
        assert b["status"] == "done"
        assert (a["ar"]["text"], a["mars"]["text"], a["mars"]["counts"]) == (
            b["ar"]["text"], b["mars"]["text"], b["mars"]["counts"])
    assert len({t["mars"]["text"] for t in together}) > 1  # different prompts, different answers


def test_sessions_keep_their_own_threshold(url):
    from gradio_client import Client

    changed, untouched = Client(url, verbose=False), Client(url, verbose=False)
    changed.predict(0.05, api_name="/set_threshold")
    job = untouched.submit(*race_args("hello", 1.0, 24), api_name="/race")
    trace = part(job.result(timeout=60), "trace")
    assert set(trace["mars"]["thresholds"]) == {1.0}


def test_the_readme_snippet_sets_the_threshold_of_the_race_it_follows(url):
    """Exactly as the README shows it: submit a race, then /set_threshold. gradio_client sends both at once, so the
    server may see them in either order; the newest value (0.7) must win."""
    from gradio_client import Client

    for _ in range(3):
        client = Client(url, verbose=False)
        job = client.submit("List the days of the week.", 0.9, 4, 0.0, 64, False, api_name="/race")
        client.predict(0.7, api_name="/set_threshold")  # same client = same session: acts on the running race
        taus = [part(frame, "trace")["mars"].get("thresholds") for frame in job]
        taus = [t for t in taus if t][-1]
        assert taus[-1] == 0.7 and set(taus) <= {0.9, 0.7}


def test_walkthrough_and_sweep_endpoints(client):
    step = client.predict("Count from one to ten", 0.3, 4, 8, api_name="/walkthrough")
    assert "Forward 1 of" in step and "[MASK]" in step
    plot, table, csv_path, status = client.predict("1, 0.3", 4, 8, ["lists"], 2, api_name="/sweep")
    assert plot["type"] == "plotly" and "Swept 2 thresholds" in status
    assert [row[0] for row in table["data"]] == [1.0, 0.3]
    assert Path(csv_path).read_text().startswith("threshold,tokens_per_forward,quality")


def test_a_model_that_fails_to_load_gives_a_message(tmp_path):
    from gradio_client import Client

    with launched_app(str(tmp_path / "no_such_model"), "--no-preload") as address:
        final = Client(address, verbose=False).predict(*race_args("hello"), api_name="/race")
    assert part(final, "trace")["status"] == "error"
    assert "Could not load model" in part(final, "message")


def test_space_launcher_runs_the_root_app_and_refuses_arbitrary_models(tmp_path):
    env = {**os.environ, "SPACE_ID": "someone/mars-studio", "MARS_MODEL": str(tmp_path)}
    done = subprocess.run([sys.executable, str(ROOT / "spaces" / "app.py")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "On a Space the model must be one of" in done.stderr and "--ar-model" in done.stderr
