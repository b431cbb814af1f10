"""docs/speed.md's tables: what MARS buys on each kind of machine, identity, the forward against the weights' read,
the price of width, the runtime's check, and the findings that still hold.

The speed tables read every `mars-bench --json` record under records/speed/ (and records/gpu_*/ for the GPU), each
filed by its own machine record (`_records.kind`), so a new run of `benchmarks/machine_tables.sh` adds its rows
to its machine kind's table, each row naming its machine, commit and date; a record replaced by a newer run of the
same name replaces its rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from . import _records as R

SPEED = "speed/*.json"
GPU_RUNS = ("b1.json", "b1_never_trained.json", "b16.json", "b64.json")  # the runs of 18 or more prompts
IDENTITY = "identity/*.json"

# (one-token method, verified method) by forward, in the order a kind's rows show them
FORWARDS = (("compiled", "ar_compiled", "mars_verified_compiled"),
            ("eager", "ar", "mars_verified"),
            ("static", "ar_static", "mars_verified_static"))
WEIGHTS = {"f32": "F32", "bf16": "BF16", "q8_0": "Q8_0", "q4_1_shipped": "Q4_1 as shipped"}

HEADER = ("run", "`generate` tokens/s", "one-token", "verified", "verified ÷ one-token", "tokens per forward",
          "prompt lookup", "llama.cpp one-token (verified ÷ it)", "machine", "measured")


def speed_rows(record: dict[str, Any]) -> list[list[str]]:
    """A mars-bench record's rows for a speed table: one per batch size and forward (compiled, eager, static) that
    has a verified row, each against `generate` at that batch, with the peers the run measured."""
    rows = []
    batches = sorted({r["batch_size"] for r in record.get("rows", ())})
    for batch in batches:
        generate = R.summary(record, "hf_generate", batch)
        gen = generate and generate["tokens_per_second"]
        lookup = R.summary(record, "hf_prompt_lookup", batch)
        for forward, one_method, verified_method in FORWARDS:
            verified = R.summary(record, verified_method, batch)
            if verified is None or verified["threshold"] is None or verified["threshold"] >= 1:
                continue
            one = R.summary(record, one_method, batch)
            v = verified["tokens_per_second"]
            o = one and one["tokens_per_second"]
            peers = []
            for weights, name in WEIGHTS.items():
                engine = R.summary(record, "llamacpp_ar", batch, weights)
                if engine is not None:
                    peers.append(f"{name} {R.num(engine['tokens_per_second'])} "
                                 f"({R.times(R.ratio(v, engine['tokens_per_second']))})")
            rows.append([
                f"{R.run_label(record, batch)}, {forward}",
                R.num(gen),
                against(o, gen),
                f"**{R.num(v)}** ({R.times(R.ratio(v, gen))})" if gen else f"**{R.num(v)}**",
                R.times(R.ratio(v, o)),
                R.num(verified["tokens_per_forward"], 2),
                against(lookup and lookup["tokens_per_second"], gen),
                "; ".join(peers) or R.DASH,
                R.machine_cell(record["machine"]),
                R.provenance(record),
            ])
    return rows


def against(x: float | None, reference: float | None) -> str:
    """'69.4 (1.66×)': tokens/s and its ratio to `generate` (the dash where not measured)."""
    if x is None:
        return R.DASH
    return f"{R.num(x)} ({R.times(R.ratio(x, reference))})" if reference else R.num(x)


def by_kind(records_dir: Path, kind: str, dtype: str) -> list[tuple[str, dict[str, Any]]]:
    """The speed records of a machine kind and dtype (8-bit weights or not), in name order."""
    return [(name, rec) for name, rec in R.read_all(records_dir, SPEED)
            if R.kind(rec["machine"]) == kind and R.dtype(rec["machine"].get("dtype")) == dtype]


def kind_table(kind: str, dtype: str) -> Callable[[Path], str]:
    """The speed table of one machine kind in one dtype: every record of it, batch by batch."""
    def table(records_dir: Path) -> str:
        found = by_kind(records_dir, kind, dtype)
        if not found:
            raise FileNotFoundError(f"no speed record of kind {kind} in {dtype} under {records_dir}/speed")
        rows = [row for _, rec in found for row in speed_rows(rec)]
        rows.sort(key=lambda row: int(row[0].split(",")[0].removeprefix("batch ")))  # batch 1 first, stable
        return R.table(HEADER, rows)
    return table


def gpu(records_dir: Path) -> str:
    """The GPU run (benchmarks/static_gpu.sh): batch 1, 16 and 64, the static runtime (CUDA graphs)."""
    rows = []
    for folder in sorted(p for p in Path(records_dir).glob("gpu_*") if p.is_dir()):
        for name in GPU_RUNS:
            if (folder / name).is_file():
                rows += speed_rows(R.read(records_dir, f"{folder.name}/{name}"))
    return R.table(HEADER, rows)


def identity(records_dir: Path) -> str:
    """verified = one-token decoding, answer for answer, by machine (benchmarks/exactness.py records), and batched =
    alone where the run asked (--batched)."""
    found = R.read_all(records_dir, IDENTITY)
    found += [(f"{p.parent.name}/{p.name}", R.read(records_dir, f"{p.parent.name}/{p.name}"))
              for p in sorted(Path(records_dir).glob("gpu_*/exactness*.json"))]
    rows = []
    for _, rec in found:
        forward = "compiled" if rec.get("compiled") else "static" if rec.get("static") else "eager"
        for run in rec["dtypes"].values():
            splits = run["splits"]
            cells = []
            for split in ("heldout", "never_trained"):
                s = splits.get(split)
                cells.append(R.of(s and s["identical"], s and s["prompts"]))
            ran = [s for s in splits.values() if "ar_batched_equals_alone" in s]
            total = sum(s["prompts"] for s in ran)
            batched = (f"{sum(s['ar_batched_equals_alone'] for s in ran)}/{total}, "
                       f"{sum(s['verified_batched_equals_alone'] for s in ran)}/{total}") if ran else "not run"
            check = run.get("width_check") or {}
            rows.append([
                R.machine_cell(run["machine"]),
                forward,
                str(rec["max_new_tokens"]),
                *cells,
                batched,
                f"{check.get('differing')} of {check.get('rows')}" if check else R.DASH,
                R.provenance(rec),
            ])
    return R.table(("machine", "forward", "new tokens", "held-out: verified = one-token",
                    "never-trained: verified = one-token", "each split as one batch = alone: one-token, verified",
                    "width check: rows differing", "measured"), rows)


def served(found: list[tuple[str, dict[str, Any]]], field: str) -> list[tuple[str, dict[str, Any]]]:
    """One batch-1 record holding `field` per machine kind, core (where a record names it: machine.cpu_core) and
    dtype, in name order: the weights load() serves there (8-bit where a record has them: the kinds whose kernel has
    the int8 path), the newest of them."""
    def rank(rec: dict[str, Any]) -> tuple[int, str]:  # fewer bits first, then the newest; a tie: the last by name
        return -rec["machine"].get("weight_bits", 16), R.date(rec)

    best: dict[tuple[str, str, str], tuple[str, dict[str, Any]]] = {}
    for name, rec in found:
        if rec.get(field) and any(r["batch_size"] == 1 for r in rec["rows"]):
            key = R.machine_key(rec["machine"])
            if key not in best or rank(rec) >= rank(best[key][1]):
                best[key] = (name, rec)
    return sorted(best.values(), key=lambda item: item[0])


def forward(records_dir: Path) -> str:
    """A one-token forward against one read of the weights (mars-bench's weight_stream), how long the compiled
    forward took to be ready, and the whole start (load, conversion, kernel build, packing, checks, cost curve and
    compile; from an empty or a kept MARS_CACHE) where the record timed it, by machine: one batch-1 record of each
    kind and dtype that measured it (served())."""
    rows = []
    gpus = [f"{p.parent.name}/{p.name}" for p in sorted(Path(records_dir).glob("gpu_*/b1.json"))]
    found = R.read_all(records_dir, SPEED) + [(name, R.read(records_dir, name)) for name in gpus]
    for name, rec in served(found, "weight_stream"):
        ws = rec["weight_stream"]
        read = ws["weight_read_ms"]
        eager, compiled = ws.get("forward_1_ms_eager"), ws.get("forward_1_ms_compiled")
        rows.append([
            R.machine_cell(rec["machine"]),
            R.num(ws["weight_bytes"] / 1e6, 0),
            R.num(read, 2),
            f"{R.num(eager, 2)} ({R.times(ws.get('forward_1_over_read_eager'))})" if eager else R.DASH,
            f"{R.num(compiled, 2)} ({R.times(ws.get('forward_1_over_read_compiled'))})" if compiled else R.DASH,
            linear_cell(ws),
            rec["machine"].get("compiled_forward", R.DASH),
            start_cell(rec.get("start")),
            f"`{name}`, {R.provenance(rec)}",
        ])
    return R.table(("machine", "weights MB", "read once, ms", "one-token forward, eager: ms (× the read)",
                    "compiled: ms (× the read)", "of it, the linear layers: ms (× the read)", "compiled forward ready",
                    "start to decoding", "record"), rows)


def linear_cell(ws: dict[str, Any]) -> str:
    """The compiled forward's time in the rows kernel's linear products (weight_stream's linear_1_ms), where taken."""
    ms = ws.get("linear_1_ms_compiled")
    return f"{R.num(ms, 2)} ({R.times(ws['linear_1_over_read_compiled'])})" if ms is not None else R.DASH


def start_cell(start: dict[str, Any] | None) -> str:
    """mars-bench's start: seconds until it could decode, and whether MARS_CACHE was empty (a first start)."""
    if not start:
        return R.DASH
    return f"{R.num(start['ready_s'], 0)} s ({start['cache_at_start']} MARS_CACHE)"


WIDTHS = (2, 4, 8, 16)


def width(records_dir: Path) -> str:
    """The price of width at batch 1: a cached forward of w new tokens against one of 1 token, from the cost curve
    each run sized its trees by (ours: the runtime's forward; llama.cpp's: its engine's), one record per kind and
    dtype (served())."""
    rows = []
    for name, rec in served(R.read_all(records_dir, SPEED), "cost_curve"):
        curves = [(f"ours: {R.linear(rec['cost_curve'].get('machine', rec['machine']))}, "
                   f"{rec['cost_curve'].get('machine', {}).get('forward', 'eager')}", rec["cost_curve"])]
        curves += [(f"llama.cpp {WEIGHTS.get(w, w)}", engine["cost_curve"])
                   for w, engine in (rec.get("llamacpp") or {}).items() if engine.get("cost_curve")]
        for label, curve in curves:
            seconds = dict(zip(curve["widths"], curve["seconds"][curve["batch_sizes"].index(1)]))
            one = seconds[1]
            rows.append([R.machine_cell(rec["machine"]), label, R.num(one * 1000, 1),
                         *(R.times(seconds[w] / one) if w in seconds else R.DASH for w in WIDTHS),
                         f"`{name}`, {R.provenance(rec)}"])
    return R.table(("machine", "forward", "1 token, ms", *(f"{w} tokens" for w in WIDTHS), "record"), rows)


def watch(records_dir: Path) -> str:
    """What keeping the runtime true to the model costs (benchmarks/runtime_watch.py): the check before every decode,
    its share of verified decoding, and memory held after long prompts in four threads."""
    rows = []
    for name, rec in R.read_all(records_dir, "watch/*.json"):
        share = rec.get("check_share_compiled") or {}
        checks = [rec.get(k) for k in ("check_eager", "check_compiled")]
        rows.append([
            R.machine_cell(rec["machine"]),
            " / ".join(R.num(c["refresh_ms"]) for c in checks if c) or R.DASH,
            " / ".join(f"{R.num(c['digests_ms'])} + {R.num(c['make_ms'])}" for c in checks if c) or R.DASH,
            (f"{R.times(share['checked_over_unchecked_time'])} (passes "
             f"{', '.join(R.times(x, 3) for x in share['checked_over_unchecked_time_by_pass'])})") if share else R.DASH,
            " / ".join(_signed(rec[k]["held_mb"]) for k in ("eager", "compiled")),
            f"`{name}`, {R.provenance(rec)}",
        ])
    return R.table(("machine", "check before a decode, ms (eager / compiled)",
                    "of it: the weights' digests + the model's make, ms", "verified decoding's time, checked ÷ not",
                    "MB held after four threads' long prompts (eager / compiled)", "record"), rows)


def _signed(mb: float) -> str:
    """Megabytes held as a change: +25, −111 (the process gave memory back)."""
    return f"{'+' if mb >= 0 else '−'}{R.num(abs(mb), 0)}"


def _cell(record: dict[str, Any], method: str, batch: int = 1, weights: str | None = None) -> float | None:
    row = R.summary(record, method, batch, weights)
    return row and row["tokens_per_second"]


def _curve(curve: dict[str, Any], w: int) -> float:
    seconds = dict(zip(curve["widths"], curve["seconds"][curve["batch_sizes"].index(1)]))
    return seconds[w] / seconds[1]


def findings(records_dir: Path) -> str:
    """What still holds, one line each, its figure read from the record it names."""
    avx512 = R.read(records_dir, "speed/avx512_bf16_b1.json")
    batches = R.read(records_dir, "speed/avx512_bf16_batches.json")
    amx = R.read(records_dir, "speed/amx_bf16_b1.json")
    amx_batches = R.read(records_dir, "speed/amx_bf16_batches.json")
    avx2 = R.read(records_dir, "speed/avx2_bf16_b1.json")
    avx2_fp32 = R.read(records_dir, "speed/avx2_fp32_b1.json")
    same = R.read(records_dir, "identity/avx512_bf16_compiled_batched.json")["dtypes"]["auto"]["splits"]
    h100 = R.read(records_dir, "gpu_h100/b1.json")
    h100_same = R.read(records_dir, "gpu_h100/exactness_static.json")["dtypes"]["auto"]["splits"]
    ours, theirs = avx512["cost_curve"], avx512["llamacpp"]["bf16"]["cost_curve"]

    def vs(rec: dict[str, Any], a: str, b: str, batch: int = 1, weights: str | None = None) -> str:
        return R.times(R.ratio(_cell(rec, a, batch), _cell(rec, b, batch, weights)))

    rows = [
        ("Width costs little on our rows kernel and much on llama.cpp's CPU kernels, so verified decoding's trees "
         "pay on ours", f"8 tokens cost {R.times(_curve(ours, 8))} one token on ours, "
         f"{R.times(_curve(theirs, 8))} on llama.cpp BF16", "speed/avx512_bf16_b1.json"),
        ("Where our rows kernel serves (AMX, AVX512-BF16), verified decoding outruns llama.cpp's one-token decoding "
         "of the model's bf16 weights (ours on the int8 grid where 8-bit weights serve)",
         f"{vs(avx512, 'mars_verified_compiled', 'llamacpp_ar', weights='bf16')} (AVX512-BF16), "
         f"{vs(amx, 'mars_verified_compiled', 'llamacpp_ar', weights='bf16')} (AMX)",
         "speed/avx512_bf16_b1.json, speed/amx_bf16_b1.json"),
        ("On AVX512-BF16 and AVX2 (the rows kernel, 8-bit weights, compiled) verified decoding against llama.cpp's "
         "one-token decoding of the 4-bit file users run (issue 74's floors: 1.5x, 1.2x), and on AVX2 against "
         "transformers' fp32 generate there",
         f"{vs(avx512, 'mars_verified_compiled', 'llamacpp_ar', weights='q4_1_shipped')} (AVX512-BF16), "
         f"{vs(avx2, 'mars_verified_compiled', 'llamacpp_ar', weights='q4_1_shipped')} (AVX2) llama.cpp Q4_1; "
         f"{R.times(R.ratio(_cell(avx2, 'mars_verified_compiled'), _cell(avx2_fp32, 'hf_generate')))} fp32 "
         "`generate` (AVX2)", "speed/avx512_bf16_b1.json, speed/avx2_bf16_b1.json, speed/avx2_fp32_b1.json"),
        ("In a batch a wide forward costs every sample's rows: the plan feeds narrow trees, and verified's lead over "
         "one-token decoding shrinks or turns", f"AVX512-BF16 batch 4: "
         f"{vs(batches, 'mars_verified_compiled', 'ar_compiled', 4)}, batch 8: "
         f"{vs(batches, 'mars_verified_compiled', 'ar_compiled', 8)} one-token; AMX batch 8: "
         f"{vs(amx_batches, 'mars_verified_compiled', 'ar_compiled', 8)}",
         "speed/avx512_bf16_batches.json, speed/amx_bf16_batches.json"),
        ("The eager and the compiled forward are two exact decoders, each checked on its own: in bf16 their "
         "one-token answers part at near ties",
         f"{same['heldout']['one_token_equals_dynamic']}/{same['heldout']['prompts']} held-out and "
         f"{same['never_trained']['one_token_equals_dynamic']}/{same['never_trained']['prompts']} never-trained "
         "the same", "identity/avx512_bf16_compiled_batched.json"),
        ("On a GPU, verified static decoding is slower than one-token static decoding and not yet identical to it "
         "(issue 76)", f"{vs(h100, 'mars_verified_static', 'ar_static')} one-token; verified = one-token on "
         f"{R.of(h100_same['heldout']['identical'], h100_same['heldout']['prompts'])} and "
         f"{R.of(h100_same['never_trained']['identical'], h100_same['never_trained']['prompts'])}",
         "gpu_h100/b1.json, gpu_h100/exactness_static.json"),
    ]
    def cite(names: str) -> str:
        return ", ".join(f"`{n}` ({R.date(R.read(records_dir, n))})" for n in (n.strip() for n in names.split(",")))
    return R.table(("finding", "figure", "record (date)"), [(f, fig, cite(names)) for f, fig, names in rows])


TABLES = {
    "amx_bf16": kind_table("amx", "bf16"),
    "avx512_bf16": kind_table("avx512_bf16", "bf16"),
    "avx2_bf16": kind_table("avx2", "bf16"),
    "avx2_fp32": kind_table("avx2", "fp32"),
    "gpu": gpu,
    "identity": identity,
    "forward": forward,
    "width": width,
    "watch": watch,
    "findings": findings,
}
