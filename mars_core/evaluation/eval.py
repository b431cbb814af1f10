"""mars-eval: decode an evaluation split at several thresholds and measure speed and quality.

    mars-eval [--model NAME] [--adapter DIR] [--json OUT.json] [--plot OUT.png] [--limit N] [--split heldout]
              [--thresholds 1.0,0.95,0.9,0.8,0.7,0.5] [--verified-thresholds 0.5] [--block-size 4]
              [--batch-size 16] [--max-new-tokens 128]

Threshold mode (sliding) at each --thresholds value, verified mode at each --verified-thresholds value (its
answers equal the one-token answers up to bf16 rounding: "same" says how many do, against the τ = 1 run).

Per threshold and per category (and "all"): tokens per forward, task accuracy where a gold answer exists
(mars_core.evaluation.tasks.score: the reasoning-gym task's own scorer, or exact/contains matching), exact
agreement with the base model's greedy answer (the distilled answer in heldout.jsonl IS the base greedy answer),
the mean shared-prefix fraction with it, the draft precision, and n. Also the acceptance rate by slot position (slot j =
j tokens ahead) and the base model's own accuracy (scored on the held-out answers, no decoding).
Draft precision: every output is re-read in one causal forward, and each accepted mask-slot token is compared
with the model's own greedy choice at that place. It says how far a threshold can be trusted: at threshold
0.9 a calibrated model's drafts would be right at least 90% of the time (report["drafts"] bins them by
confidence). Tokens after the first wrong draft are checked against the text that was actually committed.
Draws the Pareto plot (tokens per forward vs accuracy, one labelled point per threshold) with matplotlib, or
plotly+kaleido when that is what is installed, and the calibration plot of the drafts beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..decoding.control import CONFIDENCES
from ..decoding.spec import TreeLayout
from ..generate import DEFAULT_THRESHOLDS as STRATEGY_THRESHOLDS
from ..machine import machine_line
from ..runtime import Runtime, prepare
from .metrics import agreement
from .prompts import load_heldout, split_path
from .tasks import CATEGORIES, PREDICTABLE, score, scorer

DEFAULT_THRESHOLDS = (1.0, 0.95, 0.9, 0.8, 0.7, 0.5)


def decode_records(
    model, tokenizer, records: list[dict[str, Any]], *, threshold: float, block_size: int, batch_size: int,
    max_new_tokens: int, strategy: str = "sliding", bar=None, confidence: str = "prob", runtime: Runtime | None = None,
) -> tuple[list[dict[str, Any]], list[int], list[int]]:
    """Decode every record (batched; batched sliding decoding equals one-by-one). Verified trees follow the fixed
    rules, never a measured cost curve: tokens per forward then says what the model does, not how busy the
    machine was when prepare() timed its forwards. runtime: the kernels (default: plain torch).

    Returns per-record results (text, tokens, forwards) and, per slot j, how many forwards committed at
    least j+1 tokens and how many forwards there were (for acceptance by slot position)."""
    from ..generate import stream

    results: list[dict[str, Any] | None] = [None] * len(records)
    order = sorted(range(len(records)), key=lambda i: (records[i].get("category", ""), len(records[i]["prompt"])))
    slot_hits = [0] * block_size
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        prompts = [records[i]["prompt"] for i in idx]
        ids = [[] for _ in idx]
        slot = [[] for _ in idx]  # per committed token: its place in its forward's accepted run (0 = AR)
        conf = [[] for _ in idx]
        fwd = [0] * len(idx)
        t0 = time.perf_counter()
        for ev in stream(model, tokenizer, prompts, strategy=strategy, block_size=block_size,
                         max_new_tokens=max_new_tokens, threshold=threshold, layout=TreeLayout(use_cost=False),
                         confidence=confidence, runtime=runtime):
            for k, toks in enumerate(ev.token_ids):
                if toks:
                    ids[k].extend(toks)
                    slot[k].extend(range(len(toks)))
                    conf[k].extend(ev.confidences[k])
                    fwd[k] += 1
        seconds = time.perf_counter() - t0
        for k, i in enumerate(idx):
            for j in slot[k]:  # a forward that committed >= j+1 tokens holds exactly one token at slot j
                if j < block_size:
                    slot_hits[j] += 1
            text = tokenizer.decode(ids[k], skip_special_tokens=True).strip()
            results[i] = {"text": text, "ids": ids[k], "tokens": len(ids[k]), "forwards": fwd[k],
                          "batch_seconds": seconds}
            if strategy == "sliding" and threshold < 1.0:
                results[i]["checks"] = check_drafts(model, tokenizer, records[i]["prompt"], ids[k], slot[k], conf[k])
        if bar is not None:
            bar.update(len(idx))
    return results, slot_hits, [sum(x["forwards"] for x in results)] * block_size


def ar_choices(model, prompt_ids: list[int], out_ids: list[int]) -> list[int]:
    """The model's own greedy token at every output position, given the committed tokens before it
    (one causal forward over prompt + output: what one-token decoding would have chosen there)."""
    import torch

    if not out_ids:
        return []
    ids = torch.tensor([prompt_ids + out_ids], device=model.device)
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1]
    return logits.argmax(-1).tolist()


def check_drafts(model, tokenizer, prompt, out_ids: list[int], slots: list[int], confs: list[float]):
    """Per committed token: (slot, confidence, equals the model's own AR choice). Slot 0 is the AR prediction
    itself (a mismatch there is bf16 rounding between a cached k-token forward and one long forward);
    slot j >= 1 is a mask-slot draft accepted because its confidence reached the threshold."""
    from ..generate import encode_prompt

    choices = ar_choices(model, encode_prompt(tokenizer, prompt), out_ids)
    return [(s, round(c, 4), t == a) for s, c, t, a in zip(slots, confs, out_ids, choices)]


def _precision(checks: list[tuple[int, float, bool]]) -> float | None:
    """The share of checks whose token equals the AR choice (None when there are none)."""
    return round(sum(c[2] for c in checks) / len(checks), 4) if checks else None


def draft_stats(results: list[dict[str, Any]], block_size: int) -> dict[str, Any] | None:
    """Draft precision: the share of accepted mask-slot tokens equal to the model's own greedy AR token,
    per slot and per confidence bin (the calibration: a confidence of 0.9 should be right 90% of the time)."""
    checks = [c for x in results for c in x.get("checks", [])]
    if not checks:
        return None
    drafts = [c for c in checks if c[0] >= 1]
    ar = [c for c in checks if c[0] == 0]
    edges = (0.0, 0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.999, 1.01)
    bins = []
    for lo, hi in zip(edges, edges[1:]):
        hit = [c for c in drafts if lo <= c[1] < hi]
        if hit:
            bins.append({"confidence": [lo, min(hi, 1.0)], "n": len(hit), "precision": _precision(hit)})
    return {
        "drafts": len(drafts),
        "precision": _precision(drafts),
        "precision_by_slot": [_precision([c for c in drafts if c[0] == j]) for j in range(1, block_size)],
        "ar_consistency": _precision(ar) or 0.0,
        "samples_with_a_wrong_draft": sum(any(c[0] >= 1 and not c[2] for c in x.get("checks", [])) for x in results),
        "calibration": bins,
    }


def in_category(record: dict[str, Any], category: str) -> bool:
    """Whether a record counts in a report row's category: "all", "predictable", "open" or one category."""
    own = record.get("category")
    return (category == "all" or own == category or (category == "predictable" and own in PREDICTABLE)
            or (category == "open" and own not in PREDICTABLE))


def report_categories(records: list[dict[str, Any]]) -> list[str]:
    """A report's row categories that hold records: all, predictable, open, then each category in CATEGORIES order
    and any others alphabetically."""
    own = {r.get("category") for r in records}
    cats = ["all", "predictable", "open", *(c for c in CATEGORIES if c in own), *sorted(own - set(CATEGORIES) - {None})]
    return [c for c in cats if any(in_category(r, c) for r in records)]


def accuracy(pairs: Iterable[tuple[dict[str, Any], str]]) -> dict[str, Any]:
    """{"accuracy": the mean task score of the (record, answer) pairs that have a gold answer, "n_gold": how many}."""
    scores = [s for s in (score(r, text) for r, text in pairs) if s is not None]
    return {"accuracy": round(sum(scores) / len(scores), 4) if scores else None, "n_gold": len(scores)}


def _summary(records, results, threshold: float, category: str, strategy: str = "sliding",
             one_token: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    chosen = [i for i, r in enumerate(records) if in_category(r, category)]
    pairs = [(records[i], results[i]) for i in chosen]
    same = None
    if one_token is not None:  # answers token for token equal to one-token decoding's in the same run
        same = round(sum(results[i]["ids"] == one_token[i]["ids"] for i in chosen) / max(len(chosen), 1), 4)
    tokens = sum(x["tokens"] for _, x in pairs)
    forwards = sum(x["forwards"] for _, x in pairs)
    return {
        "strategy": strategy,
        "threshold": threshold,
        "category": category,
        "tokens_per_forward": round(tokens / max(forwards, 1), 4),
        **accuracy((r, x["text"]) for r, x in pairs),
        "agreement": round(sum(x["text"] == r["reference"].strip() for r, x in pairs) / max(len(pairs), 1), 4),
        "shared_prefix": round(sum(agreement(r["reference"].strip(), x["text"]) for r, x in pairs)
                               / max(len(pairs), 1), 4),
        "draft_precision": _precision([c for _, x in pairs for c in x.get("checks", []) if c[0] >= 1]),
        "same_as_one_token": same,
        "n": len(pairs),
        "tokens": tokens,
        "forwards": forwards,
    }


def base_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The base model's accuracy per category, scored on the held-out answers (its own greedy output)."""
    rows = []
    for cat in report_categories(records):
        sel = [r for r in records if in_category(r, cat)]
        rows.append({"threshold": None, "category": cat, "tokens_per_forward": 1.0, "agreement": 1.0,
                     "shared_prefix": 1.0, "n": len(sel), **accuracy((r, r["reference"]) for r in sel)})
    return rows


def run_key(strategy: str, threshold: float) -> str:
    """The key of one decoding run in a report's per-run dicts: "0.9" (threshold mode), "verified 0.5"."""
    return str(threshold) if strategy == "sliding" else f"{strategy} {threshold}"


def evaluate(
    model, tokenizer, records: list[dict[str, Any]], *, thresholds=DEFAULT_THRESHOLDS, block_size: int = 4,
    batch_size: int = 16, max_new_tokens: int = 128, progress: bool = True, samples: bool = False,
    verified_thresholds=(), confidence: str = "prob", runtime: Runtime | None = None,
) -> dict[str, Any]:
    """Decode records at every threshold (threshold mode), then in verified mode at every draft threshold; return
    {"block_size", "rows", "base", "slot_acceptance", ...}. Rows say how many answers equal the one-token answers
    of the same run (same_as_one_token) when the thresholds include 1.0."""
    from tqdm.auto import tqdm

    cats = report_categories(records)
    runs = [("sliding", t) for t in thresholds] + [("verified", t) for t in verified_thresholds]
    runs.sort(key=lambda run: run != ("sliding", 1.0))  # one-token mode first: the others are compared with it
    rows, slots, drafts, outputs, timing = [], {}, {}, {}, {}
    one_token = None
    bar = tqdm(total=len(records) * len(runs), desc="mars-eval", disable=not progress)
    for strategy, t in runs:
        t0 = time.perf_counter()
        results, hits, totals = decode_records(model, tokenizer, records, threshold=t, block_size=block_size,
                                               batch_size=batch_size, max_new_tokens=max_new_tokens, bar=bar,
                                               strategy=strategy, confidence=confidence, runtime=runtime)
        key = run_key(strategy, t)
        timing[key] = round(time.perf_counter() - t0, 2)
        if (strategy, t) == ("sliding", 1.0):
            one_token = results
        rows += [_summary(records, results, t, cat, strategy, one_token) for cat in cats]
        slots[key] = [round(h / max(n, 1), 4) for h, n in zip(hits, totals)]
        if (stats := draft_stats(results, block_size)) is not None:
            drafts[key] = stats
        if samples:
            outputs[key] = [x["text"] for x in results]
    bar.close()
    out = {"block_size": block_size, "max_new_tokens": max_new_tokens, "layout": "fixed", "confidence": confidence,
           "rows": rows, "base": base_rows(records), "slot_acceptance": slots, "drafts": drafts, "seconds": timing}
    if samples:
        out["samples"] = outputs
    return out


# ----------------------------------------------------------------------------- plot


def _new_axes():
    """A figure and its axes, drawn without a display; ImportError where matplotlib is missing."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(6.4, 4.4), dpi=120)


def _save(fig, ax, xlabel: str, ylabel: str, title: str, path: str | os.PathLike) -> None:
    """Label the axes, add the title, grid and legend, write the figure to path and close it."""
    import matplotlib.pyplot as plt

    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def pareto_plot(report: dict[str, Any], path: str | os.PathLike, category: str = "all") -> str | None:
    """Tokens per forward vs accuracy, one labelled point per threshold (+ the base model); returns the path."""
    rows = [r for r in report["rows"] if r["category"] == category and r["accuracy"] is not None]
    pts = [r for r in rows if r.get("strategy", "sliding") == "sliding"]
    checked = [r for r in rows if r.get("strategy") == "verified"]
    if not pts:
        return None
    base = next((r for r in report.get("base", []) if r["category"] == category), None)
    xs = [r["tokens_per_forward"] for r in pts]
    ys = [100 * r["accuracy"] for r in pts]
    labels = [f"τ={r['threshold']:g}" for r in pts]
    split = report.get("split", "heldout").replace("_", "-")
    title = f"{report.get('model', 'model')}: {split} ({category}), block size {report['block_size']}"
    path = str(path)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        fig, ax = _new_axes()
        ax.plot(xs, ys, "o-", color="tab:blue", label="MARS (sliding)")
        for x, y, lab in zip(xs, ys, labels):
            ax.annotate(lab, (x, y), textcoords="offset points", xytext=(4, 5), fontsize=8)
        if checked:
            ax.plot([r["tokens_per_forward"] for r in checked], [100 * r["accuracy"] for r in checked], "D",
                    color="tab:green", label="MARS verified (greedy AR's answer, up to bf16 rounding)")
            for r in checked:
                ax.annotate(f"drafts ≥ {r['threshold']:g}", (r["tokens_per_forward"], 100 * r["accuracy"]),
                            textcoords="offset points", xytext=(4, -11), fontsize=8, color="tab:green")
        if base and base["accuracy"] is not None:
            ax.plot([1.0], [100 * base["accuracy"]], "s", color="tab:gray", label="base (AR)")
        _save(fig, ax, "tokens per forward", "task accuracy (%)", title, path)
        return path
    except ImportError:
        pass
    try:
        import plotly.graph_objects as go

        fig = go.Figure(go.Scatter(x=xs, y=ys, text=labels, mode="lines+markers+text", textposition="top right",
                                   name="MARS"))
        if base and base["accuracy"] is not None:
            fig.add_trace(go.Scatter(x=[1.0], y=[100 * base["accuracy"]], mode="markers", name="base (AR)"))
        fig.update_layout(title=title, xaxis_title="tokens per forward", yaxis_title="task accuracy (%)")
        fig.write_image(path)  # needs kaleido
        return path
    except Exception:
        return None


def calibration_plot(reports: dict[str, dict[str, Any]], path: str | os.PathLike,
                     title: str = "draft precision against confidence (held-out)") -> str | None:
    """Reliability of the mask slots: draft precision against confidence, one line per labelled report, read
    at each report's lowest threshold (its accepted drafts span the widest confidence range). A calibrated
    model sits on the diagonal; below it, a threshold of 0.9 lets through drafts that are right less often."""
    lines = []
    for label, report in reports.items():
        drafts = report.get("drafts") or {}
        if drafts:
            t = min(drafts, key=float)
            bins = drafts[t]["calibration"]
            if bins:
                lines.append((f"{label} (τ={float(t):g}, {drafts[t]['drafts']} drafts)",
                              [sum(b["confidence"]) / 2 for b in bins], [100 * b["precision"] for b in bins]))
    if not lines:
        return None
    try:
        fig, ax = _new_axes()
    except ImportError:
        return None
    ax.plot([0.5, 1.0], [50, 100], "--", color="gray", label="calibrated")
    for label, xs, ys in lines:
        ax.plot(xs, ys, "o-", label=label)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    _save(fig, ax, "confidence of the accepted mask-slot token (bin centre)", "equal to the model's own AR choice (%)",
          title, path)
    return str(path)


# ----------------------------------------------------------------------------- CLI


def load_model(name: str | None, adapter: str | None = None, dtype: str | None = None):
    """(model, tokenizer, runtime): mars_core.load(name), with a peft LoRA adapter merged in when one is given, and
    its runtime on this machine (evaluation sizes no tree by cost: no cost curve)."""
    from ..load import load, merge_adapter

    model, tokenizer = load(name, dtype=dtype)
    if adapter:
        model = merge_adapter(model, adapter)
    return model, tokenizer, prepare(model, measure_cost=False)


def format_table(report: dict[str, Any]) -> str:
    """Per run and category: tokens per forward, accuracy, agreement with the base answers, draft precision,
    and the share of answers equal to the one-token answers ("same")."""
    lines = [f"{'mode':<9}{'thr':>5} {'category':<13} {'tok/fwd':>7} {'acc':>6} {'agree':>6} {'prefix':>6} "
             f"{'drafts':>6} {'same':>6} {'n':>4}"]
    pct = lambda v: "-" if v is None else f"{100 * v:.1f}"  # noqa: E731
    for r in report.get("base", []):
        lines.append(f"{'base':<9}{'':>5} {r['category']:<13} {1.0:>7.2f} {pct(r['accuracy']):>6} {'':>6} {'':>6} "
                     f"{'':>6} {'':>6} {r['n']:>4}")
    for r in report["rows"]:
        lines.append(f"{r.get('strategy', 'sliding'):<9}{r['threshold']:>5g} {r['category']:<13} "
                     f"{r['tokens_per_forward']:>7.2f} {pct(r['accuracy']):>6} {pct(r['agreement']):>6} "
                     f"{pct(r['shared_prefix']):>6} {pct(r.get('draft_precision')):>6} "
                     f"{pct(r.get('same_as_one_token')):>6} {r['n']:>4}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="mars-eval", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model name or path (default: the default model)")
    parser.add_argument("--adapter", default=None, help="a LoRA adapter folder to merge into --model")
    parser.add_argument("--dtype", default=None, help="auto (default), bf16 or fp32")
    parser.add_argument("--split", default="heldout", help="heldout (default) or never_trained (data/<split>.jsonl)")
    parser.add_argument("--data", default=None, help="another JSONL in the same format (overrides --split)")
    parser.add_argument("--json", default=None, help="write the report here")
    parser.add_argument("--plot", default=None, help="Pareto PNG (default: next to --json)")
    parser.add_argument("--limit", type=int, default=None,
                        help="only the first N prompts (round-robin over categories)")
    parser.add_argument("--thresholds", default=",".join(f"{t:g}" for t in DEFAULT_THRESHOLDS),
                        help="threshold mode (sliding); include 1.0 for the one-token answers the rows compare with")
    parser.add_argument("--verified-thresholds", default=f"{STRATEGY_THRESHOLDS['verified']:g}",
                        help="verified mode's draft thresholds (empty: no verified rows)")
    parser.add_argument("--block-size", type=int, default=4)
    parser.add_argument("--confidence", default="prob", choices=CONFIDENCES,
                        help="what a threshold compares: the chosen token's probability (default), 1 - entropy/log V "
                             "or the top-1 minus top-2 margin")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--samples", action="store_true", help="also store the decoded texts")
    parser.add_argument("--rescore", default=None, metavar="REPORT",
                        help="score a report's stored answers (--samples) again with the scorer installed now, into "
                             "--json (default: the same file); decodes nothing")
    parser.add_argument("--combine", nargs="+", default=None,
                        help="merge reports of the same model run at different thresholds (e.g. in parallel) "
                             "into --json and the plot; decodes nothing")
    args = parser.parse_args(argv)
    if args.combine:
        report = combine_reports([json.loads(Path(p).read_text()) for p in args.combine])
        return _finish(report, args)

    if args.rescore:
        report = json.loads(Path(args.rescore).read_text())
        n = next(r["n"] for r in report["rows"] if r["category"] == "all")
        if report.get("split") == "custom" and not args.data:
            parser.error("this report was run on --data FILE: give the same --data to rescore it")
        data = args.data or split_path(report.get("split", args.split))
        args.json = args.json or args.rescore
        return _finish(rescore(report, load_heldout(n, data)), args)
    records = load_heldout(args.limit, args.data or split_path(args.split))
    thresholds = [float(t) for t in args.thresholds.split(",") if t.strip()]
    checked = [float(t) for t in args.verified_thresholds.split(",") if t.strip()]
    model, tokenizer, runtime = load_model(args.model, args.adapter, args.dtype)
    report = evaluate(model, tokenizer, records, thresholds=thresholds, block_size=args.block_size,
                      batch_size=args.batch_size, max_new_tokens=args.max_new_tokens, samples=args.samples,
                      verified_thresholds=checked, confidence=args.confidence, runtime=runtime)
    # source: the folder the weights came from (for the default, the merged cache named after its adapter)
    report = {"model": args.model or "default", "adapter": args.adapter, "source": model.name_or_path,
              "split": "custom" if args.data else args.split, "machine": runtime.record(model),
              "scorer": scorer(records), **report}
    _finish(report, args)


def rescore(report: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any]:
    """The report's accuracies again, from its stored samples and the scorer installed now (a report run without
    reasoning-gym, rescored once it is installed); nothing else in a row depends on the scorer."""
    samples = report.get("samples")
    if not samples:
        raise ValueError("this report stores no answers: rescoring needs a report written with --samples")
    rows = []
    for row in report["rows"]:
        texts = samples[run_key(row.get("strategy", "sliding"), row["threshold"])]
        if len(texts) != len(records):
            raise ValueError(f"the report holds {len(texts)} answers for {len(records)} records: not this split")
        rows.append(row | accuracy((r, t) for r, t in zip(records, texts) if in_category(r, row["category"])))
    return report | {"rows": rows, "base": base_rows(records), "scorer": scorer(records)}


def combine_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One report from several runs of the same model and held-out set at different thresholds."""
    out = dict(reports[0])
    out["rows"] = sorted((r for rep in reports for r in rep["rows"]),
                         key=lambda r: (r.get("strategy", "sliding") != "sliding", -r["threshold"]))
    for key in ("slot_acceptance", "drafts", "seconds", "samples"):
        if any(key in rep for rep in reports):
            out[key] = {k: v for rep in reports for k, v in rep.get(key, {}).items()}
    return out


def _finish(report: dict[str, Any], args: argparse.Namespace) -> None:
    """Print the table, write the JSON and draw the plot."""
    if report.get("machine"):
        print(f"machine: {machine_line(report['machine'])}")
    if report.get("scorer"):
        print(f"scorer: {report['scorer']}")
    print(format_table(report))
    print("acceptance by slot (fraction of forwards committing >= j+1 tokens):",
          json.dumps(report["slot_acceptance"]))
    for t, d in report.get("drafts", {}).items():
        bins = ", ".join(f"[{b['confidence'][0]:g}, {b['confidence'][1]:g}) {100 * b['precision']:.0f}% of {b['n']}"
                         for b in d["calibration"])
        print(f"τ={t}: {d['drafts']} drafts, {100 * (d['precision'] or 0):.1f}% equal to the model's own AR choice "
              f"(by slot {d['precision_by_slot']}; AR tokens {100 * d['ar_consistency']:.1f}%); "
              f"by confidence: {bins}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=1))
    plot = args.plot or (str(Path(args.json).with_suffix(".png")) if args.json else None)
    if plot:
        made = pareto_plot(report, plot)
        print(f"pareto plot: {made or 'not drawn (install matplotlib)'}")
        calib = calibration_plot({report.get("model", "model"): report},
                                 Path(plot).with_name(Path(plot).stem + "_calibration.png"))
        if calib:
            print(f"calibration plot: {calib}")


if __name__ == "__main__":
    main()
