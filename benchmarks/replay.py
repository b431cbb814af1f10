"""The compiled forward replayed without dynamo (runtime/replay.py) against the same graph called through dynamo: one
process, one compiled runtime, the same prompts, the two alternated prompt by prompt in turned order over passes, and
every answer compared (replayed and through dynamo, one-token and verified: all four must agree token for token).

    python benchmarks/replay.py [--splits heldout] [--limit 18] [--max-new-tokens 64] [--passes 5] [--json out.json]

Also the forward alone: a batch-1 forward of 1 and of 8 new tokens after 128 of context (the head over its rows
included, as mars-bench's weight_stream times it), the two ways alternated, medians of rounds.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mars_core import generate, load, prepare  # noqa: E402
from mars_core.evaluation.bench import forward_seconds  # noqa: E402
from mars_core.evaluation.prompts import load_split  # noqa: E402
from mars_core.machine import machine_line  # noqa: E402
from mars_core.runtime import compiled as compiled_module  # noqa: E402

WAYS = ("replay", "dynamo")


def decoding(model, tokenizer, runtime, prompts: list[str], max_new: int, passes: int) -> dict:
    """Tokens per second of one-token and verified decoding each way, and on how many prompts all four agree."""
    totals = {(s, w): [0.0, 0, 0] for s in ("ar", "verified") for w in WAYS}
    rounds = {(s, w): [0.0] * passes for s in ("ar", "verified") for w in WAYS}  # seconds by pass: the spread
    agree = 0
    for p in range(passes):
        for i, prompt in enumerate(prompts):
            answers = set()
            for strategy in ("ar", "verified"):
                for way in WAYS if (i + p) % 2 == 0 else WAYS[::-1]:
                    runtime.compiled.replaying = way == "replay"
                    began = time.perf_counter()
                    out = generate(model, tokenizer, prompt, strategy=strategy, max_new_tokens=max_new,
                                   runtime=runtime, **({"threshold": 0.3} if strategy == "verified" else {}))
                    t = totals[(strategy, way)]
                    t[0] += time.perf_counter() - began
                    rounds[(strategy, way)][p] += time.perf_counter() - began
                    t[1], t[2] = t[1] + out.generated_tokens, t[2] + out.forwards
                    answers.add(tuple(out.token_ids[0]))
            agree += len(answers) == 1
    runtime.compiled.replaying = True
    rows = {f"{s}_{w}": {"tokens_per_second": round(t[1] / t[0], 2), "tokens_per_forward": round(t[1] / t[2], 3)}
            for (s, w), t in totals.items()}
    return {**rows, "ar_replay_over_dynamo": round(rows["ar_replay"]["tokens_per_second"] /
                                                   rows["ar_dynamo"]["tokens_per_second"], 3),
            "verified_replay_over_dynamo": round(rows["verified_replay"]["tokens_per_second"] /
                                                 rows["verified_dynamo"]["tokens_per_second"], 3),
            "prompts_all_four_agree": agree, "prompts": len(prompts) * passes,
            # each pass's replay-over-dynamo speed (the same tokens each way: the inverse ratio of seconds)
            **{f"{s}_replay_over_dynamo_by_pass": [round(d / r, 3) for r, d in zip(rounds[(s, "replay")],
                                                                                    rounds[(s, "dynamo")])]
               for s in ("ar", "verified")}}


def forwards(model, tokenizer, runtime, rounds: int = 5) -> dict:
    """Median ms of a batch-1 forward of 1 and 8 new tokens each way, the ways alternated round by round."""
    ms = {(w, way): [] for w in (1, 8) for way in WAYS}
    for r in range(rounds):
        for width in (1, 8):
            for way in WAYS if r % 2 == 0 else WAYS[::-1]:
                runtime.compiled.replaying = way == "replay"
                ms[(width, way)].append(forward_seconds(model, tokenizer, ["Hello!"], width, runtime=runtime) * 1e3)
    runtime.compiled.replaying = True
    out = {f"forward_{w}_ms_{way}": round(statistics.median(v), 2) for (w, way), v in ms.items()}
    for w in (1, 8):
        out[f"forward_{w}_replay_over_dynamo"] = round(out[f"forward_{w}_ms_replay"] / out[f"forward_{w}_ms_dynamo"], 3)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--splits", default="heldout")
    p.add_argument("--limit", type=int, default=18)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--passes", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    model, tokenizer = load(None)
    runtime = compiled_module.compile_runtime(model, prepare(model))
    if runtime.compiled is None or not getattr(compiled_module._REPLAYS.get(runtime.compiled.key), "checked", False):
        sys.exit(f"no replayed compiled forward here: {runtime.forward_note}")
    machine = runtime.record(model)
    report = {"command": "python " + shlex.join(sys.argv), "machine": machine, "forward_note": runtime.forward_note}
    print(machine_line(machine), runtime.forward_note, flush=True)
    time.sleep(8)  # right after a load the forwards read slow for seconds
    report["forwards"] = forwards(model, tokenizer, runtime)
    print(report["forwards"], flush=True)
    for split in args.splits.split(","):
        prompts = [r["prompt"] for r in load_split(split, args.limit)]
        report[split] = decoding(model, tokenizer, runtime, prompts, args.max_new_tokens, args.passes)
        print(split, report[split], flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
