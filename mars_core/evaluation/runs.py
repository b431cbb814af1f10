"""mars-eval's decoding: every record of a split decoded once per run (threshold mode at each threshold, verified mode
at each draft threshold), batched, with what each forward committed, then summed into a report."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..decoding.verified import VerifiedConfig
from ..runtime import Runtime
from .drafts import check_drafts, draft_stats
from .report import base_rows, report_categories, run_key, summary_row

EVAL_THRESHOLDS = (1.0, 0.95, 0.9, 0.8, 0.7, 0.5)  # mars-eval's threshold-mode runs; 1.0 gives the one-token answers


@dataclass
class Committed:
    """What decoding one batch committed, per sample, and how long the batch took."""

    ids: list[list[int]]  # the answer's tokens
    slots: list[list[int]]  # per committed token: its place in its forward's accepted run (0 = AR)
    confidences: list[list[float]]  # per committed token: its confidence
    forwards: list[int]  # forwards that committed at least one of the sample's tokens
    seconds: float  # the batch's wall clock


def decode_batch(model, tokenizer, prompts: list[str], **stream_options: Any) -> Committed:
    """Stream one batch to its end (generate.stream with these options), collecting what each forward committed."""
    from ..generate import stream

    done = Committed([[] for _ in prompts], [[] for _ in prompts], [[] for _ in prompts], [0] * len(prompts), 0.0)
    t0 = time.perf_counter()
    for ev in stream(model, tokenizer, prompts, **stream_options):
        for k, toks in enumerate(ev.token_ids):
            if toks:
                done.ids[k].extend(toks)
                done.slots[k].extend(range(len(toks)))
                done.confidences[k].extend(ev.confidences[k])
                done.forwards[k] += 1
    done.seconds = time.perf_counter() - t0
    return done


def decode_records(
    model, tokenizer, records: list[dict[str, Any]], *, threshold: float, block_size: int, batch_size: int,
    max_new_tokens: int, strategy: str = "sliding", bar=None, confidence: str = "prob", runtime: Runtime | None = None,
) -> tuple[list[dict[str, Any]], list[int], list[int]]:
    """Decode every record (batched; batched sliding decoding equals one-by-one). Verified trees follow the fixed
    rules, never a measured cost curve: tokens per forward then says what the model does, not how busy the
    machine was when prepare() timed its forwards. runtime: the kernels (default: prepared(model), as generate()).

    Returns per-record results (text, tokens, forwards) and, per slot j, how many forwards committed at
    least j+1 tokens and how many forwards there were (for acceptance by slot position)."""
    options = dict(strategy=strategy, block_size=block_size, max_new_tokens=max_new_tokens, threshold=threshold,
                   layout=VerifiedConfig(use_cost=False), confidence=confidence, runtime=runtime)
    results: list[dict[str, Any] | None] = [None] * len(records)
    order = sorted(range(len(records)), key=lambda i: (records[i].get("category", ""), len(records[i]["prompt"])))
    slot_hits = [0] * block_size
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        got = decode_batch(model, tokenizer, [records[i]["prompt"] for i in idx], **options)
        for k, i in enumerate(idx):
            for j in got.slots[k]:  # a forward that committed >= j+1 tokens holds exactly one token at slot j
                if j < block_size:
                    slot_hits[j] += 1
            text = tokenizer.decode(got.ids[k], skip_special_tokens=True).strip()
            results[i] = {"text": text, "ids": got.ids[k], "tokens": len(got.ids[k]), "forwards": got.forwards[k],
                          "batch_seconds": got.seconds}
            if strategy == "sliding" and threshold < 1.0:
                results[i]["checks"] = check_drafts(model, tokenizer, records[i]["prompt"], got.ids[k], got.slots[k],
                                                    got.confidences[k])
        if bar is not None:
            bar.update(len(idx))
    return results, slot_hits, [sum(x["forwards"] for x in results)] * block_size


def evaluate(
    model, tokenizer, records: list[dict[str, Any]], *, thresholds=EVAL_THRESHOLDS, block_size: int = 4,
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
        rows += [summary_row(records, results, t, cat, strategy, one_token) for cat in cats]
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
