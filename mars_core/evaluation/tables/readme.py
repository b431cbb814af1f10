"""README.md's tables: the headline, one row per machine kind and core, from the newest batch-1 held-out record of each
(docs/speed.md's tables hold every row) and the newest identity record of that kind; and the race the page opens on,
from its recording beside the records (assets/race_example.json: the one table read outside assets/records)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import _records as R
from .speed import FORWARDS, GPU_RUNS, IDENTITY, SPEED, WEIGHTS

# machine kind, dtype load() picks there, the docs/speed.md section of its table
KINDS = (("amx", "bf16", "on-an-intel-xeon-with-amx-bf16"),
         ("avx512_bf16", "bf16", "on-an-amd-epyc-with-avx512-bf16-bf16"),
         ("avx2", "bf16", "on-avx2-only-a-laptops-kind-bf16-on-8-bit-weights"),
         ("gpu", "bf16", "on-an-h100"))


def _batch1(record: dict[str, Any]) -> tuple[str, dict, dict | None] | None:
    """The fastest forward's verified and one-token rows at batch 1 (compiled, else eager, else static)."""
    for forward, one, verified in FORWARDS:
        v = R.summary(record, verified, 1)
        if v is not None and v["threshold"] is not None and v["threshold"] < 1:
            return forward, v, R.summary(record, one, 1)
    return None


def _newest(found: list[tuple[str, dict[str, Any]]]) -> tuple[str, dict[str, Any]] | None:
    return max(found, key=lambda item: (R.date(item[1]), item[0]), default=None)


def _identity(records_dir: Path, key: tuple[str, str, str]) -> str:
    """The newest identity record's answers on a machine of this key (kind, core, dtype: _records.machine_key)."""
    found = []
    for name, rec in R.read_all(records_dir, IDENTITY) + R.read_all(records_dir, "gpu_*/exactness*.json"):
        for run in rec["dtypes"].values():
            if R.machine_key(run["machine"]) == key:
                found.append((name, {**rec, "run": run}))
    newest = _newest(found)
    if newest is None:
        return "not measured"
    splits = newest[1]["run"]["splits"].values()
    return f"{sum(s['identical'] for s in splits)} of {sum(s['prompts'] for s in splits)}"


def headline(records_dir: Path) -> str:
    """One row per machine kind (and core, where records name it): verified decoding at batch 1 on 18 held-out
    prompts against `generate` and llama.cpp's one-token decoding of the same weights, whether it is one-token
    decoding's answer, when measured."""
    rows = []
    speed = R.read_all(records_dir, SPEED) + [
        (f"{p.parent.name}/{p.name}", R.read(records_dir, f"{p.parent.name}/{p.name}"))
        for p in sorted(Path(records_dir).glob("gpu_*/*.json")) if p.name == GPU_RUNS[0]]
    for kind, dtype, anchor in KINDS:
        found = [(name, rec, key) for name, rec in speed if (key := R.machine_key(rec["machine"]))[0] == kind
                 and key[2] == dtype and rec.get("split") == "heldout" and _batch1(rec)]
        for key in sorted({key for *_, key in found}):  # a kind's cores, each its own row
            _, rec = _newest([(n, r) for n, r, k in found if k == key])
            rows.append(_headline_row(records_dir, rec, key, anchor))
    return R.table(("machine (2 cores; the GPU: its host's 16)", "forward", "tokens per forward",
                    "verified × `generate`", "× one-token", "× llama.cpp one-token, same weights",
                    "verified = one-token, answers", "measured", "details"), rows)


def _headline_row(records_dir: Path, rec: dict[str, Any], key: tuple[str, str, str], anchor: str) -> list[str]:
    """A headline row: one record's batch-1 verified decoding against `generate`, one-token and llama.cpp."""
    forward, verified, one = _batch1(rec)
    v = verified["tokens_per_second"]
    gen = R.summary(rec, "hf_generate", 1)
    engines = [f"{R.times(R.ratio(v, row['tokens_per_second']))} {label}"
               for w, label in WEIGHTS.items() if (row := R.summary(rec, "llamacpp_ar", 1, w))]
    return [
        R.machine_cell(rec["machine"]),
        forward,
        R.num(verified["tokens_per_forward"], 2),
        f"**{R.times(R.ratio(v, gen and gen['tokens_per_second']))}**",
        R.times(R.ratio(v, one and one["tokens_per_second"])),
        ", ".join(engines) or R.DASH,
        _identity(records_dir, key),
        R.provenance(rec),
        f"[speed](docs/speed.md#{anchor})",
    ]


RACE_LANES = (("ar", "AR"), ("mars", "MARS τ"), ("verified", "MARS verified"))


def race(records_dir: Path) -> str:
    """The race the page opens on (`python app.py --record-example`: assets/race_example.json, beside the records):
    each lane's tokens, forwards, tokens per forward, whether its answer is AR's, and its tokens per second as
    recorded, under a line saying when, where and on what forward."""
    record = R.read(Path(records_dir).parent, "race_example.json")
    if "summary" not in record:
        raise ValueError("assets/race_example.json predates its lanes' summary: re-record it with "
                         "`python app.py --record-example`")
    rows = [[label, str(s["tokens"]), str(s["forwards"]), R.num(s["tokens_per_forward"], 2),
             "the reference" if key == "ar" else ("AR's" if s["same_as_ar"] else "not AR's"),
             R.num(s["tokens_per_second"], 1)] for key, label in RACE_LANES for s in [record["summary"][key]]]
    said = (f"The race above is the one the page opens on (`python app.py --record-example`, labelled as recorded "
            f"until you press Run): {record['model']} on the held-out prompt \"{record['prompt']}\", τ = "
            f"{record['threshold']}, B = {record['block_size']}, recorded on {record['recorded']} "
            f"({record['machine']}, {record['dtype']}; forward {record['forward']}):")
    return said + "\n\n" + R.table(("lane", "tokens", "forwards", "tokens per forward", "answer",
                                     "tokens/s, recorded"), rows)


TABLES = {"headline": headline, "race": race}
