"""The Train tab's default run, headless: a live MARS LoRA run on a built-in corpus (the embedded base model, B = 4),
its metrics stream, the seconds from Start to verified >= 2.0 tokens per forward on held-out items, the trained
model's verified answers against its own one-token decoding, and, with --control, an AR-only run (SFT) of the same
steps whose one-token answers are scored the same way.

    python benchmarks/train_live.py [--corpus counting] [--seconds 180] [--control] [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import time

import torch

from mars_core import load, prepare
from mars_core.evaluation.probe import final_check, live_probe
from mars_core.load import resolve_dtype
from mars_core.machine import machine_info
from mars_core.training.corpora import CORPORA, DEFAULT_CORPUS, corpus_split
from mars_core.training.live import LiveConfig, train_live


def run(method: str, base: torch.nn.Module, tokenizer, train, held, config: LiveConfig, probe_items: int,
        dtype: torch.dtype, cost) -> dict:
    """One live run from a fresh copy of `base`; its stream (printed as it comes) and the final figures."""
    stream: list[dict] = []
    start = time.monotonic()

    def emit(metrics: dict) -> None:
        stream.append(metrics)
        print(json.dumps(metrics), flush=True)

    model = copy.deepcopy(base)
    wrapped, callback = train_live(model, tokenizer, train, LiveConfig(**{**vars(config), "method": method}), emit,
                                   live_probe(tokenizer, held[:probe_items], config.block_size, dtype, cost)
                                   if method == "mars" else None)
    seconds = time.monotonic() - start
    _, runtime, figures = final_check(wrapped, tokenizer, held, config.block_size, dtype, max_new_tokens=96)
    reached = next((m["seconds"] for m in stream if m.get("verified_tokens_per_forward", 0) >= 2.0), None)
    return {"method": method, "steps": callback.steps, "seconds": round(seconds, 1), "stopped_by": callback.stopped_by,
            "first_point_seconds": stream[0]["seconds"] if stream else None, "verified_2_at_seconds": reached,
            "runtime_invariant": runtime.invariant, "final": figures, "stream": stream}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default=DEFAULT_CORPUS, choices=list(CORPORA))
    parser.add_argument("--model", default="smollm2-135m-instruct", help="the base model (default: the embedded base)")
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--held-out", type=int, default=8, help="held-out items for the final figures")
    parser.add_argument("--probe-items", type=int, default=2, help="held-out items each live probe decodes (the "
                        "Train tab's)")
    parser.add_argument("--learning-rate", type=float, default=LiveConfig.learning_rate)
    parser.add_argument("--batch-size", type=int, default=LiveConfig.batch_size)
    parser.add_argument("--probe-seconds", type=float, default=LiveConfig.probe_seconds)
    parser.add_argument("--lora-layers", type=int, default=LiveConfig.lora_layers,
                        help="LoRA on the top N decoder layers only (0: every layer)")
    parser.add_argument("--no-mask-row", action="store_true", help="leave the mask token's embedding row frozen")
    parser.add_argument("--control", action="store_true", help="also an AR-only (SFT) run of the same steps")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    base, tokenizer = load(args.model, dtype="fp32")  # trained in fp32 (bf16 autocast where the CPU has bf16)
    dtype = resolve_dtype(None)  # what load() picks here: the probes' and the race's dtype
    train, held = corpus_split(args.corpus, held_out=args.held_out)
    config = LiveConfig(max_seconds=args.seconds, learning_rate=args.learning_rate, batch_size=args.batch_size,
                        probe_seconds=args.probe_seconds, lora_layers=args.lora_layers,
                        train_mask_row=not args.no_mask_row)
    cost = prepare(copy.deepcopy(base).to(dtype)).cost  # the served model's curve, as the Train tab's probes use
    runs = [run("mars", base, tokenizer, train, held, config, args.probe_items, dtype, cost)]
    if args.control:
        steps = LiveConfig(**{**vars(config), "max_steps": runs[0]["steps"], "max_seconds": 10**6})
        runs.append(run("sft", base, tokenizer, train, held, steps, args.probe_items, dtype, cost))
    for r in runs:
        f = r["final"]
        print(f"{r['method']}: {r['steps']} steps in {r['seconds']} s ({r['stopped_by'] or 'steps'}); first point "
              f"{r['first_point_seconds']} s; verified >= 2.0 at {r['verified_2_at_seconds']} s; held-out "
              f"{f['items']}: tau 0.9 {f['tau_tokens_per_forward']} tok/fwd, verified "
              f"{f['verified_tokens_per_forward']} tok/fwd, verified = one-token {f['verified_identical']}/{f['items']}"
              ", "
              f"one-token answers correct "
              f"{f['ar_correct']}/{f['items']} (runtime invariant: {r['runtime_invariant']})")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"machine": machine_info(dtype=dtype), "corpus": args.corpus, "config": vars(config),
                       "runs": runs}, out, indent=1)


if __name__ == "__main__":
    main()
