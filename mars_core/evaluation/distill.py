"""Build the self-distillation data: prompts from prompt_sources (beside mars_core, not part of the engine), answered
by the base model's own greedy decoding.

    python -m mars_core.distill --out data/ [--model NAME] [--train 1200] [--heldout 117] [--batch-size 24]
                                [--seed 0] [--exclude earlier/train.jsonl earlier/heldout.jsonl]
    python -m mars_core.distill --out data/ --never-trained      # data/never_trained.jsonl (never trained on)
    python -m mars_core.distill --out runs/p --train 5000 --heldout 0 --write-prompts   # runs/p/prompts.jsonl, no model
    python -m mars_core.distill --out runs/p --prompts runs/p/prompts.jsonl [--shard 0/4] [--dtype fp32]

The last two split a build in two: the prompts are drawn where their optional sources (reasoning-gym,
chatterbot-corpus) are installed, and answered where the compute is (a GPU, several processes one shard each).

Writes out/train.jsonl and out/heldout.jsonl, one record a line:
    {"messages": [{"role": "user", ...}, {"role": "assistant", ...}], "category": ..., "gold": ..., "task": ...}
The assistant turn is the model's greedy answer (stop at EOS, at most --max-new-tokens), so training on it keeps
the model's answers by construction, and the held-out answer IS the base model's greedy answer. Held-out prompts
are drawn per category before the training ones and never appear in train.jsonl. Answers are appended to
out/.distill_partial.jsonl as batches finish, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .tasks import CATEGORIES

# Training prompts per category (predictable and open categories both well represented).
DEFAULT_TRAIN = {
    "lists": 70, "counting": 70, "tables": 60, "repeats": 60, "reformatting": 70, "arithmetic": 70,
    "chat": 90, "explanation": 70, "reasoning": 80,
}
DEFAULT_HELDOUT_PER_CATEGORY = 11
PARTIAL = ".distill_partial.jsonl"


def split_prompts(
    train_counts: dict[str, int], heldout_per_category: int, seed: int = 0
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, heldout) prompt records: per category the held-out ones come first; prompts never overlap."""
    from prompt_sources import build_prompts

    counts = {c: n + heldout_per_category for c, n in train_counts.items()}
    records = build_prompts(counts, seed=seed)
    rng = random.Random(seed + 1)
    train, heldout = [], []
    for cat in train_counts:
        group = [r for r in records if r["category"] == cat]
        rng.shuffle(group)
        heldout.extend(group[:heldout_per_category])
        train.extend(group[heldout_per_category:])
    held = {r["prompt"] for r in heldout}
    train = [r for r in train if r["prompt"] not in held]
    return train, heldout


def _batches(records: list[dict[str, Any]], size: int, tokenizer) -> list[list[dict[str, Any]]]:
    """Batches of similar prompts (same category, similar length) so padding and stragglers cost less."""
    order = sorted(records, key=lambda r: (r["category"], len(tokenizer(r["prompt"])["input_ids"])))
    return [order[i : i + size] for i in range(0, len(order), size)]


def distill(
    model, tokenizer, records: list[dict[str, Any]], *, batch_size: int = 24, max_new_tokens: int = 128,
    partial: Path | None = None, progress: bool = True,
) -> list[dict[str, Any]]:
    """Answer every prompt record with greedy AR decoding; return records with messages (same order)."""
    from tqdm.auto import tqdm

    from ..generate import generate

    done: dict[str, dict[str, Any]] = {}
    if partial is not None and partial.is_file():
        for line in partial.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                done[row["messages"][0]["content"]] = row
    todo = [r for r in records if r["prompt"] not in done]
    bar = tqdm(total=len(records), initial=len(records) - len(todo), desc="distilling", disable=not progress)
    sink = partial.open("a", encoding="utf-8") if partial is not None else None
    try:
        for batch in _batches(todo, batch_size, tokenizer):
            result = generate(model, tokenizer, [r["prompt"] for r in batch], strategy="ar",
                              max_new_tokens=max_new_tokens)
            for rec, text, ids in zip(batch, result.texts, result.token_ids):
                row = to_record(rec, text.strip(), truncated=len(ids) >= max_new_tokens)
                done[rec["prompt"]] = row
                if sink is not None:
                    sink.write(json.dumps(row, ensure_ascii=False) + "\n")
            if sink is not None:
                sink.flush()
            bar.update(len(batch))
    finally:
        bar.close()
        if sink is not None:
            sink.close()
    return [done[r["prompt"]] for r in records]


def to_record(rec: dict[str, Any], answer: str, truncated: bool = False) -> dict[str, Any]:
    """A chat record: messages, category, and gold/task/kind/source/truncated where present."""
    row: dict[str, Any] = {
        "messages": [{"role": "user", "content": rec["prompt"]}, {"role": "assistant", "content": answer}],
        "category": rec["category"],
    }
    for key in ("gold", "task", "kind", "source"):
        if rec.get(key) is not None:
            row[key] = rec[key]
    if truncated:
        row["truncated"] = True
    return row


def write_jsonl(rows: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def unseen(records: list[dict[str, Any]], exclude: Sequence[str | Path]) -> list[dict[str, Any]]:
    """The prompt records whose prompt is in none of the `exclude` chat JSONL files."""
    if not exclude:
        return records
    from ..training.data import read_jsonl

    seen = {r["messages"][0]["content"] for path in exclude for r in read_jsonl(path)}
    return [r for r in records if r["prompt"] not in seen]


def build(
    out: str | Path, model=None, tokenizer=None, *, model_name: str | None = "smollm2-135m-instruct",
    train_counts: dict[str, int] | None = None, heldout_per_category: int = DEFAULT_HELDOUT_PER_CATEGORY,
    batch_size: int = 24, max_new_tokens: int = 128, seed: int = 0, progress: bool = True,
    exclude: Sequence[str | Path] = (),
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Build and write out/train.jsonl and out/heldout.jsonl; returns (train, heldout) records.
    Prompts already in an `exclude` JSONL (an earlier build's files) are left out, so a build with another
    seed adds fresh training prompts that never touch an existing held-out set."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if model is None:
        from ..load import load

        model, tokenizer = load(model_name, weights="bf16")  # the model as trained
    train_p, held_p = split_prompts(train_counts or DEFAULT_TRAIN, heldout_per_category, seed)
    train_p, held_p = unseen(train_p, exclude), unseen(held_p, exclude)
    rows = distill(model, tokenizer, held_p + train_p, batch_size=batch_size, max_new_tokens=max_new_tokens,
                   partial=out / PARTIAL, progress=progress)
    heldout, train = rows[: len(held_p)], rows[len(held_p):]
    write_jsonl(train, out / "train.jsonl")
    write_jsonl(heldout, out / "heldout.jsonl")
    (out / PARTIAL).unlink(missing_ok=True)
    return train, heldout


def training_prompts(
    train_counts: dict[str, int] | None = None, heldout_per_category: int = DEFAULT_HELDOUT_PER_CATEGORY,
    seed: int = 0, exclude: Sequence[str | Path] = (),
) -> list[dict[str, Any]]:
    """The training prompt records `build` would answer (its held-out draw is made, then left out, so the same seed
    gives the same training prompts either way); prompts already in an `exclude` JSONL are dropped."""
    train_p, _ = split_prompts(train_counts or DEFAULT_TRAIN, heldout_per_category, seed)
    return unseen(train_p, exclude)


def shard(records: list[dict[str, Any]], spec: str | None) -> tuple[list[dict[str, Any]], str]:
    """('K/N') -> every N-th record from the K-th, and the output name 'train.K-of-N'; None -> all, 'train'."""
    if not spec:
        return records, "train"
    k, _, n = spec.partition("/")
    if not (k.isdigit() and n.isdigit() and 0 <= int(k) < int(n)):
        raise ValueError(f"--shard must be K/N with 0 <= K < N, got {spec!r}")
    return records[int(k) :: int(n)], f"train.{k}-of-{n}"


def answer_prompts(
    out: str | Path, records: list[dict[str, Any]], model, tokenizer, *, name: str = "train", batch_size: int = 24,
    max_new_tokens: int = 128, progress: bool = True,
) -> list[dict[str, Any]]:
    """Answer prompt records (as `training_prompts` writes them) and write out/<name>.jsonl; resumable through
    out/.<name>_partial.jsonl like `build`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    partial = out / f".{name}_partial.jsonl"
    rows = distill(model, tokenizer, records, batch_size=batch_size, max_new_tokens=max_new_tokens,
                   partial=partial, progress=progress)
    write_jsonl(rows, out / f"{name}.jsonl")
    partial.unlink(missing_ok=True)
    return rows


def build_never_trained(
    out: str | Path, model=None, tokenizer=None, *, model_name: str | None = "smollm2-135m-instruct",
    batch_size: int = 24, max_new_tokens: int = 128, seed: int = 0, progress: bool = True,
) -> list[dict[str, Any]]:
    """Answer the never-trained split's prompts (prompt_sources.never_trained) with the base model and write
    out/never_trained.jsonl: the split that measures what users will feel."""
    from prompt_sources import never_trained_prompts

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if model is None:
        from ..load import load

        model, tokenizer = load(model_name, weights="bf16")  # the model as trained
    partial = out / ".never_trained_partial.jsonl"
    rows = distill(model, tokenizer, never_trained_prompts(seed=seed), batch_size=batch_size,
                   max_new_tokens=max_new_tokens, partial=partial, progress=progress)
    write_jsonl(rows, out / "never_trained.jsonl")
    partial.unlink(missing_ok=True)
    return rows


def parse_counts(spec: str | None) -> dict[str, int] | None:
    """'lists=100,chat=50' -> {...}; a bare integer N spreads N over the default mix proportionally."""
    if not spec:
        return None
    if spec.strip().isdigit():
        total, base = int(spec), sum(DEFAULT_TRAIN.values())
        return {c: max(1, round(n * total / base)) for c, n in DEFAULT_TRAIN.items()}
    counts = {}
    for part in spec.split(","):
        name, _, n = part.partition("=")
        if name.strip() not in CATEGORIES:
            raise ValueError(f"unknown category {name!r}; known: {CATEGORIES}")
        counts[name.strip()] = int(n)
    return counts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="mars-distill", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="data", help="output folder (train.jsonl, heldout.jsonl)")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="the model that answers (the base)")
    parser.add_argument("--train", default=None,
                        help="training prompts: a total N (default mix scaled) or 'lists=100,chat=50,...'")
    parser.add_argument("--heldout", type=int, default=DEFAULT_HELDOUT_PER_CATEGORY,
                        help="held-out prompts per category")
    parser.add_argument("--batch-size", type=int, default=24)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--exclude", nargs="*", default=(),
                        help="JSONL files whose prompts to leave out (e.g. data/train.jsonl data/heldout.jsonl)")
    parser.add_argument("--write-prompts", action="store_true",
                        help="write the training prompts to out/prompts.jsonl and stop (no model is loaded)")
    parser.add_argument("--prompts", default=None,
                        help="answer the prompt records of this JSONL (from --write-prompts) into out/train.jsonl")
    parser.add_argument("--shard", default=None, help="with --prompts: K/N answers every N-th record from the K-th "
                        "into out/train.K-of-N.jsonl (N processes, one shard each)")
    parser.add_argument("--dtype", default=None, help="the answering model's dtype: auto (default), bf16 or fp32")
    parser.add_argument("--never-trained", action="store_true",
                        help="build out/never_trained.jsonl instead: the evaluation split from sources training "
                             "never uses (hand-written prompts, gsm_symbolic, HumanEval)")
    args = parser.parse_args(argv)
    if args.write_prompts:
        records = training_prompts(parse_counts(args.train), args.heldout, args.seed, args.exclude)
        write_jsonl(records, Path(args.out) / "prompts.jsonl")
        cats = Counter(r["category"] for r in records)
        print(f"prompts: {len(records)} records: " + ", ".join(f"{c}={n}" for c, n in sorted(cats.items())))
        return
    if args.prompts:
        from ..load import load
        from ..training.data import read_jsonl

        records, name = shard(read_jsonl(args.prompts), args.shard)
        model, tokenizer = load(args.model, dtype=args.dtype, weights="bf16")  # the model as trained
        rows = answer_prompts(args.out, records, model, tokenizer, name=name, batch_size=args.batch_size,
                              max_new_tokens=args.max_new_tokens)
        print(f"{name}: {len(rows)} records answered")
        return
    if args.never_trained:
        rows = build_never_trained(args.out, model_name=args.model, batch_size=args.batch_size,
                                   max_new_tokens=args.max_new_tokens, seed=args.seed)
        cats = Counter(r["category"] for r in rows)
        print(f"never_trained: {len(rows)} records: " + ", ".join(f"{c}={n}" for c, n in sorted(cats.items())))
        return
    train, heldout = build(args.out, model_name=args.model, train_counts=parse_counts(args.train),
                           heldout_per_category=args.heldout, batch_size=args.batch_size,
                           max_new_tokens=args.max_new_tokens, seed=args.seed, exclude=args.exclude)
    for name, rows in (("train", train), ("heldout", heldout)):
        cats = Counter(r["category"] for r in rows)
        print(f"{name}: {len(rows)} records: " + ", ".join(f"{c}={n}" for c, n in sorted(cats.items())))


if __name__ == "__main__":
    main()
