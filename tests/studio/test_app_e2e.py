"""End to end: `python app.py --model <tiny folder>` as a subprocess, driven with gradio_client."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tiny import tiny_qwen2, tiny_tokenizer

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = ["Count from one to ten", "What is the capital of France?", "hello", "List three colours"]


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def save_tiny_model(folder: Path) -> Path:
    """A tiny random Qwen2 with a mask token, saved in save_pretrained layout (what `--model` takes)."""
    tok = tiny_tokenizer(mask_token=True)
    model = tiny_qwen2(len(tok), max_position_embeddings=1024)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@contextlib.contextmanager
def launched_app(model: str | None, *args: str, timeout: float = 180.0) -> Iterator[str]:
    """Run `python app.py` on a free port and yield its URL; the process is ended (by its id) afterwards."""
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1"}
    env.pop("SPACE_ID", None)
    cmd = [sys.executable, str(ROOT / "app.py"), "--port", str(port), *args]
    if model:
        cmd += ["--model", model]
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"mars_app_{port}.log", "w+")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"app.py exited with {proc.returncode}:\n{log.read()[-3000:]}")
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"app.py did not answer on {url} within {timeout:.0f} s")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def url(tmp_path_factory) -> Iterator[str]:
    folder = save_tiny_model(tmp_path_factory.mktemp("tiny_model"))
    with launched_app(str(folder), "--concurrency", "4") as address:
        yield address


@pytest.fixture()
def client(url):
    from gradio_client import Client

    return Client(url, verbose=False)


def race_args(prompt: str, threshold: float = 0.9, max_new_tokens: int = 48) -> tuple:
    """Positional inputs of /race: prompt, threshold, block size, temperature, max new tokens, adapt."""
    return prompt, threshold, 4, 0.0, max_new_tokens, False


def test_api_lists_the_endpoints(client):
    names = set(client.view_api(return_format="dict", print_info=False)["named_endpoints"])
    assert {"/race", "/set_threshold", "/stop", "/walkthrough", "/sweep", "/mask"} <= names


def test_race_streams_both_panes(client):
    job = client.submit(*race_args("Count from one to ten", 0.9, 48), api_name="/race")
    final = job.result(timeout=120)
    updates = job.outputs()
    assert len(updates) >= 5
    ar_lengths = [len(u[5]["ar"].get("counts", [])) for u in updates]
    mars_lengths = [len(u[5]["mars"].get("counts", [])) for u in updates]
    assert ar_lengths == sorted(ar_lengths) and len(set(ar_lengths)) >= 4  # AR grows over several updates
    assert len(set(mars_lengths)) >= 4  # and so does MARS, at the same time
    trace = final[5]
    assert trace["status"] == "done"
    assert trace["ar"]["tokens"] == trace["mars"]["tokens"] == 48
    assert set(trace["ar"]["counts"]) == {1}
    assert final[2]["type"] == "plotly" and final[3]["type"] == "plotly"
    assert "forward 0" in final[0] and "forward 0" in final[1]
    assert "Speedup" in final[4]


def test_threshold_change_mid_stream_acts_on_the_next_forwards(client):
    job = client.submit(*race_args("Count from one to ten", 1.0, 400), api_name="/race")
    deadline = time.monotonic() + 60
    while len(job.outputs()) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    client.predict(0.05, api_name="/set_threshold")  # same client = same session
    trace = job.result(timeout=120)[5]
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
    with contextlib.suppress(Exception):  # a cancelled job may end with a CancelledError
        job.result(timeout=30)
    assert time.monotonic() - started < 15
    last = job.outputs()[-1][5]
    assert last["mars"]["tokens"] < 512


def test_bad_input_gives_a_message_not_an_error(client):
    final = client.predict(*race_args("   "), api_name="/race")
    assert final[5]["status"] == "error" and "Empty prompt" in final[4]
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match="greater than maximum value 512"):  # Gradio's own slider check: a message
        client.predict("hi", 0.9, 4, 0.0, 100000, False, api_name="/race")
    final = client.predict("hi", 0.9, 4, 0.0, 12.5, False, api_name="/race")  # within the slider, but not whole
    assert final[5]["status"] == "error" and "whole number" in final[4]
    final = client.predict("hi " * 1300, 0.9, 4, 0.0, 64, False, api_name="/race")
    assert "prompt too long" in final[4].lower()


def test_four_clients_at_once_get_what_they_get_alone(url):
    from gradio_client import Client

    def run(prompt: str) -> dict:
        return Client(url, verbose=False).predict(*race_args(prompt, 0.3, 40), api_name="/race")[5]

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
    trace = job.result(timeout=60)[5]
    assert set(trace["mars"]["thresholds"]) == {1.0}


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
    assert final[5]["status"] == "error"
    assert "Could not load model" in final[4]


def test_space_launcher_runs_the_root_app_and_refuses_arbitrary_models(tmp_path):
    env = {**os.environ, "SPACE_ID": "someone/mars-studio", "MARS_MODEL": str(tmp_path)}
    done = subprocess.run([sys.executable, str(ROOT / "spaces" / "app.py")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "On a Space the model must be one of" in done.stderr and "--ar-model" in done.stderr
