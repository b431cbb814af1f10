"""A mars-eval report's rows: per run and category, tokens per forward, task accuracy, agreement with the base
model's answers, draft precision; the base model's own rows; rescoring and merging reports; the printed table."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .drafts import precision
from .metrics import agreement
from .tasks import CATEGORIES, PREDICTABLE, score, scorer


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


def run_key(strategy: str, threshold: float) -> str:
    """The key of one decoding run in a report's per-run dicts: "0.9" (threshold mode), "verified 0.5"."""
    return str(threshold) if strategy == "sliding" else f"{strategy} {threshold}"


def summary_row(records: list[dict[str, Any]], results: list[dict[str, Any]], threshold: float, category: str,
                strategy: str = "sliding", one_token: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One run's row for one category; same_as_one_token compares with the one-token run's answers when given."""
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
        "draft_precision": precision([c for _, x in pairs for c in x.get("checks", []) if c[0] >= 1]),
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


def report_table(report: dict[str, Any]) -> str:
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
