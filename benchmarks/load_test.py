"""Load test of the app's "adapt to load" knob: concurrent /race clients with the knob off and on (or one of them),
optionally with a Train-tab training running beside them.

    python benchmarks/load_test.py [--clients 1,2,4,8] [--requests-per-client 2] [--adapt off|on|both]
                                   [--prompt ...] [--threshold 0.9] [--max-new-tokens 48] [--model PATH]
                                   [--train [each|first] [--train-steps 20] [--train-minutes 1]
                                    [--train-corpus counting] [--train-timeout 900]]
                                   [--compile] [--threads N] [--concurrency N] [--[no-]batching]
                                   [--json out.json] [--plot out.png]

Launches `python app.py` at its default settings (--concurrency and --[no-]batching passed on where given) on a free
127.0.0.1 port (ended at the end, also on Ctrl-C or an error); with --compile it
passes the app --compile and waits until every model the app loaded has its compiled forward (the app's log says
so) before the warm-up request. Then for each client count C and each adapt setting of --adapt (off, on, or off then
on) it runs a round: C threads, each with its own gradio_client session, each sending its requests one after
another. Every /race request runs the AR and MARS lanes (and the verified lane, when the app has one) in turn on the
same machine: throughput counts MARS-lane tokens only, over the round's wall time (the race clients' own).

With --train every round (with --train first, the first round only) also has one more client, its own session too,
that starts one Train-tab training through the HTTP API (/train: the corpus, no pasted text, B, the step budget, the
minute budget; small by default, whichever ends first, then the app checks the trained model on held-out items)
together with the race clients, and waits for its last frame (at most --train-timeout seconds, then /train_stop).
The round ends once the race clients and the training have both ended; the row says whether the training finished
("done": its model was trained, checked and kept), errored (the app's ⚠ message, or the client's
error), ended otherwise ("incomplete") or timed out.

Per round: requests done/failed, throughput, median and p95 latency (submit to last frame), the mean τ in force
over all MARS forwards, and agreement with AR (mean shared-prefix fraction, share of identical answers); beside
the MARS lane's tokens, tokens per forward and throughput, the verified lane's, counted the same way (its tokens
over the round's wall time; the JSON also has its tokens over its own forwards' seconds, as the app's clock
counts them), and the share of its answers equal to AR's (token ids where the trace has them, else text; with the
counts); every lane's tokens over the round's wall time (all t/s); the share of requests whose AR and verified
answers are, token for token, the answers the same request got alone (=alone: the warm-up request's, sent alone
before the rounds); the most lanes one forward fed (share: visitors' lanes sharing forwards, the app's scheduler).
Then the app process's memory: its peak RSS over the round (VmRSS of the app and any child process,
summed, sampled every 0.2 s from /proc) and its RSS at the round's end; the lines with "Traceback" the app's log got
during the round; and the training's outcome. The JSON also records the command line, the machine, the app's
command and log, and what serves its forward (compiled or not, from its log).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mars_core.evaluation.metrics import agreement  # noqa: E402
from mars_core.training.corpora import CORPORA, DEFAULT_CORPUS  # noqa: E402

STOP = threading.Event()  # set when the rounds end (Ctrl-C and SIGTERM included): client threads send nothing more
DEFAULT_PROMPT = "List the days of the week, one per line."
COLUMNS = (  # (key, header, width, format) of the printed table
    ("clients", "C", 4, "d"), ("adapt", "adapt", 6, "s"), ("done", "done", 5, "d"), ("failed", "fail", 5, "d"),
    ("mars_tokens", "tokens", 7, "d"), ("mars_tpf", "tok/fwd", 8, ".2f"), ("wall_s", "wall s", 8, ".2f"),
    ("throughput", "tok/s", 8, ".1f"),
    ("latency_p50", "p50 s", 7, ".2f"), ("latency_p95", "p95 s", 7, ".2f"), ("tau_mean", "τ mean", 7, ".3f"),
    ("tau_min", "τ min", 6, ".2f"), ("agreement", "agree", 6, ".3f"), ("identical", "same", 5, ".2f"),
    ("verified_tokens", "v tok", 6, "d"), ("verified_tpf", "v t/f", 6, ".2f"),
    ("verified_throughput", "v t/s", 6, ".1f"), ("verified_identical", "v=AR", 5, ".2f"),
    ("all_throughput", "all t/s", 8, ".1f"), ("alone_exact", "=alone", 7, ".2f"), ("shared_most", "share", 6, "d"),
    ("rss_peak_mb", "RSS max", 8, ".0f"), ("rss_end_mb", "RSS end", 8, ".0f"), ("tracebacks", "tb", 3, "d"),
    ("train_status", "train", 10, "s"),
)
ADAPTS = {"off": (False,), "on": (True,), "both": (False, True)}  # --adapt: the knob's settings, in the order run
TRAIN_OUT = ("losses", "speeds", "status", "bar", "metrics", "prompt", "message")  # /train's outputs, in order


@dataclass
class Outcome:
    """One /race request as a client saw it."""

    ok: bool
    latency: float
    error: str = ""
    mars_tokens: int = 0
    mars_forwards: int = 0
    thresholds: tuple[float, ...] = ()
    agreement: float = 0.0
    identical: bool = False
    lanes: tuple[str, ...] = ()  # the lanes the trace had (ar, mars, and verified where the app has it)
    compared_on: str = ""  # "ids" or "text": what agreement compared
    verified_tokens: int = 0  # the verified lane, where the app has one: tokens, forwards and its own seconds
    verified_forwards: int = 0
    verified_seconds: float = 0.0
    verified_identical: bool | None = None  # its answer equal to AR's (None: no verified lane in the trace)
    verified_agreement: float | None = None  # its shared-prefix fraction with AR
    verified_compared_on: str = ""  # "ids" or "text": what that compared
    all_tokens: int = 0  # tokens of every lane (AR, MARS τ, verified)
    alone_same: dict = field(default_factory=dict)  # lane -> its answer equals the same request's answer alone
    shared_most: int = 1  # the most lanes one of its forwards fed (the scheduler; 1: none shared)


@dataclass
class TrainOutcome:
    """One /train run as its client saw it: done (trained, checked and kept), error, incomplete or timeout."""

    status: str
    seconds: float  # submit to last frame, on the client's clock
    state: str = ""  # the training's last state ("done: step budget spent", …) from its metrics JSON
    message: str = ""  # the last frame's message line (the summary, or the ⚠ error), or the client's error
    steps: int = 0
    final: dict = field(default_factory=dict)  # the last metrics' figures (losses, tokens per forward, the check)


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(proc: subprocess.Popen, url: str, log: Path, timeout: float) -> None:
    """Poll the page until it answers 200; raise with the app's log if it exits or the timeout passes."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"app.py exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        if time.monotonic() > deadline:
            raise TimeoutError(f"app.py did not answer on {url} within {timeout:.0f} s (log: {log})")
        time.sleep(0.3)


def stop_process(proc: subprocess.Popen) -> None:
    """End the app (this process, by its id): terminate, then kill after 15 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def app_log(port: int) -> Path:
    """Where the app launched on `port` writes what it prints."""
    return Path(tempfile.gettempdir()) / f"mars_app_{port}.log"


LAUNCHED: dict[str, subprocess.Popen] = {}  # the apps launched_app runs now, by URL (their pid: app_process(url))


def app_process(url: str) -> subprocess.Popen:
    """The `python app.py` process launched_app started for `url` (while it runs)."""
    return LAUNCHED[url]


@contextlib.contextmanager
def launched_app(model: str | None, *args: str, threads: int | None = None, timeout: float = 180.0) -> Iterator[str]:
    """Run `python app.py [--model MODEL] ARGS` on a free 127.0.0.1 port (with `threads` torch threads, when given)
    and yield its URL; the app is always ended afterwards (by its id). It prints to app_log(port). The load test and
    the app's end-to-end and browser tests (tests/studio) launch it with this."""
    port = free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1"}
    env.pop("SPACE_ID", None)
    env.setdefault("MARS_COMPILE", "0")  # serving measured as before: no background compile taking the cores
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    cmd = [sys.executable, str(ROOT / "app.py"), "--host", "127.0.0.1", "--port", str(port), *args]
    if model:
        cmd += ["--model", model]
    log = app_log(port)
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}/"
            LAUNCHED[url] = proc
            wait_until_up(proc, url, log, timeout)
            yield url
        except Exception:
            print(f"app log ({log}), last lines:\n{log.read_text()[-2000:]}", file=sys.stderr)
            raise
        finally:
            LAUNCHED.pop(f"http://127.0.0.1:{port}/", None)
            stop_process(proc)


# ----------------------------------------------------------------------------- the app's memory, log and compile


def rss_kb(pid: int) -> int:
    """VmRSS of one process in kB (0 when it is gone or /proc has no such line: a kernel thread, not Linux)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def children(pid: int) -> list[int]:
    """The direct child processes of `pid`: from /proc/<pid>/task/*/children, else by scanning /proc/*/stat."""
    tasks = Path(f"/proc/{pid}/task")
    found: list[int] = []
    try:
        for task in tasks.iterdir():
            found += [int(x) for x in (task / "children").read_text().split()]
        return found
    except FileNotFoundError:
        if not tasks.exists():
            return []  # the process is gone
    except (OSError, ValueError):
        pass
    for stat in Path("/proc").glob("[0-9]*/stat"):  # a kernel without CONFIG_PROC_CHILDREN
        with contextlib.suppress(OSError, ValueError, IndexError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def process_tree(pid: int) -> list[int]:
    """`pid` and every process below it."""
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p not in tree:
            tree.append(p)
            todo += children(p)
    return tree


class RssSampler:
    """The app's RSS sampled in a thread every `interval` seconds while the `with` block runs: the app process and
    its child processes summed (their shared pages counted once per process), and the app alone."""

    def __init__(self, pid: int, interval: float = 0.2):
        self.pid, self.interval = pid, interval
        self.peak_kb = self.app_peak_kb = self.start_kb = self.end_kb = 0
        self.processes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss", daemon=True)

    def sample(self) -> int:
        """One sample (kB, the tree summed), folded into the peaks."""
        tree = process_tree(self.pid)
        sizes = [rss_kb(p) for p in tree]
        total = sum(sizes)
        self.peak_kb, self.app_peak_kb = max(self.peak_kb, total), max(self.app_peak_kb, sizes[0])
        self.processes = max(self.processes, sum(1 for size in sizes if size))
        return total

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> RssSampler:
        self.start_kb = self.sample()
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join()
        self.end_kb = self.sample()

    def row(self) -> dict:
        """The round's memory figures in MB (NaN where /proc gave nothing)."""
        def mb(kb: int) -> float:
            return kb / 1024 if kb else float("nan")

        return {"rss_start_mb": mb(self.start_kb), "rss_peak_mb": mb(self.peak_kb), "rss_end_mb": mb(self.end_kb),
                "rss_app_peak_mb": mb(self.app_peak_kb), "processes": self.processes}


def log_size(log: Path) -> int:
    """Bytes the app's log has now (where a round's part of it begins)."""
    try:
        return log.stat().st_size
    except OSError:
        return 0


def tracebacks(log: Path, since: int = 0) -> int:
    """Lines containing "Traceback" the app's log got after byte `since`."""
    try:
        with open(log, "rb") as f:
            f.seek(since)
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return 0
    return sum("Traceback" in line for line in text.splitlines())


LOADED = re.compile(r"loaded model (.+?) from ")  # models.get_model's log line once a model is prepared
# models.compile_in_background's, once it ended: "… INFO model KEY forward: NOTE (N s)" (a long note may wrap)
FORWARD = re.compile(r"\bINFO model (.+?) forward: (.*?)(?: \(\d+ s\))?\s*$")


def forward_notes(log: Path) -> tuple[set[str], dict[str, str]]:
    """The models the app's log says were loaded, and what serves each one's forward once its compile ended
    ("compiled", or "uncompiled: why")."""
    text = log.read_text(errors="replace") if log.exists() else ""
    notes = {}
    for line in text.splitlines():
        if match := FORWARD.search(line):
            notes[match.group(1)] = match.group(2)
    return set(LOADED.findall(text)), notes


def wait_for_compile(url: str, log: Path, served: str, timeout: float, settle: float = 10.0) -> dict[str, str]:
    """Wait until the served model and every other model the app loaded (the Train tab's base, loaded at start) have
    their compile ended, with no new model loaded for `settle` seconds; return each one's forward note."""
    deadline = time.monotonic() + timeout
    settled_at = None
    while True:
        proc = LAUNCHED.get(url)
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"app.py exited with {proc.returncode} while compiling:\n{log.read_text()[-3000:]}")
        loaded, notes = forward_notes(log)
        if served in notes and loaded <= set(notes):
            settled_at = settled_at or time.monotonic()
            if time.monotonic() - settled_at >= settle:
                return notes
        else:
            settled_at = None
        if time.monotonic() > deadline:
            raise TimeoutError(f"the app's compile did not end within {timeout:.0f} s (loaded {sorted(loaded)}, "
                               f"compiled {notes}; log: {log})")
        time.sleep(1.0)


def wait_for_background(log: Path, timeout: float) -> float:
    """Wait until the start-up work the app runs beside its first requests (the Train tab's starting point, prepared
    once its models are) has ended, so a round measures the app as a class finds it; the seconds waited."""
    from studio.train.loop import PRELOAD_LOG

    began = time.monotonic()
    while True:
        text = log.read_text(errors="replace") if log.exists() else ""
        if PRELOAD_LOG[0] not in text or PRELOAD_LOG[1] in text:
            return time.monotonic() - began
        if time.monotonic() - began > timeout:
            raise TimeoutError(f"the app's start-up work did not end within {timeout:.0f} s (log: {log})")
        time.sleep(1.0)


def answers(ar: dict, mars: dict) -> tuple[list, list, str]:
    """Both lanes' answers as token ids, or as characters of their text where a lane has no ids; and which."""
    if "ids" in ar and "ids" in mars:
        return list(ar["ids"]), list(mars["ids"]), "ids"
    return list(ar.get("text", "")), list(mars.get("text", "")), "text"


ALONE: dict[str, list[int]] = {}  # lane -> the warm-up request's answer (ids): the prompt's answer alone


def outcome_of(trace: dict, latency: float) -> Outcome:
    """Read the last frame's trace dict into an Outcome (failed unless its status is "done"); each lane's answer is
    compared with the answer the same request got alone (ALONE: the warm-up's, where it has the lane)."""
    if not isinstance(trace, dict) or trace.get("status") != "done":
        status = trace.get("status") if isinstance(trace, dict) else type(trace).__name__
        message = trace.get("message", "") if isinstance(trace, dict) else ""
        return Outcome(False, latency, f"status {status!r} {message}".strip())
    mars, ar = trace["mars"], trace["ar"]
    a, m, compared_on = answers(ar, mars)
    lanes = tuple(k for k in ("ar", "mars", "verified") if trace.get(k))
    verified = trace.get("verified") or {}
    v_same = v_agreement = None
    if verified:  # the verified lane's answer against AR's, compared as answers() gives them (ids, else text)
        a_v, v, v_on = answers(ar, verified)
        v_same, v_agreement = a_v == v, agreement(a_v, v)
    return Outcome(True, latency, mars_tokens=int(mars["tokens"]), mars_forwards=len(mars["thresholds"]),
                   thresholds=tuple(mars["thresholds"]), agreement=agreement(a, m), identical=a == m, lanes=lanes,
                   compared_on=compared_on, verified_tokens=int(verified.get("tokens", 0)),
                   verified_forwards=int(verified.get("forwards", 0)),
                   verified_seconds=float(verified.get("seconds", 0.0)), verified_identical=v_same,
                   verified_agreement=v_agreement, verified_compared_on=v_on if verified else "",
                   all_tokens=sum(int(trace[k].get("tokens", 0)) for k in lanes),
                   alone_same={k: trace[k].get("ids") == ALONE[k] for k in lanes if k in ALONE},
                   shared_most=max((n for k in lanes for n in trace[k].get("shared") or [1]), default=1))


def one_request(client, args: argparse.Namespace, adapt: bool) -> Outcome:
    """Submit one /race request and wait for its last frame, at most --timeout seconds."""
    start = time.perf_counter()
    try:
        job = client.submit(args.prompt, args.threshold, args.block_size, 0.0, args.max_new_tokens, adapt,
                            api_name="/race")
        final = job.result(timeout=args.timeout)
    except FutureTimeout:
        job.cancel()
        with contextlib.suppress(Exception):  # end the generation on the server too (same session)
            client.predict(api_name="/stop")
        return Outcome(False, time.perf_counter() - start, f"timed out after {args.timeout:g} s")
    except Exception as err:  # an AppError, a dropped connection, …: reported, not fatal
        return Outcome(False, time.perf_counter() - start, f"{type(err).__name__}: {err}")
    return outcome_of(final[-1], time.perf_counter() - start)


def client_worker(url: str, args: argparse.Namespace, adapt: bool, start: threading.Barrier,
                  results: list[Outcome], progress) -> None:
    """One client: its own session, then --requests-per-client requests in a row once every client is ready."""
    from gradio_client import Client

    try:
        client = Client(url, verbose=False)
    except Exception as err:
        start.abort()
        results.append(Outcome(False, 0.0, f"could not connect: {err}"))
        return
    start.wait()
    for _ in range(args.requests_per_client):
        if STOP.is_set():
            return
        results.append(one_request(client, args, adapt))
        progress.update(1)


def train_outcome_of(final: tuple, seconds: float) -> TrainOutcome:
    """Read /train's last frame: "done" once its metrics' state is done (trained, checked, kept), "error" when its
    message is the app's ⚠ line, "incomplete" otherwise."""
    final = tuple(final) if isinstance(final, (list, tuple)) else (final,)
    metrics = final[TRAIN_OUT.index("metrics")] if len(final) == len(TRAIN_OUT) else None
    metrics = metrics if isinstance(metrics, dict) and "state" in metrics else {}
    message = final[-1] if isinstance(final[-1], str) else ""
    state = str(metrics.get("state", ""))
    status = "done" if state.startswith("done") else "error" if message.startswith("⚠") or not metrics else \
        "incomplete"
    figures = {k: v for k, v in metrics.items() if k not in ("points", "state", "step")}
    return TrainOutcome(status, seconds, state, message, int(metrics.get("step") or 0), figures)


def one_training(client, args: argparse.Namespace) -> TrainOutcome:
    """Submit one /train run (--train-corpus, no pasted text, --train-block, --train-steps, --train-minutes) and wait
    for its last frame, at most --train-timeout seconds (then /train_stop on its session)."""
    start = time.perf_counter()
    try:
        job = client.submit(args.train_corpus, "", args.train_block, args.train_steps, args.train_minutes,
                            api_name="/train")
        final = job.result(timeout=args.train_timeout)
    except FutureTimeout:
        with contextlib.suppress(Exception):  # ends the training at its next step (same session)
            client.predict(api_name="/train_stop")
        job.cancel()
        return TrainOutcome("timeout", time.perf_counter() - start, message=f"timed out after {args.train_timeout:g} s")
    except Exception as err:  # an AppError, a dropped connection, …: reported, not fatal
        return TrainOutcome("error", time.perf_counter() - start, message=f"{type(err).__name__}: {err}")
    return train_outcome_of(final, time.perf_counter() - start)


def train_worker(url: str, args: argparse.Namespace, start: threading.Barrier, results: list[TrainOutcome]) -> None:
    """The training client: its own session, then one /train run once every client is ready (it never holds the race
    clients back: a failed connection is reported and the round goes on)."""
    from gradio_client import Client

    try:
        client = Client(url, verbose=False)
    except Exception as err:
        results.append(TrainOutcome("error", 0.0, message=f"could not connect: {err}"))
        client = None
    with contextlib.suppress(threading.BrokenBarrierError):
        start.wait()
    if client is not None and not STOP.is_set():
        results.append(one_training(client, args))


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0–100) with linear interpolation between the sorted values (numpy's default)."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    pos = (len(xs) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(xs) - 1)
    return xs[low] + (xs[high] - xs[low]) * (pos - low)


def mean(values: list[float]) -> float:
    """Arithmetic mean; NaN for no values."""
    return statistics.fmean(values) if values else float("nan")


def summarise(clients: int, adapt: bool, outcomes: list[Outcome], wall: float) -> dict:
    """One table row for a round of `clients` clients with the knob `adapt`."""
    done = [o for o in outcomes if o.ok]
    latencies = [o.latency for o in done]
    taus = [t for o in done for t in o.thresholds]
    tokens = sum(o.mars_tokens for o in done)
    verified = {"tokens": sum(o.verified_tokens for o in done), "forwards": sum(o.verified_forwards for o in done),
                "seconds": sum(o.verified_seconds for o in done)}
    has_verified = any("verified" in o.lanes for o in done)
    compared = [o for o in done if o.verified_identical is not None]
    same = sum(bool(o.verified_identical) for o in compared)
    alone = [o.alone_same for o in done if o.alone_same]
    exact = [o for o in alone if "ar" in o and "verified" in o]
    return {
        # every lane's tokens over the round's wall time; each answer against the same request's answer alone: the
        # requests whose AR and verified answers both equal theirs (exact lanes), and whose MARS τ answer does
        "all_tokens": sum(o.all_tokens for o in done),
        "all_throughput": sum(o.all_tokens for o in done) / wall if wall > 0 else 0.0,
        "alone_exact": sum(o["ar"] and o["verified"] for o in exact) / len(exact) if exact else float("nan"),
        "alone_exact_count": sum(o["ar"] and o["verified"] for o in exact), "alone_compared": len(exact),
        "alone_mars": mean([float(o["mars"]) for o in alone if "mars" in o]),
        "shared_most": max((o.shared_most for o in done), default=1),
        "clients": clients, "adapt": "on" if adapt else "off", "done": len(done), "failed": len(outcomes) - len(done),
        "mars_tokens": tokens, "mars_forwards": sum(o.mars_forwards for o in done), "wall_s": wall,
        "mars_tpf": tokens / max(sum(o.mars_forwards for o in done), 1),  # MARS tokens per MARS forward
        "throughput": tokens / wall if wall > 0 else 0.0,
        "latency_p50": percentile(latencies, 50), "latency_p95": percentile(latencies, 95),
        "tau_mean": mean(taus), "tau_min": min(taus, default=float("nan")),
        "agreement": mean([o.agreement for o in done]), "identical": mean([float(o.identical) for o in done]),
        "errors": sorted({o.error for o in outcomes if not o.ok}),
        "lanes": sorted({lane for o in done for lane in o.lanes}),
        "agreement_on": sorted({o.compared_on for o in done}),
        # the verified lane beside the MARS lane, counted the same way (NaN where the app has none): tokens, tokens
        # per forward, tokens over the round's wall time; and over its own forwards' seconds (the app's clock)
        "verified_tokens": verified["tokens"], "verified_forwards": verified["forwards"],
        "verified_tpf": verified["tokens"] / verified["forwards"] if verified["forwards"] else float("nan"),
        "verified_throughput": verified["tokens"] / wall if has_verified and wall > 0 else float("nan"),
        "verified_own_tps": (verified["tokens"] / verified["seconds"] if has_verified and verified["seconds"] > 0
                             else float("nan")),
        # the verified lane's answers equal to AR's (ids where the trace has them, else text): the share, its counts
        "verified_identical": same / len(compared) if compared else float("nan"),
        "verified_identical_count": same, "verified_compared": len(compared),
        "verified_agreement": mean([o.verified_agreement for o in compared]),
        "verified_agreement_on": sorted({o.verified_compared_on for o in compared}),
    }


def run_round(url: str, args: argparse.Namespace, clients: int, adapt: bool, progress, train: bool = False) -> dict:
    """C client threads, each with its own session, started together (with `train`, the training client too);
    returns the round's row, with the app's memory over the round and the tracebacks its log got meanwhile."""
    results: list[Outcome] = []
    trained: list[TrainOutcome] = []
    start = threading.Barrier(clients + 1 + train)
    threads = [threading.Thread(target=client_worker, args=(url, args, adapt, start, results, progress),
                                name=f"client-{i}", daemon=True) for i in range(clients)]
    trainer = (threading.Thread(target=train_worker, args=(url, args, start, trained), name="train", daemon=True)
               if train else None)
    log = app_log(int(url.rstrip("/").rsplit(":", 1)[1]))
    since = log_size(log)
    with RssSampler(app_process(url).pid) as rss:
        for t in [*threads, *([trainer] if trainer else [])]:
            t.start()
        with contextlib.suppress(threading.BrokenBarrierError):
            start.wait(timeout=120)  # every client connected: the round's clock starts now
        t0 = time.perf_counter()
        for t in threads:
            t.join(timeout=args.timeout * args.requests_per_client + 60)
        wall = time.perf_counter() - t0
        if trainer is not None:  # the round ends with the training too
            trainer.join(timeout=args.train_timeout + 60)
    missing = clients * args.requests_per_client - len(results)
    results += [Outcome(False, 0.0, "client thread did not finish")] * max(missing, 0)
    row = summarise(clients, adapt, results, wall)
    outcome = (trained[0] if trained else TrainOutcome("error", 0.0, message="training thread did not finish")
               if train else None)
    return row | rss.row() | {"tracebacks": tracebacks(log, since),
                              "train_status": outcome.status if outcome else "–",
                              "train": asdict(outcome) if outcome else None}


def warm_up(url: str, args: argparse.Namespace) -> float:
    """One full-length request first (not counted), so model loading and first-call costs stay out of the rounds;
    returns its seconds."""
    from gradio_client import Client

    client = Client(url, verbose=False)
    start = time.perf_counter()
    final = client.submit(args.prompt, args.threshold, args.block_size, 0.0, args.max_new_tokens, False,
                          api_name="/race")
    trace = final.result(timeout=max(args.timeout, 300))[-1]
    if trace.get("status") != "done":
        raise RuntimeError(f"warm-up request failed: {trace.get('status')!r} {trace.get('message', '')}")
    ALONE.update({k: trace[k]["ids"] for k in ("ar", "mars", "verified") if (trace.get(k) or {}).get("ids")})
    return time.perf_counter() - start


def format_row(row: dict) -> str:
    """One fixed-width table line."""
    cells = []
    for key, _, width, fmt in COLUMNS:
        value = row[key]
        cells.append(f"{value:>{width}{fmt}}" if not (isinstance(value, float) and value != value) else
                     f"{'–':>{width}}")
    return " ".join(cells)


def print_table(rows: list[dict]) -> None:
    """The results table, with the failures' reasons below it."""
    print(" ".join(f"{header:>{width}}" for _, header, width, _ in COLUMNS))
    for row in rows:
        print(format_row(row))
    for row in rows:
        for error in row["errors"]:
            print(f"  C={row['clients']} adapt {row['adapt']}: {error}")
        if train := row.get("train"):
            said = f"{train['state'] or train['status']}, {train['steps']} steps" if train["state"] else \
                train["status"]
            print(f"  C={row['clients']} adapt {row['adapt']}: training {said} in {train['seconds']:.1f} s"
                  + (f": {train['message']}" if train["status"] != "done" else ""))


def machine_info(args: argparse.Namespace) -> dict:
    """Where the numbers come from: platform, the CPU and its matmul instruction sets, torch threads (as the app's
    environment gives them), model."""
    import torch

    from mars_core.machine import machine_info as cpu_info

    if args.threads:
        torch.set_num_threads(args.threads)
    cpu = cpu_info()
    return {
        "platform": platform.platform(), "cpu": cpu["cpu"], **({"core": cpu["core"]} if "core" in cpu else {}),
        "isa": cpu["isa"], "python": platform.python_version(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
        "model": args.model or "default (embedded)",
        "memory_gb": memory_gb(), "mars_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("MARS_")},
    }


def memory_gb() -> float | None:
    """The machine's memory (MemTotal), None where /proc/meminfo has none."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    return None


def plot(rows: list[dict], path: str, title: str) -> None:
    """Throughput and p95 latency against clients (adapt off vs on), and the mean τ in force in a second panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    latency_axis = left.twinx()
    for adapt, colour in (("off", "#64748b"), ("on", "#2563eb")):
        sel = [r for r in rows if r["adapt"] == adapt]
        if not sel:
            continue
        xs = [r["clients"] for r in sel]
        left.plot(xs, [r["throughput"] for r in sel], "o-", color=colour, label=f"throughput, adapt {adapt}")
        latency_axis.plot(xs, [r["latency_p95"] for r in sel], "s--", color=colour, label=f"p95 latency, adapt {adapt}")
        right.plot(xs, [r["tau_mean"] for r in sel], "o-", color=colour, label=f"adapt {adapt}")
    left.set(xlabel="concurrent clients", ylabel="MARS tokens / s (all clients)", title="Throughput and p95 latency")
    latency_axis.set_ylabel("p95 request latency (s)")
    handles = left.get_legend_handles_labels()[0] + latency_axis.get_legend_handles_labels()[0]
    left.legend(handles, [h.get_label() for h in handles], fontsize=8, loc="upper left")
    right.set(xlabel="concurrent clients", ylabel="mean τ in force", title="Threshold in force (MARS forwards)")
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.set_xticks(sorted({r["clients"] for r in rows}))
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def client_counts(text: str) -> list[int]:
    """Parse "1,2,4,8" into positive client counts."""
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"client counts must be whole numbers: {text!r}") from err
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"client counts must be at least 1: {text!r}")
    return counts


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked (thresholds, counts and the total request cap)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=client_counts, default=[1, 2, 4, 8], help="client counts, e.g. 1,2,4,8")
    p.add_argument("--requests-per-client", type=int, default=2)
    p.add_argument("--adapt", choices=sorted(ADAPTS), default="both",
                   help="the adapt-to-load knob's settings to run each client count with (both: off, then on)")
    p.add_argument("--prompt", default=DEFAULT_PROMPT)
    p.add_argument("--threshold", type=float, default=0.9, help="base threshold τ")
    p.add_argument("--block-size", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--batch-tab", type=int, default=0, metavar="RUNS",
                   help="instead of the rounds: the Batch tab's handler in this process, RUNS timed runs (batch_tab())")
    p.add_argument("--concurrency", type=int, default=None,
                   help="the app's --concurrency (default: the app's own default)")
    p.add_argument("--batching", action=argparse.BooleanOptionalAction, default=None,
                   help="the app's --batching or --no-batching (default: the app's own default)")
    p.add_argument("--model", default=None, help="MARS checkpoint for app.py --model (default: the embedded model)")
    p.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS for the app (default: unset)")
    p.add_argument("--compile", action="store_true",
                   help="launch app.py --compile and wait until the forwards it compiles in the background are done "
                        "(its log says so) before the warm-up (default: MARS_COMPILE as set, else 0: uncompiled)")
    p.add_argument("--compile-timeout", type=float, default=1800.0, help="seconds to wait for the app's compile")
    t = p.add_argument_group("training", "--train: one Train-tab training (/train) beside a round's race clients, "
                                         "started with them, from its own session; the round ends when it ends too, "
                                         "and its row says whether it finished (done) or not (error, incomplete, "
                                         "timeout)")
    t.add_argument("--train", nargs="?", const="each", choices=("each", "first"), default=None,
                   help="run one training in every round (--train, or --train each) or in the first round only "
                        "(--train first)")
    t.add_argument("--train-corpus", choices=list(CORPORA), default=DEFAULT_CORPUS)
    t.add_argument("--train-block", type=int, default=4, help="the training's B")
    t.add_argument("--train-steps", type=int, default=20, help="its step budget (the app allows 5 to 2000)")
    t.add_argument("--train-minutes", type=float, default=1.0,
                   help="its time budget in minutes, whichever ends first (the app allows 0.5 to 10); the check of "
                        "the trained model on held-out items follows")
    t.add_argument("--train-timeout", type=float, default=900.0,
                   help="seconds before the training counts as timed out (then /train_stop)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per request before it counts as failed")
    p.add_argument("--max-requests", type=int, default=500, help="refuse runs that would send more requests")
    p.add_argument("--startup-timeout", type=float, default=300.0, help="seconds to wait for the app to answer")
    p.add_argument("--json", default=None, help="write rows, settings and machine info here")
    p.add_argument("--plot", default=None, help="write a matplotlib figure here (.png)")
    args = p.parse_args(argv)
    if not 0.0 < args.threshold <= 1.0:
        p.error(f"--threshold must be in (0, 1], got {args.threshold:g}")
    if args.requests_per_client < 1 or args.max_new_tokens < 1 or args.timeout <= 0 or args.train_timeout <= 0:
        p.error("--requests-per-client, --max-new-tokens, --timeout and --train-timeout must be positive")
    total = len(ADAPTS[args.adapt]) * sum(args.clients) * args.requests_per_client
    if total > args.max_requests:
        p.error(f"{total} requests in all is over --max-requests {args.max_requests}")
    return args


def json_safe(value: object) -> object:
    """The report with NaN (no values, e.g. a round where every request failed) as null, which JSON allows."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def settings(args: argparse.Namespace) -> dict:
    """The run's settings as the JSON records them."""
    keys = ("clients", "requests_per_client", "adapt", "prompt", "threshold", "block_size", "max_new_tokens",
            "model", "threads", "timeout", "compile", "train")
    train = ({k: getattr(args, f"train_{k}") for k in ("corpus", "block", "steps", "minutes", "timeout")}
             if args.train else None)
    return {k: getattr(args, k) for k in keys} | {"temperature": 0.0, "concurrency": args.concurrency,
                                                  "batching": args.batching,
                                                  "throughput_counts": "MARS-lane tokens only",
                                                  "training": train}


def compiling(args: argparse.Namespace) -> bool:
    """Whether the launched app compiles its forward: --compile, or MARS_COMPILE=1 in the environment."""
    return args.compile or os.environ.get("MARS_COMPILE") == "1"


def run_rounds(args: argparse.Namespace, app: dict | None = None) -> list[dict]:
    """Launch the app, (with --compile) wait for its compile, warm it up, and run every (clients, adapt) round; the
    app is ended whatever happens. `app` receives what the JSON says of the app: its command, log, forward notes,
    RSS after the warm-up and tracebacks in all."""
    from tqdm import tqdm

    app = {} if app is None else app
    rows: list[dict] = []
    total = len(ADAPTS[args.adapt]) * sum(args.clients) * args.requests_per_client
    print(f"launching app.py (model: {args.model or 'default'}, concurrency {args.concurrency or 'default'}, "
          f"batching {'default' if args.batching is None else 'on' if args.batching else 'off'}"
          f"{', compiled forward' if compiling(args) else ''})…", flush=True)
    extra = ["--compile"] if args.compile else []
    extra += ["--concurrency", str(args.concurrency)] if args.concurrency else []
    extra += [] if args.batching is None else ["--batching" if args.batching else "--no-batching"]
    with launched_app(args.model, *extra, threads=args.threads, timeout=args.startup_timeout) as url:
        log = app_log(int(url.rstrip("/").rsplit(":", 1)[1]))
        app |= {"command": shlex.join(map(str, app_process(url).args)), "log": str(log)}
        try:
            if compiling(args):
                began = time.monotonic()
                served = args.model if args.model not in (None, "", "default") else "default"
                app["forward"] = wait_for_compile(url, log, served, args.compile_timeout)
                print(f"compile ended after {time.monotonic() - began:.0f} s: {app['forward']}", flush=True)
            print(f"warm-up request (not counted): {warm_up(url, args):.1f} s", flush=True)
            print(f"the app's start-up work ended ({wait_for_background(log, args.compile_timeout):.0f} s more)",
                  flush=True)
            app["rss_after_warm_up_mb"] = sum(map(rss_kb, process_tree(app_process(url).pid))) / 1024 or None
            with tqdm(total=total, desc="requests", unit="req", file=sys.stderr) as progress:
                for clients in args.clients:
                    for adapt in ADAPTS[args.adapt]:
                        progress.set_postfix_str(f"C={clients} adapt {'on' if adapt else 'off'}")
                        train = args.train == "each" or (args.train == "first" and not rows)
                        rows.append(run_round(url, args, clients, adapt, progress, train))
        finally:
            STOP.set()  # client threads still out (after Ctrl-C) send nothing more while the app ends
            app["forward"] = app.get("forward") or forward_notes(log)[1]
            app["tracebacks_total"] = tracebacks(log)
    return rows


# ----------------------------------------------------------------------------- the Batch tab

BATCH_SIDES = ("block", "verified", "ar")


def one_run(tab, state, args: argparse.Namespace) -> dict:
    """The tab's handler once, to its last frame; what each side read."""
    out = list(tab.batch_race("\n".join(tab.EXAMPLES), args.threshold, args.block_size, args.max_new_tokens,
                              state.BatchSession()))
    trace = out[-1][-1]
    row = {k: {f: trace[k][f] for f in ("forwards", "tokens", "seconds", "tokens_per_second")} for k in BATCH_SIDES}
    ar = trace["ar"]["tokens_per_second"]
    return row | {"verified_same_as_ar": sum(trace["verified_same_as_ar"]),
                  "block_same_as_ar": sum(trace["same_as_ar"]), "prompts": len(trace["same_as_ar"]),
                  "verified_x_ar": trace["verified"]["tokens_per_second"] / ar,
                  "block_x_ar": trace["block"]["tokens_per_second"] / ar}


def best_case(seconds: list[float], samples: int, drafts: int) -> dict:
    """The most verified decoding of this batch could read over one-token decoding if every draft matched, by the
    served forward's cost curve (seconds[w]: a forward of w tokens a sample). A forward commits its pending token and
    the drafts it checks, and only a group hung after them drafts the next: k drafts a forward need k masks beside
    them, so w tokens a sample commit at most (w + 1) / 2 a forward, whatever the tree (siblings and other groups add
    width, not commits, where every draft matches); a group drafts at most B - 1 (`drafts`), so w <= 2 drafts + 1."""
    ratios = {w: (w + 1) / 2 * seconds[1] / seconds[w] for w in range(2, 2 * drafts + 2)}
    w = max(ratios, key=ratios.get)
    return {"samples": samples, "most_drafts": drafts, "width": w, "x_one_token": ratios[w],
            "seconds_by_width": [round(s, 5) for s in seconds[1 : 2 * drafts + 2]]}


def batch_tab(args: argparse.Namespace, command: str) -> dict:
    """--batch-tab RUNS: the Batch tab as a visitor runs it, its own handler on its six example prompts (64 new tokens,
    --threshold, --block-size), the served model at the app's defaults on this machine (compiled where the app
    compiles), RUNS timed runs after an untimed one: each side's forwards, tokens, seconds and tokens/s as the tab's
    clock counts them, answers equal to AR's, verified's and block's tokens/s over AR's, and the medians."""
    args.max_new_tokens, args.runs = 64, args.batch_tab

    from mars_core.machine import machine_info, machine_line
    from studio import models
    from studio.batch import state, tab
    from studio.cli import compile_by_default

    models.CONFIG = models.AppConfig(model=args.model, compile=compile_by_default())
    for said in models.preparing([models.CONFIG.model], lambda: False):
        print(said, flush=True)
    models.get_model(models.CONFIG.model)
    time.sleep(1)
    while models.COMPILING:  # the compiled forward, as the app serves it once its compile ends
        time.sleep(1)
    forward = models.forward_note(models.CONFIG.model)
    print(f"forward: {forward}", flush=True)
    one_run(tab, state, args)  # untimed: first calls
    runs = []
    for _ in range(args.runs):
        runs.append(one_run(tab, state, args))
        r = runs[-1]
        print(f"verified {r['verified']['tokens_per_second']:.1f} tok/s ({r['verified_x_ar']:.2f}x AR, "
              f"{r['verified_same_as_ar']} of {r['prompts']} = AR) · block {r['block']['tokens_per_second']:.1f} "
              f"({r['block_x_ar']:.2f}x, {r['block_same_as_ar']} = AR) · AR {r['ar']['tokens_per_second']:.1f}",
              flush=True)
    curve = models.get_runtime(models.CONFIG.model).cost
    bound = (best_case(curve.at(len(tab.EXAMPLES), range(2 * args.block_size)), len(tab.EXAMPLES),
                       args.block_size - 1) if curve is not None else None)
    report = {"command": command,
              "date": time.strftime("%F"), "machine": machine_line(machine_info()), "forward": forward,
              "best_case": bound,
              "settings": {k: getattr(args, k) for k in ("threshold", "block_size", "max_new_tokens", "model", "runs")},
              "runs": runs,
              "verified_x_ar_median": statistics.median(r["verified_x_ar"] for r in runs),
              "block_x_ar_median": statistics.median(r["block_x_ar"] for r in runs)}
    print(f"median over {args.runs} runs: verified {report['verified_x_ar_median']:.2f}x the AR batch's tokens/s, "
          f"block {report['block_x_ar_median']:.2f}x")
    if bound is not None:
        print(f"if every draft matched: at most {bound['x_one_token']:.2f}x one-token decoding ({bound['width']} "
              f"tokens a sample a forward, {bound['most_drafts']} drafts at most, by the served forward's cost curve "
              f"at {bound['samples']} samples)")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")
    return report

def command_line(argv: list[str] | None) -> str:
    """The command that ran this, shell-quoted: the script's path as it was given on the command line (as
    benchmarks/load_test.py when main() is called with `argv`), then its arguments."""
    return shlex.join(["python", *sys.argv] if argv is None else ["python", "benchmarks/load_test.py", *argv])


def main(argv: list[str] | None = None) -> list[dict]:
    """Run the rounds, print the table, write --json and --plot; Ctrl-C ends the app and exits with 130."""
    command = command_line(argv)
    args = parse_args(argv)
    if args.batch_tab:
        return [batch_tab(args, command)]
    app: dict = {}
    try:
        rows = run_rounds(args, app)
    except KeyboardInterrupt:
        print("\ninterrupted: the app was ended", file=sys.stderr)
        raise SystemExit(130) from None
    print(f"\nbase τ {args.threshold:g}, B {args.block_size}, {args.max_new_tokens} max new tokens, "
          f"{args.requests_per_client} request(s) per client; each /race runs the AR and MARS lanes (and any "
          "verified lane) in turn on the same machine: tok/s counts MARS-lane tokens over all clients per wall "
          "second of the round; v tok, v t/f, v t/s: the verified lane's tokens, tokens per forward and tokens per "
          "wall second, counted the same way; v=AR: the share of verified answers equal to AR's; RSS max, RSS end: "
          "the app's RSS in MB (with any child process), its peak over the round and at its end; tb: lines with "
          "'Traceback' in the app's log during the round" + ("; train: the round's /train run (– none)" if args.train
                                                             else ""))
    print_table(rows)
    print(f"app log: {app.get('log')} ({app.get('tracebacks_total', 0)} 'Traceback' lines in all)"
          + (f"; forward: {app['forward']}" if app.get("forward") else ""))
    if args.json:
        report = {"command": command, "settings": settings(args), "machine": machine_info(args), "app": app,
                  "rows": rows}
        Path(args.json).write_text(json.dumps(json_safe(report), indent=2) + "\n")
        print(f"wrote {args.json}")
    if args.plot:
        plot(rows, args.plot, f"{args.model or 'default model'} · base τ {args.threshold:g} · "
                              f"{args.max_new_tokens} max new tokens")
        print(f"wrote {args.plot}")
    return rows


def exit_on_sigterm() -> None:
    """SIGTERM ends the run like Ctrl-C does: through the cleanup that ends the app."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


if __name__ == "__main__":
    exit_on_sigterm()
    main()
