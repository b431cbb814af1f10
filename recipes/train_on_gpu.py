"""Issue 20's candidates on one GPU: MARS runs side by side, then mars-eval of each on both splits.

    mkdir -p runs/wide && git archive c1b7e3d assets/smollm2-mars-b4 | tar -x -C runs/wide   # the runs' start
    python recipes/train_on_gpu.py [--out runs/gpu] [--runs b4_wide2,b8_wide] [--workers 6] [--no-eval]

A 135M model leaves an H100 mostly idle, so the recipes train at once (one process each) and the
evaluations run six at a time. What it writes under --out: each run's training log, train_times.txt (wall time
per run), one mars-eval JSON per (candidate, split), and summary.md (the 'all' rows side by side).
Evaluations use the adapter as shipped (bf16, recipes/ship_adapter.py), in the default dtype (bf16 on a GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mars_core.training.cli import read_config_file  # noqa: E402

RUNS = {  # name: recipe (its block_size and output_dir say how to evaluate it and where its checkpoints are)
    "b4_wide2": "recipes/smollm2_mars_b4_wide2.yaml",
    "b8_wide": "recipes/smollm2_mars_b8_wide.yaml",
}
START = Path("runs/wide/assets/smollm2-mars-b4")  # the wide adapter (git archive c1b7e3d assets/smollm2-mars-b4)
FULL = ["--thresholds", "1.0,0.95,0.9,0.8,0.5", "--verified-thresholds", "0.3"]
SWEEP = ["--thresholds", "1.0,0.9", "--verified-thresholds", "0.3", "--limit", "48"]
SPLITS = ("heldout", "never_trained")
T0 = time.time()


def say(text: str) -> None:
    print(f"[{time.time() - T0:6.0f} s] {text}", flush=True)


def train(name: str, out: Path) -> float:
    """One recipe in its own process (resumes from its last checkpoint if there is one); returns wall seconds."""
    start = time.time()
    with open(out / f"train_{name}.log", "a") as log:
        code = subprocess.call([sys.executable, "-m", "mars_core.train", RUNS[name], "--resume", "true"],
                               stdout=log, stderr=subprocess.STDOUT)
    seconds = time.time() - start
    with open(out / "train_times.txt", "a") as f:
        f.write(f"{name}\texit {code}\t{seconds:.0f} s\n")
    say(f"trained {name} (exit {code}) in {seconds:.0f} s")
    return seconds


def evaluate(label: str, adapter: Path, block: int, split: str, settings: list[str], out: Path) -> Path | None:
    """mars-eval of base + adapter (shipped as bf16 first) on one split; returns the JSON path."""
    shipped = Path("runs/ship") / label
    if not (shipped / "adapter_model.safetensors").is_file():
        subprocess.check_call([sys.executable, "recipes/ship_adapter.py", str(adapter), str(shipped)],
                              stdout=subprocess.DEVNULL)
    target = out / f"eval_{label}__{split}.json"
    cmd = [sys.executable, "-m", "mars_core.eval", "--split", split, "--block-size", str(block),
           "--json", str(target), "--plot", str(out / f"pareto_{label}__{split}.png"), *settings]
    env = {**os.environ, "MARS_DEFAULT_ADAPTER": str(shipped)}
    with open(out / f"eval_{label}__{split}.log", "w") as log:
        code = subprocess.call(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    say(f"evaluated {label} on {split} (exit {code})")
    return target if code == 0 else None


def summary(out: Path) -> str:
    """One line per evaluation: tokens per forward / accuracy at each setting, draft precision at 0.9."""
    lines = ["| candidate | split | n | τ = 1 | τ = 0.9 | drafts right at 0.9 | verified 0.3 | verified same |",
             "|---|---|---|---|---|---|---|---|"]
    for path in sorted(out.glob("eval_*.json")):
        rows = {(r["strategy"], r["threshold"]): r for r in json.loads(path.read_text())["rows"]
                if r["category"] == "all"}
        def cell(key: tuple[str, float]) -> str:
            r = rows.get(key)
            acc = "-" if r is None or r["accuracy"] is None else f"{100 * r['accuracy']:.1f}"
            return "-" if r is None else f"{r['tokens_per_forward']:.2f} / {acc}"
        tau9, ver = rows.get(("sliding", 0.9)), rows.get(("verified", 0.3))
        precision = "-" if not tau9 or tau9["draft_precision"] is None else f"{100 * tau9['draft_precision']:.1f}%"
        same = "-" if not ver else f"{100 * ver['same_as_one_token']:.0f}%"
        label, split = path.stem[len("eval_"):].split("__")
        n = next(iter(rows.values()))["n"] if rows else 0
        lines.append(f"| {label} | {split} | {n} | {cell(('sliding', 1.0))} | {cell(('sliding', 0.9))} | "
                     f"{precision} | {cell(('verified', 0.3))} | {same} |")
    return "\n".join(lines) + "\n"


def checkpoints(output_dir: str) -> list[tuple[int, Path]]:
    """A run's checkpoints as (step, folder), in step order."""
    found = ((int(p.name.split("-")[1]), p) for p in Path(output_dir).glob("checkpoint-*"))
    return sorted(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/gpu")
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--no-eval", action="store_true", help="train only")
    parser.add_argument("--runs", default=",".join(RUNS), help="comma list of the runs to train")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not START.is_dir():
        sys.exit(f"{START} is missing: mkdir -p runs/wide && "
                 "git archive c1b7e3d assets/smollm2-mars-b4 | tar -x -C runs/wide")
    subprocess.check_call([sys.executable, "-c", "from mars_core.load import convert_gguf, smollm2_gguf_path; "
                           "convert_gguf(smollm2_gguf_path())"])
    say("base converted")
    with ThreadPoolExecutor(args.workers) as pool:
        baseline = [] if args.no_eval else [pool.submit(evaluate, "wide", START, 4, split, FULL, out)
                                            for split in SPLITS]
        if not args.skip_train:
            with ThreadPoolExecutor(len(RUNS)) as trainers:
                list(trainers.map(lambda name: train(name, out), args.runs.split(",")))
        finals, sweep = [], []  # the last checkpoint of each run in full; the others from step 650 on a slice
        for name in args.runs.split(","):
            recipe = read_config_file(RUNS[name])
            found = checkpoints(recipe["output_dir"])
            for step, ckpt in found:
                if (step, ckpt) == found[-1]:
                    finals += [(f"{name}_{step}", ckpt, recipe["block_size"], split, FULL) for split in SPLITS]
                elif step >= 650:
                    sweep += [(f"{name}_{step}", ckpt, recipe["block_size"], split, SWEEP) for split in SPLITS]
        jobs = [] if args.no_eval else [pool.submit(evaluate, *job, out) for job in finals + sweep]
        for job in baseline + jobs:
            job.result()
    (out / "summary.md").write_text(summary(out))
    say("done\n" + (out / "summary.md").read_text())


if __name__ == "__main__":
    main()
