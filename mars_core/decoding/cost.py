"""What a forward costs on this machine: seconds by batch size and tokens fed per sample, measured once and cached.

Verified decoding sizes each forward's tree with it: drafts and groups of masks are fed only where the tokens they
are expected to commit pay for their width. Width costs differ by machine: on a 2-core Xeon with AMX (bf16) 16 new
tokens cost 1.4x one, on one without AMX (fp32) 3.6x, so constants tuned on one machine are wrong on the next.

    curve = forward_cost(model, cache_dir)   # measured in seconds on first use, then read from cache_dir
    curve.at(batch=4, widths=range(33))      # seconds per forward, interpolated linearly in width and batch
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..cpu_linear import narrow_rows, packed_from, set_packed_from
from ..machine import machine_info
from .cache import cache_mask, forward, new_cache

BATCH_SIZES = (1, 4, 16)  # measured batch sizes; others are interpolated (or extrapolated linearly)
WIDTHS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)  # measured tokens per sample
TOKEN_BUDGET = 32  # widths with batch * width above this are extrapolated, not timed (seconds, not minutes)
ROUNDS = 5  # timed rounds per width; the fastest is kept
SPOT_WIDTHS = (1, 4)  # batch-1 widths a kept curve is checked against at load


def interpolate(x: float, xs: tuple[float, ...], ys: list[float]) -> float:
    """Piecewise-linear y(x) through the points, extended linearly past both ends (one point: a constant). Past the
    last point the slope is at least 0: a wider forward is never taken to cost less than the widest one timed."""
    if len(xs) == 1:
        return ys[0]
    i = max(1, min(len(xs) - 1, next((k for k, v in enumerate(xs) if v >= x), len(xs) - 1)))
    slope = (ys[i] - ys[i - 1]) / (xs[i] - xs[i - 1])
    if x > xs[-1]:
        return ys[-1] + max(slope, 0.0) * (x - xs[-1])
    return ys[i - 1] + slope * (x - xs[i - 1])


@dataclass(frozen=True)
class CostCurve:
    """Seconds of one cached forward, seconds[i][j] for batch_sizes[i] samples of widths[j] new tokens each."""

    batch_sizes: tuple[int, ...]
    widths: tuple[int, ...]
    seconds: tuple[tuple[float, ...], ...]
    machine: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)  # where it was measured

    def __post_init__(self) -> None:
        if len(self.seconds) != len(self.batch_sizes) or any(len(r) != len(self.widths) for r in self.seconds):
            raise ValueError("CostCurve: seconds must have one row per batch size and one column per width")
        if list(self.widths) != sorted(set(self.widths)) or list(self.batch_sizes) != sorted(set(self.batch_sizes)):
            raise ValueError("CostCurve: widths and batch sizes must be distinct and ascending")
        if any(s <= 0 for row in self.seconds for s in row):
            raise ValueError("CostCurve: every time must be > 0")

    def at(self, batch: int, widths: Iterable[int]) -> list[float]:
        """Seconds of a forward of `batch` samples at each width (width 0 costs what width 1 does)."""
        row = [interpolate(batch, self.batch_sizes, [r[j] for r in self.seconds]) for j in range(len(self.widths))]
        return [max(interpolate(max(w, 1), self.widths, row), 1e-9) for w in widths]

    @classmethod
    def from_function(cls, seconds: Callable[[int, int], float], batch_sizes: tuple[int, ...] = (1,),
                      widths: tuple[int, ...] = tuple(range(1, 65))) -> CostCurve:
        """A curve from a formula seconds(batch, width): for tests and for reproducible benchmarks."""
        return cls(batch_sizes, widths, tuple(tuple(float(seconds(b, w)) for w in widths) for b in batch_sizes))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CostCurve:
        return cls(tuple(d["batch_sizes"]), tuple(d["widths"]), tuple(tuple(r) for r in d["seconds"]),
                   d.get("machine", {}))

    @classmethod
    def from_json(cls, text: str) -> CostCurve:
        return cls.from_dict(json.loads(text))


@torch.inference_mode()
def measure_cost(model: torch.nn.Module, batch_sizes: tuple[int, ...] = BATCH_SIZES, widths: tuple[int, ...] = WIDTHS,
                 context: int = 128, rounds: int = ROUNDS, budget: int = TOKEN_BUDGET) -> CostCurve:
    """Time cached forwards (explicit mask, logits for up to 8 slots, as verified decoding reads them) after a
    `context`-token prefix, the fastest of interleaved rounds (other work only ever adds time, so the minimum is
    the forward's own cost), made non-decreasing in width; widths past the token budget are extrapolated."""
    dev, vocab = model.device, model.get_input_embeddings().weight.shape[0]
    gen = torch.Generator().manual_seed(0)
    rows = []
    for b in batch_sizes:
        timed = [w for w in widths if b * w <= budget or w <= 2]
        prefix = torch.randint(vocab, (b, context + max(timed)), generator=gen).to(dev)
        cache = new_cache(model)
        forward(model, prefix[:, :context], torch.arange(context, device=dev).expand(b, -1),
                cache_mask(torch.ones(b, context, dtype=torch.bool, device=dev), context), cache, keep=1)
        times: dict[int, list[float]] = {w: [] for w in timed}
        for _ in range(rounds + 1):  # the first round warms up
            for w in timed:
                times[w].append(_timed_forward(model, cache, prefix[:, context : context + w], context))
        measured = [min(times[w][1:]) for w in timed]
        # A narrower forward never costs more than a wider one timed (on an Intel Xeon in fp32, MKL's one-row
        # kernel read 45 ms after a run of wide oneDNN forwards, 35 alone, while two rows read 37).
        for j in reversed(range(len(measured) - 1)):
            measured[j] = min(measured[j], measured[j + 1])
        rows.append(tuple(interpolate(w, tuple(timed), measured) for w in widths))
    return CostCurve(tuple(batch_sizes), tuple(widths), tuple(rows), machine_info(dev, model.dtype))


def _timed_forward(model: torch.nn.Module, cache, ids: torch.Tensor, context: int) -> float:
    """Seconds of one forward of ids [b, w] after the cached context, which is cropped back afterwards."""
    b, w = ids.shape
    positions = torch.arange(context, context + w, device=ids.device).expand(b, -1)
    mask = cache_mask(torch.ones(b, context + w, dtype=torch.bool, device=ids.device), w)
    if ids.device.type == "cuda":
        torch.cuda.synchronize(ids.device)
    t0 = time.perf_counter()
    forward(model, ids, positions, mask, cache, keep=min(w, 8))
    if ids.device.type == "cuda":
        torch.cuda.synchronize(ids.device)
    seconds = time.perf_counter() - t0
    cache.crop(-w)
    return seconds


def cost_key(model: torch.nn.Module) -> str:
    """What a cost curve depends on: the machine (CPU, ISA, threads, torch, device), the dtype, the model's shape."""
    info = machine_info(model.device, model.dtype)
    shape = {k: getattr(model.config, k, None) for k in ("model_type", "hidden_size", "intermediate_size",
                                                          "num_hidden_layers", "num_attention_heads",
                                                          "num_key_value_heads", "vocab_size")}
    shape["attn"] = getattr(model.config, "_attn_implementation", None)
    shape["packed_linear"] = packed_from(model)  # oneDNN-packed layers (from how many rows) cost another curve
    return hashlib.sha256(json.dumps([info, shape], sort_keys=True).encode()).hexdigest()[:16]


STALE = 1.15  # a kept curve that reads this much slower than forwards timed now (SPOT_WIDTHS) was timed under load
_UNKEPT: dict[str, CostCurve] = {}  # curves timed on a busy machine, by cost_key: this process's, never written


def busy() -> bool:
    """Whether other work holds the cores (1-minute load average above their count): timings taken now overstate."""
    try:
        return os.getloadavg()[0] > (os.cpu_count() or 1)
    except OSError:  # no load average on this platform
        return False


def spot_seconds(model: torch.nn.Module) -> list[float]:
    """Seconds of batch-1 forwards of SPOT_WIDTHS tokens now, the fastest of three each (a fraction of a second)."""
    return list(measure_cost(model, batch_sizes=(1,), widths=SPOT_WIDTHS, rounds=3).seconds[0])


def inflated(kept: CostCurve, now: list[float]) -> bool:
    """Whether the kept curve reads STALE times slower than forwards timed now at any of SPOT_WIDTHS."""
    return any(k > STALE * n for k, n in zip(kept.at(1, SPOT_WIDTHS), now))


def forward_cost(model: torch.nn.Module, cache_dir: str | Path | None = None, refresh: bool = False) -> CostCurve:
    """The model's cost curve on this machine: read from cache_dir/<key>.json, else measured and written there,
    unless the machine was busy while it was measured (that curve serves this process only: the next load times
    again rather than keep a curve other work inflated). A kept curve is checked against forwards timed now, when
    the machine is quiet: other work the load average missed (one busy thread of two) inflates the timings, the
    narrow ones most, which misleads the plan, so a curve that reads STALE times slower is timed again."""
    key = cost_key(model)
    path = Path(cache_dir) / f"{key}.json" if cache_dir is not None else None
    if not refresh and key in _UNKEPT:
        return _UNKEPT[key]
    if path is not None and path.is_file() and not refresh:
        try:
            kept = CostCurve.from_json(path.read_text())
        except (ValueError, KeyError, TypeError):
            kept = None  # a damaged cache file is measured again
        if kept is not None and (busy() or not inflated(kept, spot_seconds(model))):
            return kept
    crowded = busy()  # asked before timing: the timing itself loads the cores
    curve = measure_cost(model)
    if crowded:
        _UNKEPT[key] = curve
    elif path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(curve.to_json())
        tmp.replace(path)
    return curve


def choose_kernels(model: torch.nn.Module, cache_dir: str | Path | None = None, refresh: bool = False) -> int:
    """Which kernel a packed model's linear layers use by rows on this machine (cpu_linear.narrow_rows: F.linear
    below the returned row count, the packed weight from it): timed once (2-3 s for the 135M model) and kept in
    cache_dir/kernels-<key>.json beside the cost curves, unless the machine was busy while timing."""
    if not packed_from(model):
        return 0
    set_packed_from(model, 1)
    path = Path(cache_dir) / f"kernels-{cost_key(model)}.json" if cache_dir is not None else None
    if path is not None and path.is_file() and not refresh:
        try:
            rows = int(json.loads(path.read_text())["packed_from"])
            set_packed_from(model, rows)
            return rows
        except (ValueError, KeyError, TypeError):
            pass  # a damaged file is timed again
    crowded = busy()
    rows = narrow_rows(model)
    if path is not None and not crowded:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"packed_from": rows, "machine": machine_info(model.device, model.dtype)}))
    return rows
