"""What keeping the runtime true to the model costs, and what it holds: the embedded model in load()'s dtype.

    python benchmarks/runtime_watch.py [--threads 4] [--prompt-tokens 1000] [--dtype auto] [--passes 3]
                                       [--json out.json]

- The check before every decode (runtime/watch.py: refresh): its seconds (median of 30, the model unchanged), split
  into reading the packed weights (their digests) and the model's make, against one verified decode of a held-out
  prompt (64 new tokens) and that decode's forwards.
- The check's share of verified decoding, compiled: 18 held-out prompts x 64 tokens, with the check and without it
  (the decoders' refresh made a no-op), alternated prompt by prompt over passes in one process.
- Memory held after the calls return: four threads decode under one prepared runtime, as Gradio's workers do, first a
  short prompt each (before), then a ~1,000-token prompt each (after, once the threads are done and `gc` ran): the
  process's resident memory (RSS) before and after, eager and compiled. What a long prompt leaves held is what no one
  asked for (per-thread products of a forward, free KV caches kept for reuse, compiled graphs).
"""

from __future__ import annotations

import argparse
import gc
import json
import shlex
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mars_core import generate, load, prepare  # noqa: E402
from mars_core.evaluation.prompts import load_split  # noqa: E402
from mars_core.machine import machine_info, machine_line  # noqa: E402


def rss_mb() -> float:
    """This process's resident memory in MB (/proc/self/statm: pages)."""
    import os

    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def in_threads(work, threads: int) -> None:
    """work(i) in `threads` threads at once, each to its end."""
    running = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in running:
        t.start()
    for t in running:
        t.join()


def held(model, tokenizer, runtime, threads: int, long_prompt: str) -> dict:
    """RSS after a short decode in each thread, then after a long one in each and gc."""
    def decode(prompt: str, new: int):
        return lambda i: generate(model, tokenizer, prompt, strategy="verified", block_size=4, max_new_tokens=new,
                                  runtime=runtime)

    in_threads(decode("Say hi.", 8), threads)
    gc.collect()
    before = rss_mb()
    began = time.perf_counter()
    in_threads(decode(long_prompt, 16), threads)
    seconds = time.perf_counter() - began
    gc.collect()
    after = rss_mb()
    return {"before_mb": round(before, 1), "after_mb": round(after, 1), "held_mb": round(after - before, 1),
            "long_decodes_s": round(seconds, 1)}


def check_seconds(model, tokenizer, runtime, prompt: str) -> dict:
    """refresh()'s seconds before a decode (nothing changed), its two parts, and a 64-token verified decode's."""
    from mars_core.runtime import refresh
    from mars_core.runtime.watch import digests, make_of

    def median(work, rounds: int = 30) -> float:
        times = []
        for _ in range(rounds):
            began = time.perf_counter()
            work()
            times.append(time.perf_counter() - began)
        return statistics.median(times)

    weights = [e.weight for e in runtime.linears.values()]
    def decode():
        return generate(model, tokenizer, prompt, strategy="verified", block_size=4, max_new_tokens=64,
                        runtime=runtime)

    forwards = decode().forwards
    return {"refresh_ms": round(median(lambda: refresh(model, runtime)) * 1e3, 2),
            "digests_ms": round(median(lambda: digests(weights)) * 1e3, 2),
            "make_ms": round(median(lambda: make_of(model)) * 1e3, 2),
            "weights_mb": round(sum(w.nbytes for w in weights) / 1e6, 1),
            "decode_ms": round(median(decode, 5) * 1e3, 1), "decode_forwards": forwards}


def check_share(model, tokenizer, runtime, prompts: list[str], passes: int = 2) -> dict:
    """Verified decoding with the check before each decode and without it (refresh made a no-op), alternated prompt by
    prompt in turned order over passes, one process: tokens per second each way and their ratio, by pass."""
    from mars_core.decoding import feed

    checked = feed.refresh
    seconds = {way: [0.0] * passes for way in ("checked", "unchecked")}
    tokens = 0
    try:
        for p in range(passes):
            for i, prompt in enumerate(prompts):
                for way in ("checked", "unchecked") if (i + p) % 2 == 0 else ("unchecked", "checked"):
                    feed.refresh = checked if way == "checked" else (lambda model, runtime: None)
                    began = time.perf_counter()
                    out = generate(model, tokenizer, prompt, strategy="verified", block_size=4, max_new_tokens=64,
                                   runtime=runtime)
                    seconds[way][p] += time.perf_counter() - began
                    tokens += out.generated_tokens if way == "checked" else 0
    finally:
        feed.refresh = checked
    by_pass = [round(c / u, 3) for c, u in zip(seconds["checked"], seconds["unchecked"])]
    total = {way: sum(v) for way, v in seconds.items()}
    return {"prompts": len(prompts), "passes": passes, "tokens_per_pass": tokens // passes,
            "checked_tokens_per_second": round(tokens / total["checked"], 1),
            "unchecked_tokens_per_second": round(tokens / total["unchecked"], 1),
            "checked_over_unchecked_time": round(total["checked"] / total["unchecked"], 3),
            "checked_over_unchecked_time_by_pass": by_pass}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--prompt-tokens", type=int, default=1000, help="the long prompt's length in tokens (about)")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--no-compile", action="store_true", help="eager only")
    parser.add_argument("--passes", type=int, default=3, help="passes of the check-on/off comparison (18 prompts)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    model, tokenizer = load(dtype=args.dtype)
    words = "The quick brown fox jumps over the lazy dog near the river bank. "
    long_prompt = "Summarize: " + words * (args.prompt_tokens // len(tokenizer.encode(words)) + 1)
    report = {"command": "python " + shlex.join(["benchmarks/runtime_watch.py", *(argv or sys.argv[1:])]),
              "machine": machine_info(model.device, model.dtype), "threads": args.threads,
              "prompt_tokens": len(tokenizer.encode(long_prompt))}
    print(machine_line(report["machine"]), f"{report['prompt_tokens']}-token prompt, {args.threads} threads",
          flush=True)
    runtime = prepare(model)
    prompt = load_split("heldout")[0]["prompt"]
    report["check_eager"] = check_seconds(model, tokenizer, runtime, prompt)
    print("check, eager:", report["check_eager"], flush=True)
    report["eager"] = held(model, tokenizer, runtime, args.threads, long_prompt)
    print("eager:", report["eager"], flush=True)
    if not args.no_compile:
        from mars_core.runtime.compiled import compile_runtime

        compiled = compile_runtime(model, runtime)
        report["forward_note"] = compiled.forward_note
        if compiled.compiled is not None:
            report["check_compiled"] = check_seconds(model, tokenizer, compiled, prompt)
            print("check, compiled:", report["check_compiled"], flush=True)
            prompts = [r["prompt"] for r in load_split("heldout", 18)]
            report["check_share_compiled"] = check_share(model, tokenizer, compiled, prompts, args.passes)
            print("check's share of verified decoding, compiled:", report["check_share_compiled"], flush=True)
            report["compiled"] = held(model, tokenizer, compiled, args.threads, long_prompt)
            print("compiled:", report["compiled"], flush=True)
        else:
            print("compiled:", compiled.forward_note, flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
