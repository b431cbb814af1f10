"""Load test of the app's "adapt to load" knob: concurrent /race clients with the knob off and on.

    python benchmarks/load_test.py [--clients 1,2,4,8] [--requests-per-client 2] [--prompt ...] [--threshold 0.9]
                                   [--max-new-tokens 48] [--model PATH] [--json out.json] [--plot out.png]

Launches `python app.py` on a free 127.0.0.1 port (ended at the end, also on Ctrl-C or an error), then for each
client count C and adapt off/on starts C threads, each with its own gradio_client session, each sending its
requests one after another. Every /race request runs the AR and MARS lanes (and the verified lane, when the app
has one) in turn on the same machine: throughput counts MARS-lane tokens only, over the round's wall time.
Per round: requests done/failed, throughput, median and p95 latency (submit to last frame), the mean τ in force
over all MARS forwards, and agreement with AR (mean shared-prefix fraction, share of identical answers); beside
the MARS lane's tokens, tokens per forward and throughput, the verified lane's, counted the same way (its tokens
over the round's wall time; the JSON also has its tokens over its own forwards' seconds, as the app's clock
counts them).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
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
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mars_core.evaluation.metrics import agreement  # noqa: E402

STOP = threading.Event()  # set when the rounds end (Ctrl-C and SIGTERM included): client threads send nothing more
DEFAULT_PROMPT = "List the days of the week, one per line."
COLUMNS = (  # (key, header, width, format) of the printed table
    ("clients", "C", 4, "d"), ("adapt", "adapt", 6, "s"), ("done", "done", 5, "d"), ("failed", "fail", 5, "d"),
    ("mars_tokens", "tokens", 7, "d"), ("mars_tpf", "tok/fwd", 8, ".2f"), ("wall_s", "wall s", 8, ".2f"),
    ("throughput", "tok/s", 8, ".1f"),
    ("latency_p50", "p50 s", 7, ".2f"), ("latency_p95", "p95 s", 7, ".2f"), ("tau_mean", "τ mean", 7, ".3f"),
    ("tau_min", "τ min", 6, ".2f"), ("agreement", "agree", 6, ".3f"), ("identical", "same", 5, ".2f"),
    ("verified_tokens", "v tok", 6, "d"), ("verified_tpf", "v t/f", 6, ".2f"),
    ("verified_throughput", "v t/s", 6, ".1f"),
)


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
            wait_until_up(proc, url, log, timeout)
            yield url
        except Exception:
            print(f"app log ({log}), last lines:\n{log.read_text()[-2000:]}", file=sys.stderr)
            raise
        finally:
            stop_process(proc)


def answers(ar: dict, mars: dict) -> tuple[list, list, str]:
    """Both lanes' answers as token ids, or as characters of their text where a lane has no ids; and which."""
    if "ids" in ar and "ids" in mars:
        return list(ar["ids"]), list(mars["ids"]), "ids"
    return list(ar.get("text", "")), list(mars.get("text", "")), "text"


def outcome_of(trace: dict, latency: float) -> Outcome:
    """Read the last frame's trace dict into an Outcome (failed unless its status is "done")."""
    if not isinstance(trace, dict) or trace.get("status") != "done":
        status = trace.get("status") if isinstance(trace, dict) else type(trace).__name__
        message = trace.get("message", "") if isinstance(trace, dict) else ""
        return Outcome(False, latency, f"status {status!r} {message}".strip())
    mars, ar = trace["mars"], trace["ar"]
    a, m, compared_on = answers(ar, mars)
    lanes = tuple(k for k in ("ar", "mars", "verified") if trace.get(k))
    verified = trace.get("verified") or {}
    return Outcome(True, latency, mars_tokens=int(mars["tokens"]), mars_forwards=len(mars["thresholds"]),
                   thresholds=tuple(mars["thresholds"]), agreement=agreement(a, m), identical=a == m, lanes=lanes,
                   compared_on=compared_on, verified_tokens=int(verified.get("tokens", 0)),
                   verified_forwards=int(verified.get("forwards", 0)),
                   verified_seconds=float(verified.get("seconds", 0.0)))


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
    return {
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
    }


def run_round(url: str, args: argparse.Namespace, clients: int, adapt: bool, progress) -> dict:
    """C client threads, each with its own session, started together; returns the round's row."""
    results: list[Outcome] = []
    start = threading.Barrier(clients + 1)
    threads = [threading.Thread(target=client_worker, args=(url, args, adapt, start, results, progress),
                                name=f"client-{i}", daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        start.wait(timeout=120)  # every client connected: the round's clock starts now
    t0 = time.perf_counter()
    for t in threads:
        t.join(timeout=args.timeout * args.requests_per_client + 60)
    wall = time.perf_counter() - t0
    missing = clients * args.requests_per_client - len(results)
    results += [Outcome(False, 0.0, "client thread did not finish")] * max(missing, 0)
    return summarise(clients, adapt, results, wall)


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


def machine_info(args: argparse.Namespace) -> dict:
    """Where the numbers come from: platform, CPUs, torch threads (as the app's environment gives them), model."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    return {
        "platform": platform.platform(), "python": platform.python_version(), "processor": platform.processor(),
        "cpu_count": os.cpu_count(), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
        "model": args.model or "default (embedded)",
    }


def plot(rows: list[dict], path: str, title: str) -> None:
    """Throughput and p95 latency against clients (adapt off vs on), and the mean τ in force in a second panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    latency_axis = left.twinx()
    for adapt, colour in (("off", "#64748b"), ("on", "#2563eb")):
        sel = [r for r in rows if r["adapt"] == adapt]
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
    p.add_argument("--prompt", default=DEFAULT_PROMPT)
    p.add_argument("--threshold", type=float, default=0.9, help="base threshold τ")
    p.add_argument("--block-size", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--model", default=None, help="MARS checkpoint for app.py --model (default: the embedded model)")
    p.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS for the app (default: unset)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per request before it counts as failed")
    p.add_argument("--max-requests", type=int, default=500, help="refuse runs that would send more requests")
    p.add_argument("--startup-timeout", type=float, default=300.0, help="seconds to wait for the app to answer")
    p.add_argument("--json", default=None, help="write rows, settings and machine info here")
    p.add_argument("--plot", default=None, help="write a matplotlib figure here (.png)")
    args = p.parse_args(argv)
    if not 0.0 < args.threshold <= 1.0:
        p.error(f"--threshold must be in (0, 1], got {args.threshold:g}")
    if args.requests_per_client < 1 or args.max_new_tokens < 1 or args.timeout <= 0:
        p.error("--requests-per-client, --max-new-tokens and --timeout must be positive")
    total = 2 * sum(args.clients) * args.requests_per_client
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
    keys = ("clients", "requests_per_client", "prompt", "threshold", "block_size", "max_new_tokens", "model",
            "threads", "timeout")
    return {k: getattr(args, k) for k in keys} | {"temperature": 0.0, "concurrency": max(args.clients),
                                                  "throughput_counts": "MARS-lane tokens only"}


def run_rounds(args: argparse.Namespace) -> list[dict]:
    """Launch the app, warm it up, and run every (clients, adapt) round; the app is ended whatever happens."""
    from tqdm import tqdm

    rows: list[dict] = []
    total = 2 * sum(args.clients) * args.requests_per_client
    print(f"launching app.py (model: {args.model or 'default'}, concurrency {max(args.clients)})…", flush=True)
    with launched_app(args.model, "--concurrency", str(max(args.clients)), threads=args.threads,
                      timeout=args.startup_timeout) as url:
        try:
            print(f"warm-up request (not counted): {warm_up(url, args):.1f} s", flush=True)
            with tqdm(total=total, desc="requests", unit="req", file=sys.stderr) as progress:
                for clients in args.clients:
                    for adapt in (False, True):
                        progress.set_postfix_str(f"C={clients} adapt {'on' if adapt else 'off'}")
                        rows.append(run_round(url, args, clients, adapt, progress))
        finally:
            STOP.set()  # client threads still out (after Ctrl-C) send nothing more while the app ends
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    """Run the rounds, print the table, write --json and --plot; Ctrl-C ends the app and exits with 130."""
    args = parse_args(argv)
    try:
        rows = run_rounds(args)
    except KeyboardInterrupt:
        print("\ninterrupted: the app was ended", file=sys.stderr)
        raise SystemExit(130) from None
    print(f"\nbase τ {args.threshold:g}, B {args.block_size}, {args.max_new_tokens} max new tokens, "
          f"{args.requests_per_client} request(s) per client; each /race runs the AR and MARS lanes (and any "
          "verified lane) in turn on the same machine: tok/s counts MARS-lane tokens over all clients per wall "
          "second of the round; v tok, v t/f, v t/s: the verified lane's tokens, tokens per forward and tokens per "
          "wall second, counted the same way")
    print_table(rows)
    if args.json:
        report = {"settings": settings(args), "machine": machine_info(args), "rows": rows}
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
