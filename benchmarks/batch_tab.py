"""The Batch tab as a visitor runs it: its own handler on its six example prompts, the served model at the app's
defaults on this machine (compiled where the app compiles), and what each side read.

    python benchmarks/batch_tab.py [--runs 3] [--threshold 0.9] [--block-size 4] [--max-new-tokens 64]
                                   [--model PATH] [--json out.json]

Per run: the block-cached batch (the paper's batch strategy), verified MARS and the AR batch: forwards, tokens,
seconds and tokens/s as the tab's clock counts them, how many answers equal AR's, and verified's and block's tokens/s
over AR's; the JSON keeps every run, the median ratios and the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SIDES = ("block", "verified", "ar")


def one_run(tab, state, args: argparse.Namespace) -> dict:
    """The tab's handler once, to its last frame; what each side read."""
    out = list(tab.batch_race("\n".join(tab.EXAMPLES), args.threshold, args.block_size, args.max_new_tokens,
                              state.BatchSession()))
    trace = out[-1][-1]
    row = {k: {f: trace[k][f] for f in ("forwards", "tokens", "seconds", "tokens_per_second")} for k in SIDES}
    ar = trace["ar"]["tokens_per_second"]
    return row | {"verified_same_as_ar": sum(trace["verified_same_as_ar"]),
                  "block_same_as_ar": sum(trace["same_as_ar"]), "prompts": len(trace["same_as_ar"]),
                  "verified_x_ar": trace["verified"]["tokens_per_second"] / ar,
                  "block_x_ar": trace["block"]["tokens_per_second"] / ar}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--threshold", type=float, default=0.9)
    p.add_argument("--block-size", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--model", default=None, help="the served model (default: the embedded one)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    from mars_core.machine import machine_info, machine_line
    from studio import models
    from studio.batch import state, tab
    from studio.cli import compile_by_default

    models.CONFIG = models.AppConfig(model=args.model, compile=compile_by_default())
    for said in models.preparing([models.CONFIG.model], lambda: False):
        print(said, flush=True)
    models.get_model(models.CONFIG.model)
    time.sleep(1)
    while models.COMPILING:  # the compiled forward, as the app serves it once its compile ends
        time.sleep(1)
    forward = models.forward_note(models.CONFIG.model)
    print(f"forward: {forward}", flush=True)
    one_run(tab, state, args)  # untimed: first calls
    runs = []
    for _ in range(args.runs):
        runs.append(one_run(tab, state, args))
        r = runs[-1]
        print(f"verified {r['verified']['tokens_per_second']:.1f} tok/s ({r['verified_x_ar']:.2f}x AR, "
              f"{r['verified_same_as_ar']} of {r['prompts']} = AR) · block {r['block']['tokens_per_second']:.1f} "
              f"({r['block_x_ar']:.2f}x, {r['block_same_as_ar']} = AR) · AR {r['ar']['tokens_per_second']:.1f}",
              flush=True)
    report = {"command": " ".join(["python", "benchmarks/batch_tab.py", *(argv or sys.argv[1:])]),
              "date": time.strftime("%F"), "machine": machine_line(machine_info()), "forward": forward,
              "settings": vars(args), "runs": runs,
              "verified_x_ar_median": statistics.median(r["verified_x_ar"] for r in runs),
              "block_x_ar_median": statistics.median(r["block_x_ar"] for r in runs)}
    print(f"median over {args.runs} runs: verified {report['verified_x_ar_median']:.2f}x the AR batch's tokens/s, "
          f"block {report['block_x_ar_median']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")
    return report


if __name__ == "__main__":
    main()
