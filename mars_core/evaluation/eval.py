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
Draws the Pareto plot (tokens per forward vs accuracy, one labelled point per threshold) and the calibration plot
of the drafts beside it, with matplotlib.
"""

# The command line only, in three modes (decode a split, --rescore a report, --combine reports). The pieces: runs.py
# decodes, drafts.py re-checks drafts, report.py makes the rows and the table, plots.py draws, loading.py loads.

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..decoding.control import CONFIDENCES
from ..decoding.strategies import default_threshold
from ..machine import machine_line
from ..runtime.timing import write_json
from .loading import load_prepared
from .plots import calibration_plot, pareto_plot
from .prompts import load_heldout, split_path
from .report import combine_reports, report_table, rescore
from .runs import EVAL_THRESHOLDS, evaluate
from .tasks import scorer


def build_parser() -> argparse.ArgumentParser:
    """mars-eval's flags (the module docstring is its help)."""
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
    parser.add_argument("--thresholds", default=",".join(f"{t:g}" for t in EVAL_THRESHOLDS),
                        help="threshold mode (sliding); include 1.0 for the one-token answers the rows compare with")
    parser.add_argument("--verified-thresholds", default=f"{default_threshold('verified'):g}",
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
    return parser


def main(argv: list[str] | None = None) -> None:
    """Entry point of the mars-eval command: one of its three modes, then the table, the JSON and the plots."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.combine:
        report = combine_reports([json.loads(Path(p).read_text()) for p in args.combine])
    elif args.rescore:
        report = rescored(args, parser)
    else:
        report = decoded(args)
    finish(report, args)


def rescored(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict[str, Any]:
    """--rescore: the report's stored answers scored again on the records they answered (into --json, by default
    the same file)."""
    report = json.loads(Path(args.rescore).read_text())
    n = next(r["n"] for r in report["rows"] if r["category"] == "all")
    if report.get("split") == "custom" and not args.data:
        parser.error("this report was run on --data FILE: give the same --data to rescore it")
    data = args.data or split_path(report.get("split", args.split))
    args.json = args.json or args.rescore
    return rescore(report, load_heldout(n, data))


def decoded(args: argparse.Namespace) -> dict[str, Any]:
    """The default mode: load the model, decode the split at every threshold, and the report with where it ran."""
    records = load_heldout(args.limit, args.data or split_path(args.split))
    thresholds = [float(t) for t in args.thresholds.split(",") if t.strip()]
    checked = [float(t) for t in args.verified_thresholds.split(",") if t.strip()]
    # evaluation sizes no tree by cost: no cost curve
    model, tokenizer, runtime = load_prepared(args.model, args.adapter, dtype=args.dtype, measure_cost=False)
    report = evaluate(model, tokenizer, records, thresholds=thresholds, block_size=args.block_size,
                      batch_size=args.batch_size, max_new_tokens=args.max_new_tokens, samples=args.samples,
                      verified_thresholds=checked, confidence=args.confidence, runtime=runtime)
    # source: the folder the weights came from (for the default, the merged cache named after its adapter)
    return {"model": args.model or "default", "adapter": args.adapter, "source": model.name_or_path,
            "split": "custom" if args.data else args.split, "machine": runtime.record(model),
            "scorer": scorer(records), **report}


def print_report(report: dict[str, Any]) -> None:
    """The machine, the scorer, the table, acceptance by slot and the drafts' precision by confidence."""
    if report.get("machine"):
        print(f"machine: {machine_line(report['machine'])}")
    if report.get("scorer"):
        print(f"scorer: {report['scorer']}")
    print(report_table(report))
    print("acceptance by slot (fraction of forwards committing >= j+1 tokens):",
          json.dumps(report["slot_acceptance"]))
    for t, d in report.get("drafts", {}).items():
        bins = ", ".join(f"[{b['confidence'][0]:g}, {b['confidence'][1]:g}) {100 * b['precision']:.0f}% of {b['n']}"
                         for b in d["calibration"])
        print(f"τ={t}: {d['drafts']} drafts, {100 * (d['precision'] or 0):.1f}% equal to the model's own AR choice "
              f"(by slot {d['precision_by_slot']}; AR tokens {100 * d['ar_consistency']:.1f}%); "
              f"by confidence: {bins}")


def finish(report: dict[str, Any], args: argparse.Namespace) -> None:
    """Print the report, write the JSON and draw the plots."""
    print_report(report)
    if args.json:
        write_json(args.json, report)
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
