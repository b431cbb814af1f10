"""How closely a served model follows its weights as trained: next-token predictions along an evaluation split's
reference answers (teacher-forced), each configuration under prepare()'s runtime for it (its kernels and weights, the
forward eager: the compiled one is a decoder of its own, checked on its own), against the weights as trained in fp32.

    python -m mars_core.evaluation.fidelity [--split heldout] [--limit N] [--json FILE]

A decoded answer's accuracy moves by whole answers (one of the held-out split's 70 scored answers is 1.4 points), and
an answer that parts from another at one token differs in everything after; this counts every position of every
reference answer instead: where a configuration's greedy choice differs from fp32's, and the KL divergence of its
next-token distribution from fp32's. Width invariance (checked where prepare() runs: the width check is kept per
machine) makes one forward over prompt and answer give each position the logits a decode reaching it computes
(docs/speed.md#width-invariance-verified-is-one-token-decoding-bit-for-bit).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch
from tqdm.auto import tqdm

from ..generate import encode_prompt, stop_token_ids
from ..load import load
from ..machine import machine_info, machine_line
from ..runtime import causal_seen, feed, head, new_cache, prepare
from ..runtime.slots import cache_slots
from ..runtime.timing import write_json
from .prompts import load_split

# (label, dtype, weights) a configuration is loaded with (load(dtype=, weights=)). weights="bf16": the weights as
# trained (not rounded onto the int8 grid), in the dtype asked; "int8": on the grid, times 8-bit rows (runtime/grid.py)
REFERENCE = ("fp32, as trained", "fp32", "bf16")
CONFIGS = (("bf16, as trained", "bf16", "bf16"), ("8-bit weights and rows", "bf16", "int8"))


@dataclass
class Fidelity:
    """One configuration against the reference, over every answer position of the split."""

    label: str
    dtype: str
    weights: str
    linear: str  # the kernel its linear layers ran on (Runtime.record)
    positions: int = 0
    differing: int = 0  # positions whose greedy choice is not the reference's
    answers_touched: int = 0  # answers with at least one such position
    kl_sum: float = 0.0  # sum over positions of KL(reference || this), nats

    def row(self) -> dict[str, Any]:
        """What the JSON keeps: the counts, the share agreeing and the mean KL."""
        return {**asdict(self), "top1_agreement": 1 - self.differing / max(self.positions, 1),
                "kl_mean": self.kl_sum / max(self.positions, 1)}


def answer_ids(tokenizer: Any, record: dict[str, Any], stops: list[int]) -> tuple[list[int], int]:
    """(prompt and reference answer as one sequence of ids, the prompt's length): the answer as the chat template
    closes an assistant turn, up to its first stop id (kept: a decode predicts it, and stops there; what a template
    writes after it, a newline, no decode reads), so a decode of the prompt would predict exactly these tokens."""
    prompt = encode_prompt(tokenizer, record["prompt"])
    turns = [{"role": "user", "content": record["prompt"]}, {"role": "assistant", "content": record["reference"]}]
    full = list(tokenizer(tokenizer.apply_chat_template(turns, tokenize=False), add_special_tokens=False)["input_ids"])
    if full[: len(prompt)] != prompt or len(full) == len(prompt):
        raise ValueError(f"the chat template does not extend the prompt's ids with its answer: {record['prompt']!r}")
    end = next((i + 1 for i in range(len(prompt), len(full)) if full[i] in stops), len(full))
    return full[:end], len(prompt)


@torch.inference_mode()
def answer_logits(model: torch.nn.Module, runtime: Any, ids: list[int], start: int) -> torch.Tensor:
    """Logits [len(ids) - start, V] (fp32) predicting ids[start:], from one forward over ids under the runtime."""
    n = len(ids)
    tokens = torch.tensor([ids], device=model.device)
    fed = torch.ones(1, n, dtype=torch.bool, device=model.device)
    seen = causal_seen(fed)
    with new_cache(model, 1, cache_slots(n, 0)) as cache:
        hidden = feed(model, cache, tokens, torch.arange(n, device=model.device)[None], seen, fed, runtime=runtime)
        return head(model, hidden[:, start - 1 : n - 1], runtime)[0].float()


def served(dtype: str, weights: str) -> tuple[torch.nn.Module, Any, Any]:
    """(model, tokenizer, runtime): the embedded model loaded as asked, prepared as load()'s callers serve it (the
    width check and cost curve left out: nothing here is decoded or timed)."""
    model, tokenizer = load(None, dtype=dtype, device="cpu", weights=weights)
    return model, tokenizer, prepare(model, check=False, measure_cost=False)


def score(result: Fidelity, want: torch.Tensor, got: torch.Tensor) -> None:
    """Add one answer's positions to result: want and got are log-probabilities [positions, V], the reference's and
    this configuration's; KL(want || got) summed over positions (a token both give probability 0 adds nothing)."""
    flips = int((got.argmax(-1) != want.argmax(-1)).sum())
    result.positions += len(want)
    result.differing += flips
    result.answers_touched += flips > 0
    result.kl_sum += float(torch.where(want > -torch.inf, want.exp() * (want - got), 0.0).sum())


def compare(records: list[dict[str, Any]], progress: bool = True) -> tuple[list[Fidelity], int, list[str]]:
    """Each configuration's Fidelity against the reference over the records' answers, the positions counted, and why
    any configuration was left out (8-bit weights serve on the AVX2 and AVX512-BF16 rows kernels only:
    runtime/grid.py)."""
    reference, tokenizer, reference_runtime = served(REFERENCE[1], REFERENCE[2])
    stops = stop_token_ids(reference, tokenizer)
    others, results, left = [], [], []
    for label, dtype, weights in CONFIGS:
        try:
            model, _, runtime = served(dtype, weights)
        except ValueError as err:  # load() refuses a configuration this machine cannot serve, and says why
            left.append(f"{label}: {err}")
            continue
        others.append((model, runtime))
        results.append(Fidelity(label, dtype, weights, runtime.record(model)["linear"]))
    positions = 0
    for record in tqdm(records, desc="fidelity", disable=not progress):
        ids, start = answer_ids(tokenizer, record, stops)
        want = torch.log_softmax(answer_logits(reference, reference_runtime, ids, start), -1)
        positions += len(ids) - start
        for result, (model, runtime) in zip(results, others):
            score(result, want, torch.log_softmax(answer_logits(model, runtime, ids, start), -1))
    return results, positions, left


def lines(results: list[Fidelity]) -> Iterator[str]:
    """The printed table: one line a configuration."""
    yield f"{'configuration':26s} {'positions':>9s} {'differing':>9s} {'top-1 agree':>11s} {'KL mean':>9s} answers"
    for r in results:
        row = r.row()
        yield (f"{r.label:26s} {r.positions:9d} {r.differing:9d} {row['top1_agreement']:11.4f} "
               f"{row['kl_mean']:9.5f} {r.answers_touched}")


def main(argv: list[str] | None = None) -> None:
    """Entry point: compare, print, keep."""
    p = argparse.ArgumentParser(prog="python -m mars_core.evaluation.fidelity", description=__doc__.split("\n\n")[0])
    p.add_argument("--split", default="heldout", help="the evaluation split whose reference answers are followed")
    p.add_argument("--limit", type=int, default=None, help="the first N records (round-robin over categories)")
    p.add_argument("--json", default=None, help="write the record here")
    args = p.parse_args(argv)
    records = load_split(args.split, args.limit)
    results, positions, left = compare(records)
    machine = machine_info()
    for line in [*lines(results), *(f"left out: {why}" for why in left)]:
        print(line)
    if args.json:
        write_json(args.json, {"split": args.split, "records": len(records), "positions": positions,
                               "reference": REFERENCE[0], "machine": machine, "device": machine_line(machine),
                               "configs": [r.row() for r in results], "left_out": left}, indent=2)


if __name__ == "__main__":
    main()
