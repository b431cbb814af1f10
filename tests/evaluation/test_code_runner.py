"""The code runner: model-written programs run in a separate process, with time and memory limits, in a throw-away
folder, without the parent's environment, and without network where a namespace can be made."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from mars_core.evaluation.code_runner import check_humaneval, network_isolation, run_python
from mars_core.evaluation.lm_eval_tasks.utils import chat_completion, code_of_answer, cut_at_fence

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the code runner needs POSIX (process groups, rlimits)")

PROBLEM = {
    "prompt": 'def add(a: int, b: int) -> int:\n    """Return a + b.\n    >>> add(2, 3)\n    5\n    """\n',
    "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n",
    "entry_point": "add",
}


def test_a_correct_solution_passes_and_a_wrong_one_fails():
    good = check_humaneval(PROBLEM, "    return a + b\n")
    assert good.passed and good.status == "passed" and good.returncode == 0
    wrong = check_humaneval(PROBLEM, "    return a - b\n")
    assert not wrong.passed and wrong.status == "failed"
    assert "AssertionError" in wrong.output
    broken = check_humaneval(PROBLEM, "    return a +\n")
    assert not broken.passed and "SyntaxError" in broken.output


def test_an_infinite_loop_is_stopped_within_its_time_limit():
    t0 = time.perf_counter()
    result = check_humaneval(PROBLEM, "    while True:\n        pass\n", timeout=1.5)
    elapsed = time.perf_counter() - t0
    assert result.status == "timeout" and not result.passed and result.returncode is None
    assert elapsed < 1.5 + 3.0, elapsed


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in status  # a zombie waits to be reaped: it runs nothing


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_children_it_starts_are_killed_with_it():
    code = "import subprocess, time\np = subprocess.Popen(['sleep', '60'])\nprint(p.pid, flush=True)\ntime.sleep(60)\n"
    result = run_python(code, timeout=1.5, guard=False)  # unguarded: the guard would refuse Popen
    assert result.status == "timeout"
    pid = int(result.output.split()[-1])
    deadline = time.time() + 5
    while _alive(pid) and time.time() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def test_memory_is_limited():
    result = run_python("x = bytearray(2 * 2**30)\nprint('allocated')\n", memory_mb=256)
    assert not result.passed and "MemoryError" in result.output


def test_it_runs_in_a_temporary_folder_without_the_parent_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MARS_TEST_SECRET", "s3cr3t")
    monkeypatch.chdir(tmp_path)
    code = (
        "import os, sys\n"
        "assert 'MARS_TEST_SECRET' not in os.environ, 'environment leaked'\n"
        "open('written.txt', 'w').write('x')\n"
        "print(os.getcwd())\n"
    )
    result = run_python(code)
    assert result.passed, result.output
    folder = result.output.strip().splitlines()[-1]
    assert folder != str(tmp_path) and not os.path.exists(folder), "the folder is removed afterwards"
    assert not (tmp_path / "written.txt").exists()


def test_destructive_calls_are_disabled(tmp_path):
    victim = tmp_path / "keep.txt"
    victim.write_text("keep")
    result = run_python(f"import os\nos.remove({str(victim)!r})\n")
    assert not result.passed and "PermissionError" in result.output
    assert victim.exists()


def test_endless_output_is_bounded():
    result = run_python("while True:\n    print('x' * 4096)\n", timeout=20)
    assert not result.passed and result.status != "timeout"  # the 16 MB file limit stops it first
    assert len(result.output) <= 5000


@pytest.mark.skipif(not network_isolation(), reason="no network namespace can be made here (unshare -n)")
def test_no_network_inside():
    result = run_python(
        "import socket\n"
        "names = [n for _, n in socket.if_nameindex()]\n"
        "assert names == ['lo'], names\n"
        "s = socket.socket(); s.settimeout(2)\n"
        "assert s.connect_ex(('192.0.2.1', 80)) != 0\n"
    )
    assert result.passed and result.network_isolated, result.output


def test_answers_become_programs():
    doc = dict(PROBLEM)
    whole = "Sure!\n```python\ndef add(a, b):\n    return a + b\n```\nThis adds."
    assert code_of_answer(whole) == "def add(a, b):\n    return a + b\n"
    assert chat_completion(doc, whole).startswith("\ndef add(")
    assert check_humaneval(doc, chat_completion(doc, whole)).passed
    body = "```python\n    return a + b\n"  # unclosed block, a body only
    assert chat_completion(doc, body) == "    return a + b\n"
    assert check_humaneval(doc, chat_completion(doc, body)).passed
    assert cut_at_fence("    return a + b\n```\nmore") == "    return a + b\n"
