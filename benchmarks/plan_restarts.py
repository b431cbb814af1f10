"""Restarts where drafts pay: verified decoding with the plan's rule that a plain forward is no option where drafts pay
(plan.drafts_pay) against the plan without it (drafts_pay read as never), the same prompts, alternated, one process.

    python benchmarks/plan_restarts.py [--splits heldout,never_trained] [--limit 18] [--max-new-tokens 64]
        [--slopes 0.05,0.1,0.15,0.2,0.3] [--llamacpp-weights f32,bf16] [--passes 2] [--json out.json]

Two measures. On torch (the embedded model, load()'s dtype) the cost curve is set, t(w) = t(1) (1 + slope (w - 1)),
the shapes a curve timed under other work takes (the suite's second worker made one of 1.47x at 4 tokens), and the
speed over one-token decoding is read off it: tokens over the curve's seconds of the forwards fed, one forward a token
for one-token decoding (deterministic: no clock). On llama.cpp (the embedded model's GGUF, its own timed curve) it is
wall clock: one-token decoding and verified with and without the rule, prompt by prompt in turned order, over passes.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import mars_core.decoding.verified.plan as plan  # noqa: E402
from mars_core import generate, load, prepare  # noqa: E402
from mars_core.evaluation.prompts import load_split  # noqa: E402
from mars_core.machine import machine_line  # noqa: E402
from mars_core.runtime.curve import CostCurve  # noqa: E402

SHIPPED = plan.drafts_pay


@contextlib.contextmanager
def restarts(on: bool) -> Iterator[None]:
    """The plan with (on) or without the rule (drafts_pay as shipped, or never) inside the block; as shipped after."""
    plan.drafts_pay = SHIPPED if on else (lambda *a, **k: False)
    try:
        yield
    finally:
        plan.drafts_pay = SHIPPED


def priced(model, tokenizer, runtime, prompts: list[str], slope: float, max_new: int) -> dict:
    """Verified decoding on a set curve, with and without the rule: tokens, forwards, and speed over one-token
    decoding by the curve, t(w)/t(1) = 1 + slope (w - 1): the tokens after the prefill's first (one-token decoding
    takes a forward of t(1) for each) over the curve's seconds of the forwards after the prefill."""

    def price(w: int) -> float:
        return 1 + slope * (max(w, 1) - 1)

    curve = CostCurve.from_function(lambda b, w: 0.02 * price(w), batch_sizes=(1, 4, 16))
    rt = dataclasses.replace(runtime, cost=curve)
    out = {}
    for name, on in (("without", False), ("restarts", True)):
        tokens = forwards = 0
        seconds = 0.0
        with restarts(on):
            for p in prompts:
                widths: list[int] = []
                r = generate(model, tokenizer, p, strategy="verified", max_new_tokens=max_new, runtime=rt,
                             record=lambda f: widths.append(f.ids.shape[1]))
                tokens, forwards = tokens + r.generated_tokens, forwards + r.forwards
                seconds += sum(price(w) for w in widths[1:])  # widths[0]: the prefill, which commits one token
        out[name] = {"tokens": tokens, "forwards": forwards, "tokens_per_forward": round(tokens / forwards, 3),
                     "speed_by_curve": round((tokens - len(prompts)) / seconds, 3)}
    return out


def clocked(weights: str, prompts: list[str], max_new: int, passes: int) -> dict:
    """llama.cpp: one-token decoding, verified without and with the rule, wall clock, prompts in turned order."""
    from mars_core.engines.llamacpp import llamacpp_runtime, load_llamacpp

    engine, tokenizer = load_llamacpp(weights=weights)
    runtime = llamacpp_runtime(engine, tokenizer)
    generate(engine, tokenizer, prompts[0], strategy="ar", max_new_tokens=8)  # warm-up
    total = {k: {"seconds": 0.0, "tokens": 0, "forwards": 0} for k in ("ar", "without", "restarts")}
    same = 0
    for n in range(passes):
        for i, p in enumerate(prompts):
            ids = {}
            for k in ("ar", "without", "restarts") if (i + n) % 2 == 0 else ("restarts", "without", "ar"):
                with restarts(k != "without"):
                    t0 = time.perf_counter()
                    r = generate(engine, tokenizer, p, strategy="ar" if k == "ar" else "verified",
                                 max_new_tokens=max_new, runtime=None if k == "ar" else runtime)
                    total[k]["seconds"] += time.perf_counter() - t0
                total[k]["tokens"] += r.generated_tokens
                total[k]["forwards"] += r.forwards
                ids[k] = r.token_ids
            same += ids["without"] == ids["restarts"]
    engine.close()
    ar = total["ar"]["tokens"] / total["ar"]["seconds"]
    out = {"curve_x_one_token": [round(t / runtime.cost.at(1, [1])[0], 3) for t in runtime.cost.at(1, [1, 4, 7, 8])],
           "same_answer_both_ways": f"{same}/{len(prompts) * passes}"}
    for k, t in total.items():
        tps = t["tokens"] / t["seconds"]
        out[k] = {"tokens_per_second": round(tps, 2), "x_one_token": round(tps / ar, 3),
                  "tokens_per_forward": round(t["tokens"] / t["forwards"], 3)}
    out["restarts_over_without"] = round(out["restarts"]["tokens_per_second"] / out["without"]["tokens_per_second"], 3)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--splits", default="heldout,never_trained")
    p.add_argument("--limit", type=int, default=18)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--slopes", default="0.05,0.1,0.15,0.2,0.3", help="torch: t(w)/t(1) = 1 + slope (w - 1)")
    p.add_argument("--llamacpp-weights", default="f32,bf16", help="'' for none")
    p.add_argument("--passes", type=int, default=2, help="llama.cpp: passes over the prompts, summed")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    splits = {s: [r["prompt"] for r in load_split(s, args.limit)] for s in args.splits.split(",")}
    model, tokenizer = load(None)
    runtime = prepare(model, measure_cost=False)  # every torch row sets its own curve
    machine = runtime.record(model)
    report = {"command": "python " + shlex.join(sys.argv), "machine": machine, "torch": [], "llamacpp": []}
    print(machine_line(machine))
    for slope in (float(s) for s in args.slopes.split(",") if s):
        for split, prompts in splits.items():
            row = {"slope": slope, "x_at_4": round(1 + 3 * slope, 2), "x_at_7": round(1 + 6 * slope, 2),
                   "split": split, **priced(model, tokenizer, runtime, prompts, slope, args.max_new_tokens)}
            report["torch"].append(row)
            print(f"torch, t(4)/t(1) {row['x_at_4']}, t(7)/t(1) {row['x_at_7']}, {split}: by the curve "
                  f"{row['without']['speed_by_curve']:.2f}x one-token without the rule, "
                  f"{row['restarts']['speed_by_curve']:.2f}x with it ({row['without']['tokens_per_forward']:.2f} / "
                  f"{row['restarts']['tokens_per_forward']:.2f} tokens per forward)", flush=True)
    for weights in (w for w in args.llamacpp_weights.split(",") if w):
        for split, prompts in splits.items():
            row = {"weights": weights, "split": split, **clocked(weights, prompts, args.max_new_tokens, args.passes)}
            report["llamacpp"].append(row)
            print(f"llama.cpp {weights} (curve {row['curve_x_one_token']} at 1/4/7/8 tokens), {split}: verified "
                  f"{row['without']['x_one_token']:.3f}x one-token without the rule, "
                  f"{row['restarts']['x_one_token']:.3f}x with it = {row['restarts_over_without']:.3f}x", flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
