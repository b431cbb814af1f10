"""Run model-written Python in isolation: its own process, time and memory limits, a throw-away folder, no network.

Executing code a model wrote is dangerous (it can delete files, fork without end, fill the disk or the memory,
reach the network). What run_python() does, and does not, guard against:

- a separate process (``python -I -B``: no user site-packages, no PYTHON* variables, no script dir on sys.path),
  started in a new session so that it and any child it forks are killed together at the time limit;
- a wall-clock limit (``timeout``), and a CPU-time limit a little above it (RLIMIT_CPU);
- an address-space limit (RLIMIT_AS, ``memory_mb``), a size limit on every file it writes (RLIMIT_FSIZE, 16 MB:
  its stdout and stderr go to files, so endless printing is stopped too), no core dumps, at most 256 open files;
- a fresh temporary working directory (also its HOME and TMPDIR), deleted afterwards;
- an environment stripped to PATH, HOME, TMPDIR, LANG: no tokens, keys or proxy settings are inherited;
- no network where Linux lets us make a new network namespace (``unshare -n`` as root, else ``unshare -rn``
  through a user namespace): inside it there is only a loopback device. Where neither works (many containers
  forbid namespaces) the code *can* reach the network; ``network_isolation()`` says which, and every result
  records it;
- before the program runs, a guard makes the destructive calls of os, shutil and subprocess raise (removing
  files, kill, fork, exec, chmod...). Python code can undo such a guard: it stops accidents, not an attacker.

It is not a sandbox against a determined attacker: the code runs as the calling user and can read what that
user can read, and write outside its folder (up to 16 MB a file). Run untrusted code as an unprivileged user,
or in a container or VM, when that matters.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DEFAULT_TIMEOUT = 10.0  # seconds of wall clock per program
DEFAULT_MEMORY_MB = 1024  # address space; python itself takes about 30 MB
FILE_LIMIT_BYTES = 16 * 2**20
OUTPUT_TAIL = 2000  # characters of stdout/stderr kept in a result

# Runs before the program: destructive calls raise instead (defence against accidents, not a sandbox).
GUARD = r'''
def _mars_guard():
    import builtins, os, shutil, subprocess, sys
    def blocked(*args, **kwargs):
        raise PermissionError("disabled by the MARS Studio code runner")
    for name in ("kill", "killpg", "system", "putenv", "remove", "removedirs", "rmdir", "unlink", "rename",
                 "renames", "replace", "truncate", "fork", "forkpty", "execv", "execve", "execl", "execle",
                 "execlp", "execlpe", "execvp", "execvpe", "spawnl", "spawnv", "spawnve", "posix_spawn",
                 "posix_spawnp", "setuid", "setgid", "chmod", "fchmod", "lchmod", "chown", "fchown", "lchown",
                 "chroot", "fchdir", "link", "symlink"):
        if hasattr(os, name):
            setattr(os, name, blocked)
    for name in ("rmtree", "move", "chown"):
        setattr(shutil, name, blocked)
    subprocess.Popen = blocked
    builtins.exit = builtins.quit = None
    for name in ("resource", "psutil", "ctypes"):
        sys.modules[name] = None
_mars_guard()
del _mars_guard
'''


@dataclass
class RunResult:
    passed: bool  # exited with status 0 within the time limit
    status: str  # "passed", "failed" (non-zero exit), "timeout", or "killed" (a signal: memory, CPU, file size)
    returncode: int | None
    seconds: float
    output: str  # the tail of stderr, then of stdout
    network_isolated: bool


@lru_cache(maxsize=1)
def network_isolation() -> tuple[str, ...]:
    """The command prefix that gives a child its own empty network namespace, () where none can be made here."""
    unshare = shutil.which("unshare")
    if unshare is None or not sys.platform.startswith("linux"):
        return ()
    prefixes = [(unshare, "--net"), (unshare, "--user", "--map-root-user", "--net")]
    if os.geteuid() != 0:
        prefixes.reverse()
    for prefix in prefixes:
        try:
            done = subprocess.run([*prefix, "true"], capture_output=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0:
            return prefix
    return ()


# Sets the limits inside the child, then runs the program (no preexec_fn: that is unsafe in a threaded parent).
LAUNCHER = r"""
import resource, runpy, sys
cpu, memory, fsize, path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
if memory:
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
del resource, cpu, memory, fsize
sys.argv = [path]
runpy.run_path(path, run_name="__main__")
"""


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(f.tell() - 4 * OUTPUT_TAIL, 0))
            return f.read().decode("utf-8", "replace")[-OUTPUT_TAIL:]
    except OSError:
        return ""


def run_python(
    code: str, timeout: float = DEFAULT_TIMEOUT, memory_mb: int = DEFAULT_MEMORY_MB, guard: bool = True,
    network: bool = False,
) -> RunResult:
    """Run `code` as a Python program under the limits above; passed = it exited 0 in time.
    network=True skips the network namespace (for a caller that knows it needs none of this isolation)."""
    if os.name != "posix":
        raise RuntimeError("the code runner needs a POSIX system (process groups and resource limits)")
    prefix = () if network else network_isolation()
    with tempfile.TemporaryDirectory(prefix="mars-run-") as tmp:
        folder = Path(tmp)
        program = folder / "program.py"
        program.write_text((GUARD if guard else "") + "\n" + code, encoding="utf-8")
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": tmp, "TMPDIR": tmp, "LANG": "C.UTF-8",
               "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        limits = [str(int(timeout) + 2), str(memory_mb * 2**20), str(FILE_LIMIT_BYTES)]
        cmd = [*prefix, sys.executable, "-I", "-B", "-c", LAUNCHER, *limits, str(program)]
        t0 = time.perf_counter()
        with open(folder / "stdout", "wb") as out, open(folder / "stderr", "wb") as err:
            proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    start_new_session=True, close_fds=True)
            try:
                code_ = proc.wait(timeout=timeout)
                status = "passed" if code_ == 0 else "killed" if code_ < 0 else "failed"
            except subprocess.TimeoutExpired:
                status, code_ = "timeout", None
            finally:
                try:  # the whole session: the program and anything it forked
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                proc.wait()
        seconds = time.perf_counter() - t0
        output = (_tail(folder / "stderr") + "\n" + _tail(folder / "stdout")).strip()
    return RunResult(status == "passed", status, code_, seconds, output, bool(prefix))


def humaneval_program(problem: dict, completion: str) -> str:
    """The program that checks one HumanEval completion: the prompt, the completion, the tests, check(entry)."""
    return f"{problem['prompt']}{completion}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n"


def check_humaneval(
    problem: dict, completion: str, timeout: float = DEFAULT_TIMEOUT, memory_mb: int = DEFAULT_MEMORY_MB
) -> RunResult:
    """Run a HumanEval problem's tests against a completion of its prompt (pass@1 for one sample)."""
    return run_python(humaneval_program(problem, completion), timeout=timeout, memory_mb=memory_mb)
