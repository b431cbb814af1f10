"""benchmarks/ is kept, not accumulated: at most 12 scripts, each one a kept doc or an open issue uses, and each run
here: on a tiny model where it takes one, else its --help (benchmarks/load_test.py runs end to end in
tests/studio/test_load_test.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tiny import tiny_qwen2, tiny_tokenizer

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCHMARKS.iterdir() if p.suffix in (".py", ".sh") and p.name != "__init__.py")
# the scripts an open issue needs (73: the speed tables and identity; 75: the load test; 76: the GPU run)
NEEDED = {"load_test.py", "static_gpu.sh", "static_profile.py", "gpu_model.sh", "exactness.py", "machine_tables.sh"}


def run(*args: str, timeout: int = 300, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **env})


def test_at_most_twelve_scripts_and_the_needed_ones_among_them():
    assert len(SCRIPTS) <= 12, SCRIPTS
    assert NEEDED <= set(SCRIPTS)


def test_each_script_is_named_by_a_doc_or_an_open_issue():
    """A script no page or open issue names is one probe's leftover: it goes (git keeps it)."""
    text = "\n".join(p.read_text() for p in [ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").glob("*.md")])
    for name in SCRIPTS:
        assert f"benchmarks/{name}" in text or name in NEEDED, f"no doc names benchmarks/{name}"


@pytest.mark.parametrize("name", [n for n in SCRIPTS if n.endswith(".sh")])
def test_each_shell_script_parses(name):
    done = run("bash", "-n", str(BENCHMARKS / name), timeout=30)
    assert done.returncode == 0, done.stderr


# Each Python script run as `python benchmarks/<name> --help` would run it (as __main__, its folder first on the path,
# argv its own), all in one process: one import of torch and transformers for them all, not one a script (seconds each)
HELP_ALL = """
import contextlib, io, json, runpy, sys, traceback
said = {}
for path in sys.argv[1:]:
    out, code = io.StringIO(), None
    sys.argv, sys.path[0] = [path, "--help"], path.rsplit("/", 1)[0]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as end:
            code = end.code or 0
        except BaseException:
            traceback.print_exc()
    said[path.rsplit("/", 1)[1]] = [code, out.getvalue()]
print(json.dumps(said))
"""


@pytest.fixture(scope="module")
def helps() -> dict[str, list]:
    """Each Python script's [exit code (None: it did not exit), what it printed] for --help."""
    paths = [str(BENCHMARKS / n) for n in SCRIPTS if n.endswith(".py")]
    done = run(sys.executable, "-c", HELP_ALL, *paths, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", [n for n in SCRIPTS if n.endswith(".py")])
def test_each_python_script_answers_help(helps, name):
    code, said = helps[name]
    assert code == 0 and "usage:" in said, said[-3000:]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny_model")
    tokenizer = tiny_tokenizer(mask_token=True)
    tiny_qwen2(len(tokenizer), max_position_embeddings=1024).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_static_profile_runs_on_a_tiny_model(tiny_model, tmp_path):
    out = tmp_path / "profile.txt"
    done = run(sys.executable, str(BENCHMARKS / "static_profile.py"), "--model", str(tiny_model), "--dtype", "fp32",
               "--limit", "1", "--max-new-tokens", "6", "--out", str(out), OMP_NUM_THREADS="1")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    report = out.read_text()
    assert "1 prompts x 6 tokens, batch 1" in report and "verified" in report


@pytest.mark.parametrize("count", ["--pairs", "--forwards", "--rounds"])
def test_static_profile_refuses_a_count_of_no_runs(count):
    """A count of 0 runs has no median to print: one line saying so, before any model loads."""
    done = run(sys.executable, str(BENCHMARKS / "static_profile.py"), "--openmp-wait", count, "0", "--model",
               "/nonexistent", timeout=120)  # past the check, a run would fail at once on the model, not time out
    assert done.returncode == 2 and f"{count} must be at least 1" in done.stderr


def test_machine_tables_dry_run_names_this_kind_s_records(tmp_path):
    """DRY=1 prints the runs it would make: both mars-bench runs into <kind>_<dtype>_*.json, the stamp, the render."""
    done = run("bash", str(BENCHMARKS / "machine_tables.sh"), str(tmp_path), DRY="1", PYTHON=sys.executable,
               timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 4 and "--batch-sizes 1 " in lines[0] and "--batch-sizes 4,8 " in lines[1]
    assert lines[0].endswith("_b1.json") and lines[1].endswith("_batches.json") and str(tmp_path) in lines[0]
    assert "--stamp" in lines[2] and lines[3].endswith("-m mars_core.evaluation.tables")
    assert not list(tmp_path.glob("*.json"))


def test_static_profile_parts_runs_on_a_tiny_model(tiny_model, tmp_path):
    """--parts on the eager forward (no compile: seconds): each part measured, the step's ops counted by caller."""
    out = tmp_path / "parts.json"
    done = run(sys.executable, str(BENCHMARKS / "static_profile.py"), "--parts", "--model", str(tiny_model), "--dtype",
               "fp32", "--no-compile", "--forwards", "20", "--max-new-tokens", "8", "--out", str(out),
               OMP_NUM_THREADS="1")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    parts = report["forward_ms"]
    assert parts["whole"] > parts["decoder"] > 0 and parts["head"] > 0 and "graph" not in parts
    assert report["step"]["ops_a_forward"] > 0 and report["step"]["forwards"] >= 1
    assert any(caller.startswith("sliding.py") for caller in report["step"]["callers"])
    assert "torch ops a forward outside the decoder and head" in done.stdout


def test_static_profile_openmp_wait_runs_both_waits_beside_a_busy_thread(tiny_model, tmp_path):
    """--openmp-wait: --parts --busy-thread in a process under libgomp's own wait and one under mars_core's, each
    record naming the wait that served it."""
    out = tmp_path / "wait.json"
    done = run(sys.executable, str(BENCHMARKS / "static_profile.py"), "--openmp-wait", "--pairs", "1", "--model",
               str(tiny_model), "--dtype", "fp32", "--no-compile", "--forwards", "10", "--max-new-tokens", "4", "--out",
               str(out), OMP_NUM_THREADS="2")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert [len(v) for v in report["whole_ms"].values()] == [1, 1] and all(
        v[0] > 0 for v in report["whole_ms"].values())
    assert "wait (libgomp's default (torch was imported before mars_core))" in done.stdout
    assert "wait (as set: OMP_WAIT_POLICY=ACTIVE, GOMP_SPINCOUNT=100000)" in done.stdout


def test_static_profile_kernels_times_the_rows_kernels_ops_by_rows(tmp_path):
    """--kernels: a layer's products and attention timed at each row count on the build this CPU runs (its flavor and
    build named), more rows costing more; where no rows kernel builds, it says why and fails."""
    from mars_core.runtime import rows

    out = tmp_path / "kernels.json"
    done = run(sys.executable, str(BENCHMARKS / "static_profile.py"), "--kernels", "--rounds", "3", "--out", str(out))
    if not rows.rows_kernel():
        assert done.returncode != 0 and "no rows kernel here" in done.stderr
        return
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["flavor"] == rows.flavor() and report["build"] == rows.build_id()
    by_rows = report["by_rows"]
    assert [r["rows"] for r in by_rows] == [1, 2, 4, 8, 16, 24, 32]
    assert all(r["products_ms"] > 0 and r["attention_us"] > 0 and r["gmac_s"] > 0 for r in by_rows)
    assert by_rows[-1]["products_ms"] > by_rows[0]["products_ms"] and by_rows[-1]["attention_us"] > by_rows[0][
        "attention_us"]
    assert f"rows kernel {rows.flavor()}" in done.stdout
