"""Where a decode step's time goes: static against dynamic (wall-clock per forward and torch.profiler's top ops), or
on a CPU (--parts) the forward and the step around it split at their seams.

    python benchmarks/static_profile.py [--max-new-tokens 64] [--limit 4] [--out profile.txt]
    python benchmarks/static_profile.py --parts [--no-compile] [--forwards 300] [--max-new-tokens 64] [--out parts.json]
    python benchmarks/static_profile.py --kernels [--rounds 41] [--out kernels.json]
    python benchmarks/static_profile.py --openmp-wait [--pairs 2] [--forwards 300] [--out wait.json]

Decodes a few held-out prompts at batch 1 with one-token and verified decoding (B = 4), each with the dynamic and
the static-shape decoder (Runtime.static: fixed widths, a cache allocated once, CUDA graphs on a GPU), and prints
per row the forwards, tokens per forward, milliseconds per forward, then the profiler's top operators by self time
(device time where there is a GPU: the gap between it and the wall-clock is the host's share).

--parts, the forward the app serves on a CPU (compiled where it can: `compile_runtime`; --no-compile: eager):
- the forward (batch 1, one token after 128 cached, as `mars-bench`'s weight_stream times it), stamped at its seams,
  medians over `--forwards` forwards run back to back: the whole feed and head; the decoder; of the compiled
  decoder, inductor's graph (where this torch exposes it) and what lies before and after it (dynamo's entry: guards,
  gathering the graph's inputs); the head; and the rest, the runtime's own Python around the decoder (the slots
  written, the mask, the key plan, the kernels' contexts);
- the step around it: one-token decoding (`generate`, strategy "ar") of one held-out prompt, up to
  `--max-new-tokens`, its milliseconds a forward (the prompt's forward and the check before the decode,
  runtime/watch.py, included) beside the forward's, and the torch ops it runs a forward outside the decoder and the
  head (counted in a pass of its own, by the op and by the function that called it).
Each part runs right after the last forward streamed the weights through the caches, as in decoding: the Python
between kernels runs slower there than in a loop of its own. --out writes the report as JSON.

--parts --busy-thread: the same with another thread alive that ran a parallel torch op (as the app's Train tab's or
a Batch run's thread): libgomp then lets torch's OpenMP worker spin only briefly between regions (mars_core/openmp.py).
--openmp-wait: --parts --busy-thread in fresh processes (libgomp reads its wait once, as torch loads) under libgomp's
own wait and under mars_core's (openmp.WAIT), alternated --pairs times: the whole forward's median ms of each, and
their ratio.

--kernels, the rows kernel's ops alone (no model), on the embedded model's shapes, by the rows of a call: a layer's
four products (q, k and v fused; o; gate and up fused; down: 8-bit weights where the build has the int8 path) 30 times,
the weights warm in the caches (what rows cost, not the read), and attention (9 query heads over 3 key heads of 64,
150 slots, each row seeing the slots up to its own) a layer; the fastest of --rounds, and the GMAC/s of the products.
A build against another (another commit, MARS_ROWS_FLAVOR): run it in each, nothing else running.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mars_core import generate, load, prepare  # noqa: E402
from mars_core.evaluation.bench import forward_after_prefix  # noqa: E402
from mars_core.evaluation.prompts import prompt_set  # noqa: E402
from mars_core.machine import machine_line  # noqa: E402
from mars_core.runtime.timing import fastest_seconds  # noqa: E402

compiled_module = importlib.import_module("mars_core.runtime.compiled")
forward_module = importlib.import_module("mars_core.runtime.forward")


class Stamps:
    """Seconds spent inside each seam during one forward (`inside`: how deep in the decoder or head we are now)."""

    def __init__(self) -> None:
        self.parts: dict[str, float] = collections.defaultdict(float)
        self.inside = 0

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        began = time.perf_counter()
        self.inside += 1
        try:
            yield
        finally:
            self.inside -= 1
            self.parts[name] += time.perf_counter() - began


def _wrap(owner: object, name: str, stamps: Stamps, part: str) -> Callable[[], None]:
    """owner.name timed as `part`; returns what puts it back as it was (an inherited one: inherited again)."""
    original, own = getattr(owner, name), name in vars(owner)

    def timed(*args, **kwargs):
        with stamps.part(part):
            return original(*args, **kwargs)

    setattr(owner, name, timed)
    return lambda: setattr(owner, name, original) if own else delattr(owner, name)


@contextmanager
def seams(model: torch.nn.Module, stamps: Stamps) -> Iterator[None]:
    """Inside, the decoder (compiled or not), inductor's graph where this torch has one, and the head are timed.
    Wrapped where they are called from, not hooked on the model's modules: a hook changes the model's make
    (runtime/watch.py), which would serve the uncompiled forward."""
    undo = [_wrap(compiled_module.CompiledDecoder, "__call__", stamps, "decoder"),
            _wrap(type(model.get_decoder()), "__call__", stamps, "decoder")]  # the eager decoder, called as a module
    try:
        from torch._inductor.output_code import CompiledFxGraph
        undo.append(_wrap(CompiledFxGraph, "__call__", stamps, "graph"))
    except (ImportError, AttributeError):  # another torch: the compiled decoder is not split
        pass
    head = forward_module.head
    for module in [m for name, m in list(sys.modules.items()) if name.startswith("mars_core") and m is not None]:
        if getattr(module, "head", None) is head:  # runtime.forward.head, wherever it was imported
            undo.append(_wrap(module, "head", stamps, "head"))
    try:
        yield
    finally:
        for put_back in reversed(undo):
            put_back()


def forward_parts(model, tokenizer, prompt: str, runtime, forwards: int) -> dict[str, float]:
    """Median milliseconds of each part of a one-token forward after 128 cached tokens."""
    stamps, rows = Stamps(), []
    with forward_after_prefix(model, tokenizer, [prompt], 1, runtime=runtime) as step, seams(model, stamps):
        for n in range(forwards + 20):  # the first 20 warm up
            stamps.parts.clear()
            began = time.perf_counter()
            step()
            whole = time.perf_counter() - began
            if n >= 20:
                rows.append({"whole": whole, **stamps.parts})
    names = ["whole", "decoder", "graph", "head"]
    out = {name: 1e3 * statistics.median(r.get(name, 0.0) for r in rows) for name in names}
    if out["graph"]:
        out["decoder entry and exit"] = out["decoder"] - out["graph"]
    out["around the decoder"] = out["whole"] - out["decoder"] - out["head"]
    return {k: round(v, 3) for k, v in out.items() if v}


class OpCount(TorchDispatchMode):
    """The torch ops run outside the decoder and the head (stamps.inside == 0), by op and by the calling function."""

    def __init__(self, stamps: Stamps) -> None:
        super().__init__()
        self.stamps, self.ops, self.sites = stamps, collections.Counter(), collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.stamps.inside == 0:
            self.ops[str(func)] += 1
            ours = [f for f in traceback.extract_stack() if "mars_core" in f.filename]
            self.sites[f"{Path(ours[-1].filename).name}: {ours[-1].name}" if ours else "?"] += 1
        return func(*args, **(kwargs or {}))


def step_around(model, tokenizer, prompt: str, runtime, tokens: int) -> dict:
    """One-token decoding's milliseconds a token and forward, and its torch ops a forward outside decoder and head."""
    decode = lambda: generate(model, tokenizer, prompt, strategy="ar", max_new_tokens=tokens,  # noqa: E731
                              runtime=runtime)
    decode()
    times = []
    for _ in range(3):
        began = time.perf_counter()
        result = decode()
        times.append((time.perf_counter() - began) / result.forwards)
    stamps = Stamps()
    with seams(model, stamps), OpCount(stamps) as count:
        counted = decode()
    per = lambda c: {k: round(v / counted.forwards, 1) for k, v in c.most_common(12)}  # noqa: E731
    return {"ms_a_forward": round(1e3 * statistics.median(times), 3), "forwards": result.forwards,
            "ops_a_forward": round(sum(count.ops.values()) / counted.forwards, 1),
            "ops": per(count.ops), "callers": per(count.sites)}


def busy_thread() -> None:
    """A thread that runs one parallel torch op (an OpenMP team of its own) and stays alive, as a Train tab's does."""
    ran = threading.Event()

    def other() -> None:
        x = torch.ones(1 << 20)
        torch.add(x, x)  # large enough to run in parallel
        ran.set()
        threading.Event().wait()  # alive until the process ends

    threading.Thread(target=other, name="busy", daemon=True).start()
    ran.wait()


def openmp_wait(args: argparse.Namespace) -> None:
    """--openmp-wait: --parts --busy-thread under libgomp's own wait and under mars_core's, alternated, printed."""
    from mars_core.openmp import WAIT

    waits = {"libgomp's own": {}, "mars_core's": WAIT}  # torch imported first here: unset means libgomp's own
    clean = {k: v for k, v in os.environ.items() if k not in WAIT}
    whole: dict[str, list[float]] = {name: [] for name in waits}
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "parts.json"
        for _ in range(args.pairs):
            for name, env in waits.items():
                cmd = [sys.executable, __file__, "--parts", "--busy-thread", "--forwards", str(args.forwards),
                       "--max-new-tokens", str(args.max_new_tokens), "--out", str(out),
                       *(["--model", args.model] if args.model else []),
                       *(["--dtype", args.dtype] if args.dtype else []), *(["--no-compile"] if args.no_compile else [])]
                subprocess.run(cmd, env={**clean, **env}, check=True, capture_output=True)
                report = json.loads(out.read_text())
                whole[name].append(report["forward_ms"]["whole"])
                print(f"{name} wait ({report['machine'].get('openmp_wait')}): whole forward "
                      f"{whole[name][-1]:.3f} ms")
    theirs, ours = (statistics.median(v) for v in whole.values())
    print(f"{machine_line(report['machine'])}: a one-token forward beside a busy thread, median of {args.pairs}: "
          f"libgomp's wait {theirs:.3f} ms, mars_core's {ours:.3f} ms ({theirs / ours:.2f}x)")
    if args.out:
        Path(args.out).write_text(json.dumps({"machine": report["machine"], "whole_ms": whole}, indent=1) + "\n")


def parts(model, tokenizer, runtime, args: argparse.Namespace) -> None:
    """--parts: the forward's parts and the step around it, printed (and kept as JSON at --out)."""
    if args.busy_thread:
        busy_thread()
    if not args.no_compile:
        runtime = compiled_module.compile_runtime(model, runtime)
    prompt = prompt_set(1)[0]["prompt"]
    split = forward_parts(model, tokenizer, prompt, runtime, args.forwards)
    step = step_around(model, tokenizer, prompt, runtime, args.max_new_tokens)
    report = {"machine": runtime.record(model), "forward_note": runtime.forward_note, "forward_ms": split, "step": step}
    print(f"{machine_line(report['machine'])} · {runtime.forward_note or 'eager'}")
    print("one-token forward, ms (median): " + ", ".join(f"{k} {v:.3f}" for k, v in split.items()))
    print(f"one-token decoding: {step['ms_a_forward']:.3f} ms a forward over {step['forwards']} (the prompt's forward "
          f"and the check before the decode included), {step['ms_a_forward'] - split['whole']:.3f} beyond the forward "
          f"above; {step['ops_a_forward']:.0f} torch ops a forward outside the decoder and head")
    print("  by op:     " + ", ".join(f"{k} {v}" for k, v in step["ops"].items()))
    print("  by caller: " + ", ".join(f"{k} {v}" for k, v in step["callers"].items()))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


LAYER = {"qkv": (960, 576), "o": (576, 576), "gate_up": (3072, 576), "down": (576, 1536)}  # embedded model's [n, k]
KERNEL_ROWS = (1, 2, 4, 8, 16, 24, 32)


def kernels(args: argparse.Namespace) -> None:
    """--kernels: the rows kernel's products and attention by rows, printed (and kept as JSON at --out)."""
    from mars_core.runtime import rows

    if not rows.rows_kernel():
        sys.exit(f"no rows kernel here: {rows.why_not()}")
    ops, g = torch.ops.mars_rows, torch.Generator().manual_seed(0)
    int8 = bool(ops.int8_path())
    packed = {name: ops.pack(ops.grid((torch.randn(n, k, generator=g) * 0.05).bfloat16()), int8)
              for name, (n, k) in LAYER.items()}
    macs = 30 * sum(n * k for n, k in LAYER.values())
    report = {"flavor": rows.flavor(), "build": rows.build_id(), "int8": int8, "rounds": args.rounds, "by_rows": []}
    for m in KERNEL_ROWS:
        xs = {name: torch.randn(m, k, generator=g).bfloat16() for name, (n, k) in LAYER.items()}
        products = fastest_seconds(lambda: [ops.linear(xs[name], packed[name], n, None)  # noqa: B023
                                    for _ in range(30) for name, (n, k) in LAYER.items()], args.rounds)
        q = torch.randn(1, 9, m, 64, generator=g).bfloat16()
        k, v = (torch.randn(1, 3, 150, 64, generator=g).bfloat16() for _ in range(2))
        mask = (torch.arange(150)[None, :] <= torch.arange(150 - m, 150)[:, None])[None, None]
        attention = fastest_seconds(lambda: ops.attention(q, k, v, mask, 0.125), args.rounds * 30)  # noqa: B023
        report["by_rows"].append({"rows": m, "products_ms": 1e3 * products, "gmac_s": m * macs / products / 1e9,
                                  "attention_us": 1e6 * attention})
    print(f"rows kernel {rows.flavor()} (build {rows.build_id()}), {'8-bit' if int8 else 'bf16'} weights, "
          f"{torch.get_num_threads()} threads, fastest of {args.rounds} rounds")
    for row in report["by_rows"]:
        print(f"  {row['rows']:>2} rows: a layer's products x30 {row['products_ms']:7.2f} ms ({row['gmac_s']:6.1f} "
              f"GMAC/s) · attention {row['attention_us']:6.1f} us a layer")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None)
    p.add_argument("--dtype", default=None, help="auto (default), bf16 or fp32")
    p.add_argument("--limit", type=int, default=4, help="held-out prompts")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--out", default=None, help="also write the report here")
    p.add_argument("--parts", action="store_true", help="instead: the CPU forward and its step split at their seams")
    p.add_argument("--no-compile", action="store_true", help="--parts: the eager forward (prepare() alone)")
    p.add_argument("--forwards", type=int, default=300, help="--parts: forwards timed, after 20 that warm up")
    p.add_argument("--busy-thread", action="store_true", help="--parts: beside a thread that ran a parallel op")
    p.add_argument("--openmp-wait", action="store_true", help="instead: --parts --busy-thread under libgomp's "
                   "wait and mars_core's, in fresh processes")
    p.add_argument("--pairs", type=int, default=2, help="--openmp-wait: alternated pairs of runs")
    p.add_argument("--kernels", action="store_true", help="instead: the rows kernel's ops alone, by rows")
    p.add_argument("--rounds", type=int, default=41, help="--kernels: timed rounds (the fastest kept)")
    args = p.parse_args()
    for name in ("forwards", "pairs", "rounds"):  # each is a count of runs whose medians or fastest are read
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    if args.openmp_wait:
        openmp_wait(args)
        return
    if args.kernels:
        kernels(args)
        return
    model, tokenizer = load(args.model, dtype=args.dtype)
    runtime = prepare(model)
    if args.parts:
        parts(model, tokenizer, runtime, args)
        return
    prompts = [r["prompt"] for r in prompt_set(args.limit)]
    cuda = model.device.type == "cuda"
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    lines = [f"{model.device}, {model.dtype}, {args.limit} prompts x {args.max_new_tokens} tokens, batch 1"]
    tables = []
    for name, strategy, static in (("ar_static", "ar", True), ("verified_static", "verified", True),
                                   ("ar", "ar", False), ("verified", "verified", False)):  # static first: a cut run
        # keeps what the GPU floors are about
        rt = dataclasses.replace(runtime, static=static)
        run = lambda n: [generate(model, tokenizer, q, strategy=strategy, block_size=4,  # noqa: E731
                                  max_new_tokens=n, runtime=rt) for q in prompts]
        run(args.max_new_tokens)  # warm-up: the timed decodes themselves, so every width they feed is captured
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        outs = run(args.max_new_tokens)
        if cuda:
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        forwards, tokens = sum(o.forwards for o in outs), sum(o.generated_tokens for o in outs)
        lines.append(f"{name:<16} forwards {forwards:>5}  tok/fwd {tokens / forwards:5.2f}  "
                     f"ms/fwd {1e3 * wall / forwards:7.2f}  tok/s {tokens / wall:8.1f}")
        with torch.profiler.profile(activities=activities) as prof:
            run(min(args.max_new_tokens, 32))
        key = "self_cuda_time_total" if cuda else "self_cpu_time_total"
        tables.append(f"== {name}\n{prof.key_averages().table(sort_by=key, row_limit=15)}")
        if args.out:  # written after each variant: a run cut short keeps the ones it finished
            Path(args.out).write_text("\n".join(lines + tables) + "\n")
    print("\n".join(lines + tables))


if __name__ == "__main__":
    main()
