"""mars-bench: wall-clock of our decoders against transformers' generate, side by side in one process.

    mars-bench --model PATH --batch-sizes 1,4 --block-sizes 4 --thresholds 1.0,0.9 --json out.json

Every method decodes the same prompts with the same max_new_tokens and stops at EOS; after a warm-up
each configuration runs `--repeats` times and the median is reported.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from tqdm.auto import tqdm

from .generate import encode_prompt, generate, stop_token_ids

METHODS = ("hf_generate", "hf_prompt_lookup", "ar", "mars_sliding", "mars_block")


@dataclass
class Row:
    method: str
    batch_size: int
    block_size: int | None  # None for one-token methods
    threshold: float | None
    tokens_per_forward: float | None  # None where transformers does not report forwards
    generated_tokens: int
    seconds: float
    tokens_per_second: float
    speedup_vs_hf_generate: float | None = None


def _hf(model, tokenizer, prompts: list[str], max_new: int, lookup: bool) -> tuple[int, int | None]:
    """transformers' generate, greedy with KV cache (or prompt lookup): (generated tokens up to EOS, None)."""
    ids = [encode_prompt(tokenizer, p) for p in prompts]
    tokenizer.padding_side = "left"
    batch = tokenizer.pad({"input_ids": ids}, return_tensors="pt").to(model.device)
    extra = {"prompt_lookup_num_tokens": 10} if lookup else {}
    out = model.generate(
        **batch, max_new_tokens=max_new, do_sample=False, pad_token_id=tokenizer.pad_token_id, **extra
    )
    stops = set(stop_token_ids(model, tokenizer))
    tokens = 0
    for row in out[:, batch["input_ids"].shape[1] :].tolist():
        cut = next((k + 1 for k, t in enumerate(row) if t in stops), len(row))
        tokens += cut
    return tokens, None


def _ours(strategy: str, block_size: int, threshold: float) -> Callable:
    def run(model, tokenizer, prompts, max_new):
        r = generate(model, tokenizer, prompts, strategy=strategy, block_size=block_size, threshold=threshold,
                     max_new_tokens=max_new)
        return r.generated_tokens, sum(r.sample_forwards)

    return run


def configurations(methods, block_sizes, thresholds):
    """(method, block_size, threshold, runner) for every requested combination."""
    for m in methods:
        if m in ("hf_generate", "hf_prompt_lookup"):
            lookup = m == "hf_prompt_lookup"
            yield m, None, None, lambda mo, tok, p, n, lookup=lookup: _hf(mo, tok, p, n, lookup)
        elif m == "ar":
            yield m, None, None, _ours("ar", 1, 1.0)
        else:
            for b in block_sizes:
                for t in thresholds:
                    yield m, b, t, _ours(m.removeprefix("mars_"), b, t)


def time_run(runner, model, tokenizer, batches: list[list[str]], max_new: int) -> tuple[float, int, int | None]:
    """Seconds, generated tokens and sample-forwards of one pass over all batches."""
    t0 = time.perf_counter()
    tokens, forwards = 0, 0
    for batch in batches:
        n, f = runner(model, tokenizer, batch, max_new)
        tokens += n
        forwards = None if f is None or forwards is None else forwards + f
    return time.perf_counter() - t0, tokens, forwards


def bench(
    model, tokenizer, prompts: list[str], *, methods=METHODS, batch_sizes=(1,), block_sizes=(4,),
    thresholds=(1.0, 0.9), max_new_tokens=64, repeats=3, progress: bool = True,
) -> list[Row]:
    """Time every configuration at every batch size; speedups are against hf_generate at the same batch size."""
    rows: list[Row] = []
    jobs = [
        (bs, cfg) for bs in batch_sizes for cfg in configurations(methods, block_sizes, thresholds)
        if not (cfg[0] == "hf_prompt_lookup" and bs > 1)  # transformers' prompt lookup takes batch 1 only
    ]
    for bs, (method, b, t, runner) in tqdm(jobs, desc="mars-bench", disable=not progress):
        batches = [prompts[i : i + bs] for i in range(0, len(prompts), bs)]
        runner(model, tokenizer, batches[0][:1], 4)  # warm-up
        runs = [time_run(runner, model, tokenizer, batches, max_new_tokens) for _ in range(repeats)]
        seconds = statistics.median(r[0] for r in runs)
        tokens, forwards = runs[0][1], runs[0][2]
        tpf = tokens / forwards if forwards else (1.0 if method == "hf_generate" else None)
        rows.append(Row(method, bs, b, t, tpf, tokens, seconds, tokens / seconds))
    for r in rows:
        base = next((x for x in rows if x.method == "hf_generate" and x.batch_size == r.batch_size), None)
        if base is not None:
            r.speedup_vs_hf_generate = base.seconds / r.seconds
    return rows


def format_table(rows: list[Row]) -> str:
    head = f"{'method':<17}{'batch':>6}{'B':>4}{'τ':>6}{'tok/fwd':>9}{'tokens':>8}{'sec':>9}{'tok/s':>9}{'speedup':>9}"
    lines = [head, "-" * len(head)]
    for r in rows:
        fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
        lines.append(
            f"{r.method:<17}{r.batch_size:>6}{fmt(r.block_size, 'd'):>4}{fmt(r.threshold, '.2f'):>6}"
            f"{fmt(r.tokens_per_forward, '.2f'):>9}{r.generated_tokens:>8}{r.seconds:>9.2f}"
            f"{r.tokens_per_second:>9.1f}{fmt(r.speedup_vs_hf_generate, '.2f'):>9}"
        )
    return "\n".join(lines)


def parse_list(text: str, cast) -> list:
    return [cast(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="mars-bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="name or path for mars_core.load (default: the embedded model)")
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma list of {METHODS}")
    p.add_argument("--batch-sizes", default="1", help="comma list, e.g. 1,4,16")
    p.add_argument("--block-sizes", default="4", help="comma list, e.g. 4,8")
    p.add_argument("--thresholds", default="1.0,0.9", help="comma list, e.g. 1.0,0.95,0.9,0.8")
    p.add_argument("--limit", type=int, default=None, help="use the first N prompts")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3, help="timed runs per configuration; the median is kept")
    p.add_argument("--dtype", default="auto", help="auto, bf16 or fp32")
    p.add_argument("--quick", action="store_true", help="a small slice for CI: 2 prompts, 16 tokens, 1 repeat")
    p.add_argument("--json", default=None, help="write the rows to this JSON file")
    args = p.parse_args(argv)

    from .load import load
    from .prompts import DEFAULT_PROMPTS

    methods = parse_list(args.methods, str)
    unknown = set(methods) - set(METHODS)
    if unknown:
        p.error(f"unknown methods {sorted(unknown)}; choose from {METHODS}")
    prompts = [x["prompt"] for x in DEFAULT_PROMPTS][: 2 if args.quick else args.limit]
    if args.quick:
        args.max_new_tokens, args.repeats = 16, 1
    model, tokenizer = load(args.model, dtype=args.dtype)
    rows = bench(
        model, tokenizer, prompts, methods=methods, batch_sizes=parse_list(args.batch_sizes, int),
        block_sizes=parse_list(args.block_sizes, int), thresholds=parse_list(args.thresholds, float),
        max_new_tokens=args.max_new_tokens, repeats=args.repeats,
    )
    print(format_table(rows))
    if args.json:
        info = {"device": str(model.device) + f" ({platform.processor() or platform.machine()}, "
                f"{torch.get_num_threads()} threads)", "dtype": str(model.dtype).removeprefix("torch."),
                "model": args.model or "default", "prompts": len(prompts), "max_new_tokens": args.max_new_tokens}
        with open(args.json, "w") as f:
            json.dump({**info, "rows": [asdict(r) for r in rows]}, f, indent=2)


if __name__ == "__main__":
    main()
