"""Issue 20 on one GPU, in three stages: answer new prompts, train the candidates side by side, evaluate them.

    mkdir -p runs/finished && git archive 39b6a6f assets/smollm2-mars-b4 | tar -x -C runs/finished   # the start
    python recipes/train_on_gpu.py distill [--prompts runs/xl/prompts.jsonl] [--procs 4] [--deadline S]
    python recipes/train_on_gpu.py train [--runs b4_xl,b4_xl_long,b4_xl_fresh,b8_xl] [--deadline S]
    python recipes/train_on_gpu.py evaluate [--limit 64] [--full 1] [--workers 8] [--deadline S]
    python recipes/train_on_gpu.py bench [--deadline S]          # the GPU speed rows, with the chosen adapter

Each stage runs its jobs as processes, several at once where the GPU has room: the prompt shards (greedy answers in
fp32, four at once), the evaluations; the training recipes one after another by default (--train-workers), since
four side by side kept an H100 busy and ran at a quarter of one alone's speed. --deadline (seconds from the stage's
start) stops what is still running and keeps what is done: answered prompts (resumable partial files), checkpoints.
What each stage writes:
- distill: data/train_xl.jsonl (data/train_wide.jsonl + the new answers, in prompt order) and runs/xl/new.jsonl;
- train: each run's checkpoints shipped as bf16 adapters under runs/ship/<run>-<step> (runs/ship/index.json names
  their run, step and block size), runs/gpu/train_<run>.log and runs/gpu/train_times.txt;
- evaluate: a mars-eval sweep of every shipped checkpoint and of the start on both splits (--limit prompts,
  τ = 1 and 0.9, verified), then the --full best (verified tokens per forward, never-trained) and the start on
  whole splits at every threshold; runs/gpu/eval_<label>__<split>.json, summary.md and chosen.txt.
Evaluations run in the default dtype (bf16 on a GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mars_core.evaluation.distill import write_jsonl  # noqa: E402
from mars_core.training.cli import read_config_file  # noqa: E402
from mars_core.training.data import read_jsonl  # noqa: E402

RUNS = {  # name: recipe (its block_size and output_dir say how to evaluate it and where its checkpoints are)
    "b4_xl": "recipes/smollm2_mars_b4_xl.yaml",
    "b4_xl_long": "recipes/smollm2_mars_b4_xl_long.yaml",
    "b4_xl_fresh": "recipes/smollm2_mars_b4_xl_fresh.yaml",
    "b8_xl": "recipes/smollm2_mars_b8_xl.yaml",
    "b4_xl2": "recipes/smollm2_mars_b4_xl2.yaml",
}
START = Path("runs/finished/assets/smollm2-mars-b4")  # the finished adapter (git archive 39b6a6f, see above)
OLD_DATA = Path("data/train_wide.jsonl")
DATA = Path("data/train_xl.jsonl")
XL = Path("runs/xl")
SHIP = Path("runs/ship")
SPLITS = ("heldout", "never_trained")
SWEEP = ["--thresholds", "1.0,0.9", "--verified-thresholds", "0.3"]
FULL = ["--thresholds", "1.0,0.95,0.9,0.8,0.5", "--verified-thresholds", "0.3"]
T0 = time.time()


def say(text: str) -> None:
    print(f"[{time.time() - T0:6.0f} s] {text}", flush=True)


def run_all(jobs: list[tuple[str, list[str], Path, dict[str, str] | None]], workers: int, deadline: float) -> dict:
    """Run (name, command, log, env) jobs, `workers` at a time, until done or `deadline` (time.time()); a job still
    running then is terminated. Returns {name: exit code, or None if stopped}."""
    pending, running, codes = list(jobs), {}, {}
    while pending or running:
        while pending and len(running) < workers:
            name, cmd, log, env = pending.pop(0)
            log.parent.mkdir(parents=True, exist_ok=True)
            sink = open(log, "a")
            running[name] = (subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT,
                                              env={**os.environ, **(env or {})}), sink, time.time())
        for name, (proc, sink, started) in list(running.items()):
            if proc.poll() is not None:
                codes[name] = proc.returncode
                sink.close()
                del running[name]
                say(f"{name}: exit {proc.returncode} after {time.time() - started:.0f} s")
        if time.time() > deadline:
            for name, (proc, sink, started) in running.items():
                proc.terminate()
                proc.wait(timeout=60)
                sink.close()
                codes[name] = None
                say(f"{name}: stopped at the deadline after {time.time() - started:.0f} s")
            for name, *_ in pending:
                codes[name] = None
            return codes
        time.sleep(2)
    return codes


# ----------------------------------------------------------------------------- distill


def read_rows(path: Path) -> list[dict]:
    """A JSONL file's records; none when it does not exist (a shard stopped before it wrote anything)."""
    return read_jsonl(path) if path.is_file() else []


def distill(args: argparse.Namespace) -> None:
    """Answer the prompts in --procs shards at once; data/train_xl.jsonl = the old answers + every new one."""
    n = args.procs
    jobs = [(f"shard {k}", [sys.executable, "-m", "mars_core.distill", "--out", str(XL), "--prompts", args.prompts,
                            "--shard", f"{k}/{n}", "--dtype", "fp32", "--batch-size", str(args.batch_size),
                            "--max-new-tokens", str(args.max_new_tokens)], XL / f"distill_{k}.log", None)
            for k in range(n)]
    run_all(jobs, n, T0 + args.deadline)
    new = []
    for k in range(n):  # a finished shard's file, else what its partial file holds
        done = read_rows(XL / f"train.{k}-of-{n}.jsonl") or read_rows(XL / f".train.{k}-of-{n}_partial.jsonl")
        new += done
        say(f"shard {k}: {len(done)} answers")
    write_jsonl(new, XL / "new.jsonl")
    write_data()


def write_data() -> None:
    """data/train_xl.jsonl: the old answers, then the new ones (runs/xl/new.jsonl)."""
    DATA.write_text(OLD_DATA.read_text(encoding="utf-8") + (XL / "new.jsonl").read_text(encoding="utf-8"),
                    encoding="utf-8")
    say(f"{DATA}: {len(read_rows(DATA))} answers ({len(read_rows(XL / 'new.jsonl'))} new)")


# ----------------------------------------------------------------------------- train


def checkpoints(output_dir: str) -> list[tuple[int, Path]]:
    """A run's checkpoints as (step, folder), in step order."""
    return sorted((int(p.name.split("-")[1]), p) for p in Path(output_dir).glob("checkpoint-*"))


def read_index() -> dict:
    """runs/ship/index.json: label -> the shipped checkpoint's run, step, block size and path (empty before any)."""
    path = SHIP / "index.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def ship_all(names: list[str]) -> dict:
    """Every checkpoint of the runs as a bf16 adapter under runs/ship; index.json says what each one is."""
    sys.path.insert(0, str(ROOT / "recipes"))
    from ship_adapter import ship

    index = read_index()
    for name in names:
        recipe = read_config_file(RUNS[name])
        for step, folder in checkpoints(recipe["output_dir"]):
            label = f"{name}-{step}"
            if label not in index and (folder / "adapter_model.safetensors").is_file():
                ship(str(folder), str(SHIP / label))
                index[label] = {"run": name, "step": step, "block": recipe["block_size"], "path": str(SHIP / label)}
    SHIP.mkdir(parents=True, exist_ok=True)
    (SHIP / "index.json").write_text(json.dumps(index, indent=1))
    return index


def train(args: argparse.Namespace) -> None:
    names = args.runs.split(",")
    if not DATA.is_file():
        write_data()
    out = Path(args.out)
    steps = ["--max_steps", str(args.max_steps), "--save_steps", str(args.max_steps)] if args.max_steps else []
    jobs = [(name, [sys.executable, "-m", "mars_core.train", RUNS[name], "--resume", "true", *steps],
             out / f"train_{name}.log", None) for name in names]
    started = time.time()
    codes = run_all(jobs, args.train_workers, T0 + args.deadline)
    with open(out / "train_times.txt", "a") as f:
        for name in names:
            f.write(f"{name}\texit {codes.get(name)}\t{time.time() - started:.0f} s (all runs side by side)\n")
    for label, entry in ship_all(names).items():
        say(f"shipped {label} (B = {entry['block']})")


# ----------------------------------------------------------------------------- evaluate


def eval_job(label: str, adapter: str, block: int, split: str, settings: list[str], out: Path, limit: int | None,
             max_new_tokens: int = 128):
    """One mars-eval run of base + adapter (merged by mars_core.load as the default model) on a split."""
    cmd = [sys.executable, "-m", "mars_core.eval", "--split", split, "--block-size", str(block),
           "--max-new-tokens", str(max_new_tokens), "--json", str(out / f"eval_{label}__{split}.json"), *settings]
    if limit:
        cmd += ["--limit", str(limit)]
    return (f"{label}/{split}", cmd, out / f"eval_{label}__{split}.log", {"MARS_DEFAULT_ADAPTER": adapter})


def all_row(path: Path, strategy: str, threshold: float) -> dict | None:
    if not path.is_file():
        return None
    rows = json.loads(path.read_text())["rows"]
    return next((r for r in rows if r["category"] == "all" and r["strategy"] == strategy
                 and r["threshold"] == threshold), None)


def summary(out: Path) -> str:
    """One line per evaluation: tokens per forward / accuracy at each setting, draft precision at 0.9."""
    lines = ["| candidate | split | n | τ = 1 | τ = 0.9 | drafts right at 0.9 | verified 0.3 | verified same |",
             "|---|---|---|---|---|---|---|---|"]
    for path in sorted(out.glob("eval_*.json")):
        label, split = path.stem[len("eval_"):].split("__")
        cells = []
        for key in (("sliding", 1.0), ("sliding", 0.9), ("verified", 0.3)):
            r = all_row(path, *key)
            acc = "-" if r is None or r["accuracy"] is None else f"{100 * r['accuracy']:.1f}"
            cells.append("-" if r is None else f"{r['tokens_per_forward']:.2f} / {acc}")
        tau9, ver = all_row(path, "sliding", 0.9), all_row(path, "verified", 0.3)
        precision = "-" if not tau9 or tau9["draft_precision"] is None else f"{100 * tau9['draft_precision']:.1f}%"
        same = "-" if not ver or ver["same_as_one_token"] is None else f"{100 * ver['same_as_one_token']:.0f}%"
        n = (tau9 or ver or {}).get("n", 0)
        lines.append(f"| {label} | {split} | {n} | {' | '.join(cells[:2])} | {precision} | {cells[2]} | {same} |")
    return "\n".join(lines) + "\n"


def sweep_points(index: dict) -> dict:
    """Per run, its last shipped checkpoint and the one nearest half of it: the checkpoints the sweep compares."""
    chosen = {}
    for run in dict.fromkeys(e["run"] for e in index.values()):
        steps = {e["step"]: label for label, e in index.items() if e["run"] == run}
        last = max(steps)
        for step in {last, min(steps, key=lambda s: abs(s - last / 2))}:
            chosen[steps[step]] = index[steps[step]]
    return chosen


def evaluate(args: argparse.Namespace) -> None:
    out = Path(args.out)
    sweep_dir, full_dir = out / "sweep", out
    index = read_index()
    candidates = {"finished": {"path": str(START), "block": 4}, **sweep_points(index)}
    jobs = [eval_job(label, c["path"], c["block"], split, SWEEP, sweep_dir, args.limit, args.eval_max_new_tokens)
            for label, c in candidates.items() for split in SPLITS]
    run_all(jobs, args.workers, T0 + args.sweep_deadline)
    (sweep_dir / "summary.md").write_text(summary(sweep_dir))
    say("sweep\n" + (sweep_dir / "summary.md").read_text())

    def never_trained_verified(label: str) -> float:
        r = all_row(sweep_dir / f"eval_{label}__never_trained.json", "verified", 0.3)
        return r["tokens_per_forward"] if r else 0.0

    if args.full == 0:
        return
    ranked = sorted((label for label in candidates if label != "finished"), key=never_trained_verified, reverse=True)
    chosen = ranked[: args.full]
    (out / "chosen.txt").write_text("".join(f"{label}\t{candidates[label]['path']}\n" for label in chosen))
    jobs = [eval_job(label, candidates[label]["path"], candidates[label]["block"], split, FULL, full_dir,
                     args.full_limit, args.eval_max_new_tokens)
            for label in ["finished", *chosen] for split in SPLITS]
    run_all(jobs, args.workers, T0 + args.deadline)
    (out / "summary.md").write_text(summary(full_dir))
    say(f"chosen: {', '.join(chosen)}\n" + (out / "summary.md").read_text())


def bench(args: argparse.Namespace) -> None:
    """The GPU rows of docs/speed.md with the chosen adapter (evaluate's first choice, else the start): mars-bench
    in bf16, batch 1 on held-out prompts, then batches 4, 8 and 16; JSONs under runs/gpu_tables."""
    out = Path(args.out)
    chosen = out / "chosen.txt"
    label, adapter = chosen.read_text().split("\n")[0].split("\t") if chosen.is_file() else ("finished", str(START))
    block = read_index().get(label, {}).get("block", 4)
    tables = Path("runs/gpu_tables")
    common = [sys.executable, "-m", "mars_core.bench", "--block-sizes", str(block), "--verified-thresholds", "0.3",
              "--max-new-tokens", "64", "--dtype", "bf16"]
    jobs = [("bench b1", common + ["--methods", "hf_generate,hf_prompt_lookup,mars_verified", "--batch-sizes", "1",
                                   "--limit", "18", "--repeats", "2", "--json", str(tables / "b1_heldout_bf16.json")],
             out / "bench.log", {"MARS_DEFAULT_ADAPTER": adapter}),
            ("bench batches", common + ["--methods", "hf_generate,mars_verified", "--batch-sizes", "4,8,16",
                                        "--limit", "16", "--repeats", "1", "--json", str(tables / "batches_bf16.json")],
             out / "bench.log", {"MARS_DEFAULT_ADAPTER": adapter})]
    say(f"bench with {label} ({adapter}, B = {block})")
    run_all(jobs, 1, T0 + args.deadline)  # one at a time: timings on a quiet GPU


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=("distill", "train", "evaluate", "bench"))
    parser.add_argument("--out", default="runs/gpu")
    parser.add_argument("--deadline", type=float, default=3600.0, help="seconds from the start; then stop")
    parser.add_argument("--prompts", default=str(XL / "prompts.jsonl"))
    parser.add_argument("--procs", type=int, default=4, help="distill: processes (prompt shards)")
    parser.add_argument("--batch-size", type=int, default=192, help="distill: prompts answered at once")
    parser.add_argument("--max-new-tokens", type=int, default=160, help="distill: answer length cap")
    parser.add_argument("--runs", default=",".join(RUNS), help="train: comma list of the runs")
    parser.add_argument("--train-workers", type=int, default=1,
                        help="train: runs at once (four at once kept an H100 busy at 1 step/s each; one alone ran "
                             "3.7 steps/s)")
    parser.add_argument("--max-steps", type=int, default=None, help="train: override the recipes' steps (a smoke test)")
    parser.add_argument("--limit", type=int, default=64, help="evaluate: prompts per split in the sweep")
    parser.add_argument("--full", type=int, default=1, help="evaluate: best candidates evaluated whole")
    parser.add_argument("--workers", type=int, default=8, help="evaluate: evaluations at once")
    parser.add_argument("--sweep-deadline", type=float, default=None, help="evaluate: the sweep's deadline")
    parser.add_argument("--full-limit", type=int, default=None, help="evaluate: prompts per split in the full runs")
    parser.add_argument("--eval-max-new-tokens", type=int, default=128, help="evaluate: mars-eval's answer cap")
    args = parser.parse_args()
    args.sweep_deadline = args.sweep_deadline or args.deadline
    Path(args.out).mkdir(parents=True, exist_ok=True)
    XL.mkdir(parents=True, exist_ok=True)
    if not START.is_dir():
        sys.exit(f"{START} is missing: mkdir -p runs/finished && "
                 "git archive 39b6a6f assets/smollm2-mars-b4 | tar -x -C runs/finished")
    subprocess.check_call([sys.executable, "-c", "from mars_core.load import convert_gguf, smollm2_gguf_path; "
                           "convert_gguf(smollm2_gguf_path())"])
    say("base converted")
    {"distill": distill, "train": train, "evaluate": evaluate, "bench": bench}[args.stage](args)


if __name__ == "__main__":
    main()
