"""benchmarks/load_test.py end to end: it launches the app on a tiny random model and measures the adapt knob, with a
Train-tab training beside each round; and its pieces that need no app (the flags, the memory sampler, the log's
tracebacks, /train's last frame read)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time

import pytest

from benchmarks import load_test

from test_app_e2e import ROOT, save_tiny_model

BASE_TAU = 0.9


def test_load_test_reports_every_round_and_adapt_lowers_the_threshold(tmp_path):
    model = save_tiny_model(tmp_path / "tiny_model")
    out = tmp_path / "load.json"
    args = ["--model", str(model), "--clients", "1,2", "--requests-per-client", "1", "--max-new-tokens", "8",
            "--threshold", str(BASE_TAU), "--threads", "1", "--prompt", "Count from one to ten", "--timeout", "60",
            "--train", "first", "--train-steps", "5", "--train-minutes", "0.5", "--train-timeout", "90",
            "--json", str(out)]
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "load_test.py"), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "tok/s" in done.stdout and "MARS-lane tokens" in done.stdout
    header = next(line for line in done.stdout.splitlines() if line.split()[:2] == ["C", "adapt"])
    # the verified lane's columns, then the app's memory, tracebacks and the training, last
    assert header.split()[-17:] == ["v", "tok", "v", "t/f", "v", "t/s", "v=AR", "all", "t/s", "=alone", "share",
                                    "RSS", "max", "RSS", "end", "tb", "train"]
    assert "C=1 adapt off: training done: step budget spent, 5 steps" in done.stdout
    report = json.loads(out.read_text())
    assert report["command"] == shlex.join(["python", str(ROOT / "benchmarks" / "load_test.py"), *args])
    assert report["settings"]["threshold"] == BASE_TAU and report["machine"]["torch_threads"] == 1
    assert report["settings"]["adapt"] == "both" and report["settings"]["train"] == "first"
    assert report["settings"]["training"]["steps"] == 5
    assert report["app"]["tracebacks_total"] == 0 and "app.py" in report["app"]["command"]
    rows = {(r["clients"], r["adapt"]): r for r in report["rows"]}
    assert len(report["rows"]) == 4 and set(rows) == {(c, a) for c in (1, 2) for a in ("off", "on")}
    for (clients, _), row in rows.items():
        assert (row["done"], row["failed"]) == (clients, 0), row["errors"]
        assert row["mars_tokens"] == 8 * clients  # the prompt gives full-length answers: the requests last
        assert 0 < row["latency_p50"] <= row["latency_p95"]
        assert row["throughput"] > 0 and 0 <= row["agreement"] <= 1 and 0 <= row["identical"] <= 1
        # the verified lane beside the MARS lane: the same answer length, its own tokens per forward and speed
        assert "verified" in row["lanes"] and row["verified_tokens"] == 8 * clients
        assert row["verified_tokens"] / row["verified_forwards"] == pytest.approx(row["verified_tpf"])
        assert row["verified_tpf"] >= 1 and row["verified_throughput"] == pytest.approx(
            row["verified_tokens"] / row["wall_s"]) and row["verified_own_tps"] > 0
        # its answers against AR's: a share of every request's, with its counts
        assert row["verified_compared"] == clients and 0 <= row["verified_identical"] <= 1
        assert row["verified_identical"] == pytest.approx(row["verified_identical_count"] / clients)
        assert row["verified_agreement_on"] == ["ids"]
        # every answer against the same request's answer alone (the warm-up's): AR and verified equal, token for
        # token, with its visitors' lanes sharing forwards (the app's default); every lane's tokens counted
        assert row["alone_compared"] == clients and row["alone_exact"] == 1.0
        assert 1 <= row["shared_most"] <= clients
        assert row["all_tokens"] == 3 * 8 * clients and row["all_throughput"] == pytest.approx(
            row["all_tokens"] / row["wall_s"])
        # the app's memory over the round, no traceback in its log, and the round's training finished
        assert 0 < row["rss_end_mb"] <= row["rss_peak_mb"] and row["rss_app_peak_mb"] > 0 and row["processes"] >= 1
        assert row["tracebacks"] == 0
    # --train first: one training, beside the first round, finished (trained, checked on 3 held-out items, kept)
    train = rows[(1, "off")]["train"]
    assert rows[(1, "off")]["train_status"] == "done" and train["state"] == "done: step budget spent", train
    assert train["steps"] == 5 and train["final"]["items"] == 3 and train["seconds"] > 0
    assert all(row["train"] is None and row["train_status"] == "–" for key, row in rows.items() if key != (1, "off"))
    for clients in (1, 2):
        assert rows[(clients, "off")]["tau_mean"] == BASE_TAU
    assert rows[(1, "on")]["tau_mean"] == BASE_TAU  # alone, adapt keeps the base (a training is no generation)
    assert rows[(2, "on")]["tau_mean"] < BASE_TAU  # two requests at once: the knob lowers τ
    assert rows[(2, "on")]["tau_min"] == pytest.approx(BASE_TAU - 0.05)  # one step: two running at most


def test_adapt_picks_the_rounds_and_the_request_cap_counts_them():
    args = load_test.parse_args(["--clients", "8", "--requests-per-client", "3", "--adapt", "off", "--train",
                                 "--max-requests", "24"])
    assert load_test.ADAPTS[args.adapt] == (False,) and args.train == "each" and args.train_steps >= 5
    assert load_test.parse_args(["--train", "first"]).train == "first" and load_test.parse_args([]).train is None
    assert load_test.ADAPTS[load_test.parse_args([]).adapt] == (False, True)  # the default: off, then on
    with pytest.raises(SystemExit):  # both settings: 48 requests, over the cap
        load_test.parse_args(["--clients", "8", "--requests-per-client", "3", "--max-requests", "24"])


def test_tracebacks_counts_the_log_lines_after_an_offset(tmp_path):
    log = tmp_path / "app.log"
    log.write_text("Traceback (most recent call last):\nok\n")
    since = load_test.log_size(log)
    with open(log, "a") as f:
        f.write("fine\nTraceback (most recent call last):\n  File x\nValueError\nTraceback again\n")
    assert load_test.tracebacks(log) == 3 and load_test.tracebacks(log, since) == 2
    assert load_test.tracebacks(tmp_path / "missing.log") == 0


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")
def test_rss_sampler_counts_the_process_and_its_children():
    child = subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(64 << 20); time.sleep(5)"])
    try:
        deadline = time.monotonic() + 10
        while load_test.rss_kb(child.pid) < 64 << 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.pid in load_test.process_tree(os.getpid())
        with load_test.RssSampler(os.getpid(), interval=0.05) as rss:
            time.sleep(0.2)
        row = rss.row()
        assert row["processes"] >= 2 and row["rss_peak_mb"] >= row["rss_app_peak_mb"] + 64
        assert 0 < row["rss_end_mb"] <= row["rss_peak_mb"]
    finally:
        child.kill()
        child.wait()


def test_compile_wait_reads_the_apps_log(tmp_path):
    log = tmp_path / "app.log"
    log.write_text("2025-01-01 10:00:00,000 mars_studio INFO loaded model default from /x (torch.bfloat16)\n"
                   "2025-01-01 10:00:01,000 mars_studio INFO loaded model smollm2-135m-instruct from /y (bf16)\n"
                   "2025-01-01 10:03:00,000 mars_studio INFO model default forward: compiled (179 s)\n")
    assert load_test.forward_notes(log) == ({"default", "smollm2-135m-instruct"}, {"default": "compiled"})
    with pytest.raises(TimeoutError):  # the Train tab's base model still compiles
        load_test.wait_for_compile("http://127.0.0.1:1/", log, "default", timeout=0.0, settle=0.0)
    with open(log, "a") as f:
        f.write("2025-01-01 10:04:00,000 mars_studio INFO model smollm2-135m-instruct forward: uncompiled: "
                "compiling failed (RuntimeError: no\ncompiler) (60 s)\n")
    notes = load_test.wait_for_compile("http://127.0.0.1:1/", log, "default", timeout=5, settle=0.0)
    assert notes == {"default": "compiled", "smollm2-135m-instruct": "uncompiled: compiling failed (RuntimeError: no"}


def test_the_rounds_wait_for_the_apps_start_up_work(tmp_path):
    """The Train tab's starting point, prepared at start beside the first requests: the rounds begin once the app's
    log says it ended (at once where it never began)."""
    log = tmp_path / "app.log"
    log.write_text("2025-01-01 10:00:00,000 mars_studio INFO model default ready, prepared in 5 s\n")
    assert load_test.wait_for_background(log, timeout=0.0) < 1.0
    with open(log, "a") as f:
        f.write("2025-01-01 10:00:01,000 mars_studio INFO preparing the Train tab's starting point\n")
    with pytest.raises(TimeoutError):
        load_test.wait_for_background(log, timeout=0.0)
    with open(log, "a") as f:
        f.write("2025-01-01 10:00:31,000 mars_studio INFO the Train tab's starting point is ready (30 s)\n")
    assert load_test.wait_for_background(log, timeout=0.0) < 1.0


def test_train_outcome_reads_the_last_frame():
    update = {"__type__": "update"}
    refused = load_test.train_outcome_of((*[update] * 6, "⚠ Corpus must be one of counting, …"), 0.1)
    assert refused.status == "error" and refused.message.startswith("⚠ Corpus")
    metrics = {"state": "done: time budget spent", "step": 7, "seconds": 30.1, "items": 3, "points": [{}]}
    trained = load_test.train_outcome_of((update, update, "", "", metrics, update, "**Trained for 7 steps.**"), 31.0)
    assert (trained.status, trained.steps, trained.state) == ("done", 7, "done: time budget spent")
    assert trained.final == {"seconds": 30.1, "items": 3}  # the points stay out of the report
    stopped = load_test.train_outcome_of((update, update, "", "", {**metrics, "state": "ended before its check"},
                                          update, ""), 5.0)
    assert stopped.status == "incomplete"


def test_best_case_commits_at_most_half_the_width_plus_one():
    flat = load_test.best_case([1.0] * 12, 6, 3)  # width free: the widest tree B - 1 drafts allow, 7 tokens, 4 commits
    assert (flat["width"], flat["x_one_token"], len(flat["seconds_by_width"])) == (7, 4.0, 7)
    # each token a sample costs as much as the first: no tree reads above one-token decoding
    linear = load_test.best_case([float(max(w, 1)) for w in range(12)], 6, 3)
    assert linear["x_one_token"] == pytest.approx(max((w + 1) / 2 / w for w in range(2, 8)))
    assert linear["x_one_token"] < 1
    # a step after 2 tokens: 2 tokens a sample (1.5 a forward at 1.2x the price) is the best
    step = load_test.best_case([1.0, 1.0, 1.2, 3.0, 3.0, 3.0], 6, 2)
    assert (step["width"], step["x_one_token"]) == (2, pytest.approx(1.25))
    assert step["seconds_by_width"] == [1.0, 1.2, 3.0, 3.0, 3.0] and step["most_drafts"] == 2
