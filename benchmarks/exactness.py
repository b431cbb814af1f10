"""Is verified decoding one-token decoding on the real model, on this machine: answer for answer, in the dtype load()
picks here (or those asked for), on prompts of both evaluation splits; and the width check behind it.

    python benchmarks/exactness.py [--dtypes auto,fp32,bf16] [--splits heldout,never_trained] [--limit 30]
                                   [--max-new-tokens 96] [--generate] [--fastest-kernels] [--static] [--batched]
                                   [--no-runtime] [--compile] [--json out.json]

Each dtype is loaded and prepared (mars_core.prepare: one kernel for every width, attention row by row, the width
check); every prompt is decoded one token per forward ("ar") and in verified mode under the same runtime, and the
answers are compared token for token. --generate also compares transformers' greedy generate (its own attention).
--fastest-kernels prepares the runtime without width invariance, to see what it buys. --static runs the static-shape
runtime (prepare(static=True)) and also compares its one-token answers with the default runtime's. --batched also
decodes each split as one batch, one-token and verified, against the one-token answers alone. --no-runtime calls
generate() with no runtime at all, as the shortest user code does (it then runs prepared(model): the first call
prepares the model, and the report says how long that took). --compile decodes on the compiled forward
(runtime/compiled.py) and also compares its one-token answers with the uncompiled runtime's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mars_core import generate, load, prepare  # noqa: E402
from mars_core.evaluation.prompts import load_split  # noqa: E402
from mars_core.generate import encode_prompt, stop_token_ids  # noqa: E402
from mars_core.machine import machine_line  # noqa: E402
from mars_core.runtime import prepared  # noqa: E402
from mars_core.runtime.graphs import graph_counts  # noqa: E402


@torch.inference_mode()
def hf_greedy(model, tokenizer, prompt: str, max_new: int) -> list[int]:
    """transformers' greedy generate, cut after the first stop token."""
    ids = torch.tensor([encode_prompt(tokenizer, prompt)], device=model.device)
    row = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new,
                         pad_token_id=tokenizer.pad_token_id)[0, ids.shape[1]:].tolist()
    stops = set(stop_token_ids(model, tokenizer))
    return next((row[: k + 1] for k, t in enumerate(row) if t in stops), row)


def shared_prefix(a: list[int], b: list[int]) -> float:
    """The share of the longer answer that both begin with."""
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return n / max(len(a), len(b), 1)


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Where two answers first part (a token index; one's end counts), None where they are the same."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def parted(index: int, row: dict) -> dict:
    """Where a prompt's verified answer left its one-token answer: the token index, four tokens of each from there."""
    at = row["first_difference"]
    return {"prompt": index, "at": at, "one_token": row["one"][at:][:4], "verified": row["verified"][at:][:4]}


def run(dtype: str, splits: dict[str, list[str]], max_new: int, invariant: bool, with_generate: bool,
        static: bool = False, batched: bool = False, no_runtime: bool = False, compiled: bool = False) -> dict:
    model, tokenizer = load(dtype=dtype)
    first = time.perf_counter()
    if no_runtime:  # the shortest call: generate() prepares the model on first use (prepared)
        generate(model, tokenizer, "Hi", strategy="verified", max_new_tokens=1)
        runtime, passed = prepared(model), {}
    else:
        runtime = prepare(model, invariant=invariant, static=static)
        passed = {"runtime": runtime}
    first = time.perf_counter() - first
    dynamic = dataclasses.replace(runtime, static=False)  # what the static or compiled answers are compared with
    if compiled:
        from mars_core.runtime.compiled import compile_runtime

        runtime = compile_runtime(model, runtime)
        passed = {"runtime": runtime}
        print(f"{dtype}: forward {runtime.forward_note}")
    print(f"{dtype}: {machine_line(runtime.record(model))}; {runtime.guarantee()}; width check {runtime.width_check}")
    out = {"machine": runtime.record(model), "guarantee": runtime.guarantee(), "no_runtime": no_runtime,
           "forward": runtime.forward_note,
           "prepare_seconds": round(first, 2),
           "width_check": runtime.width_check.to_dict() if runtime.width_check else None, "splits": {}}
    for split, prompts in splits.items():
        rows, t0 = [], time.perf_counter()
        for prompt in tqdm(prompts, desc=f"{dtype} {split}"):
            one = generate(model, tokenizer, prompt, strategy="ar", max_new_tokens=max_new, **passed)
            ver = generate(model, tokenizer, prompt, strategy="verified", max_new_tokens=max_new, **passed)
            at = first_difference(ver.token_ids[0], one.token_ids[0])
            row = {"same": at is None, "first_difference": at,
                   "prefix": shared_prefix(ver.token_ids[0], one.token_ids[0]),
                   "tokens": ver.generated_tokens, "forwards": ver.forwards}
            if with_generate:
                row["same_as_generate"] = hf_greedy(model, tokenizer, prompt, max_new) == one.token_ids[0]
            if static or compiled:
                row["same_as_dynamic"] = generate(model, tokenizer, prompt, strategy="ar", max_new_tokens=max_new,
                                                  runtime=dynamic).token_ids == one.token_ids
            row["one"], row["verified"] = one.token_ids[0], ver.token_ids[0]
            rows.append(row)
        n = len(rows)
        summary = {"prompts": n, "identical": sum(r["same"] for r in rows),
                   "mean_shared_prefix": round(sum(r["prefix"] for r in rows) / n, 4),
                   "tokens_per_forward": round(sum(r["tokens"] for r in rows) / sum(r["forwards"] for r in rows), 3),
                   "seconds": round(time.perf_counter() - t0, 1)}
        summary["differing"] = [parted(i, r) for i, r in enumerate(rows) if not r["same"]]
        if with_generate:
            summary["one_token_equals_generate"] = sum(r["same_as_generate"] for r in rows)
        if static or compiled:
            summary["one_token_equals_dynamic"] = sum(r["same_as_dynamic"] for r in rows)
        if batched:  # the whole split as one batch, against each answer alone
            alone = [r["one"] for r in rows]
            for strategy in ("ar", "verified"):
                ids = generate(model, tokenizer, prompts, strategy=strategy, max_new_tokens=max_new,
                               **passed).token_ids
                summary[f"{strategy}_batched_equals_alone"] = sum(a == b for a, b in zip(ids, alone))
        out["splits"][split] = summary
        out["graphs"] = graph_counts()  # CUDA graphs captured, replayed and failed so far
        print(f"{dtype} {split}: verified identical to one-token decoding on {summary['identical']} of {n} "
              f"(mean shared prefix {summary['mean_shared_prefix']:.1%}), {summary['tokens_per_forward']} tokens "
              f"per forward" + (f"; one-token equals generate on {summary['one_token_equals_generate']} of {n}"
                                if with_generate else "")
              + (f"; one-token equals the uncompiled dynamic one on {summary['one_token_equals_dynamic']} of {n}"
                 if static or compiled else "")
              + (f"; as one batch of {n}, one-token equals one-token alone on {summary['ar_batched_equals_alone']}"
                 f", verified on {summary['verified_batched_equals_alone']}" if batched else ""))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtypes", default="auto", help="comma list of auto, fp32, bf16")
    p.add_argument("--splits", default="heldout,never_trained")
    p.add_argument("--limit", type=int, default=30, help="prompts per split (round-robin over categories)")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--generate", action="store_true", help="also compare transformers' greedy generate")
    p.add_argument("--fastest-kernels", action="store_true", help="prepare without width invariance, to compare")
    p.add_argument("--static", action="store_true", help="the static-shape decoders (prepare(static=True))")
    p.add_argument("--batched", action="store_true", help="also decode each split as one batch, against alone")
    p.add_argument("--no-runtime", action="store_true", help="call generate() with no runtime (prepared(model))")
    p.add_argument("--compile", action="store_true", help="decode on the compiled forward (runtime/compiled.py)")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    splits = {s: [r["prompt"] for r in load_split(s, args.limit)] for s in args.splits.split(",") if s}
    report = {"max_new_tokens": args.max_new_tokens, "invariant": not args.fastest_kernels,
              "static": args.static, "compiled": args.compile,
              "dtypes": {d: run(d, splits, args.max_new_tokens, not args.fastest_kernels, args.generate, args.static,
                                args.batched, args.no_runtime, args.compile) for d in args.dtypes.split(",") if d}}
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
