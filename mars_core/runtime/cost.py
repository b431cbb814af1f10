"""What a forward costs on this machine, with the runtime's kernels: seconds by batch size and tokens fed per sample,
measured once and kept.

Verified decoding sizes each forward's tree with it: drafts and groups of masks are fed only where the tokens they
are expected to commit pay for their width. Width costs differ by machine: on a 2-core Xeon with AMX (bf16) 16 new
tokens cost 1.4x one, on one without AMX (fp32) 3.6x, so constants tuned on one machine are wrong on the next.

    curve = forward_cost(model, runtime, cache_dir)   # measured in seconds on first use, then read from cache_dir
    curve.at(batch=4, widths=range(33))      # seconds per forward, interpolated linearly in width and batch
"""

from __future__ import annotations

from pathlib import Path

import torch

from .curve import CostCurve, interpolate
from .forward import feed, head, keep, new_cache, visible
from .runtime import Runtime
from .slots import cache_slots
from .timing import machine_busy, read_kept, seconds, write_json

__all__ = ["CostCurve", "forward_cost", "interpolate", "measure_cost", "spot_seconds"]

BATCH_SIZES = (1, 4, 16)  # measured batch sizes; others are interpolated (or extrapolated linearly)
WIDTHS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)  # measured tokens per sample
FORMAT = "v2"  # in a kept curve's name: v2 prices widths past the budget by batch 1's tokens (older: timed anew)
TOKEN_BUDGET = 32  # widths with batch * width above this are extrapolated, not timed (seconds, not minutes)
ROUNDS = 5  # timed rounds per width; the fastest is kept
SPOT_WIDTHS = (1, 4)  # batch-1 widths a kept curve is checked against at load


@torch.inference_mode()
def measure_cost(model: torch.nn.Module, runtime: Runtime, *, batch_sizes: tuple[int, ...] = BATCH_SIZES,
                 widths: tuple[int, ...] = WIDTHS, context: int = 128, rounds: int = ROUNDS,
                 budget: int = TOKEN_BUDGET) -> CostCurve:
    """Time the decoders' forward (forward.feed, logits for up to 8 slots, as verified decoding reads them) after a
    `context`-token prefix, under the runtime's kernels, the fastest of interleaved rounds (other work only ever adds
    time, so the minimum is the forward's own cost), made non-decreasing in width; widths past the token budget are
    extrapolated."""
    dev, vocab = model.device, model.get_input_embeddings().weight.shape[0]
    gen = torch.Generator().manual_seed(0)
    rows = []
    for b in batch_sizes:
        timed = [w for w in widths if b * w <= budget or w <= 2]
        prefix = torch.randint(vocab, (b, context + max(timed)), generator=gen).to(dev)
        with new_cache(model, b, cache_slots(context, max(max(timed), context))) as cache:
            _timed_forward(model, runtime, cache, prefix[:, :context], 0, kept=True)
            times: dict[int, list[float]] = {w: [] for w in timed}
            for _ in range(rounds + 1):  # the first round warms up
                for w in timed:
                    times[w].append(_timed_forward(model, runtime, cache, prefix[:, context : context + w], context))
        measured = [min(times[w][1:]) for w in timed]
        # A narrower forward never costs more than a wider one timed (on an Intel Xeon in fp32, MKL's one-row
        # kernel read 45 ms after a run of wide oneDNN forwards, 35 alone, while two rows read 37).
        for j in reversed(range(len(measured) - 1)):
            measured[j] = min(measured[j], measured[j + 1])
        one = rows[0] if batch_sizes[0] == 1 and b > 1 else None  # batch 1's curve, by tokens a forward
        rows.append(tuple(_past_budget(w, b, timed, measured, one, widths) for w in widths))
    return CostCurve(tuple(batch_sizes), tuple(widths), tuple(rows), runtime.record(model))


def _past_budget(w: int, b: int, timed: list[int], measured: list[float], one: tuple[float, ...] | None,
                 widths: tuple[int, ...]) -> float:
    """Seconds of a batch-b forward of w tokens a sample: interpolated between the widths timed; past the widest one
    timed, that one plus what batch 1 pays for as many more tokens (b*w against b*w_last). Extended from its own two
    narrowest points alone, a large batch's row read flat where they came out equal, and priced every width as free."""
    last = timed[-1]
    if w <= last or one is None:
        return interpolate(w, tuple(timed), measured)
    tokens = lambda n: interpolate(n, tuple(widths), list(one))  # noqa: E731 - batch 1's cost at n tokens
    return measured[-1] + max(0.0, tokens(b * w) - tokens(b * last))


def _timed_forward(model: torch.nn.Module, runtime: Runtime, cache, ids: torch.Tensor, context: int,
                   kept: bool = False) -> float:
    """Seconds of one forward of ids [b, w] (a causal run) after the `context` tokens kept, and the logits of up to 8
    of its slots; kept: its tokens stay (else the next forward overwrites them)."""
    (b, w), dev = ids.shape, ids.device
    fed = torch.ones(b, w, dtype=torch.bool, device=dev)
    seen = visible(torch.ones(w, w, dtype=torch.bool, device=dev).tril(), fed)
    positions = torch.arange(context, context + w, device=dev).expand(b, -1)

    def forward() -> torch.Tensor:
        hidden = feed(model, cache, ids, positions, seen, fed, runtime=runtime, capture=not kept)
        return head(model, hidden[:, -min(w, 8):], runtime)

    return seconds(forward, dev, after=lambda: keep(cache, fed.sum(1) * kept))


STALE = 1.15  # a kept curve that reads this much slower than forwards timed now (SPOT_WIDTHS) was timed under load
_UNKEPT: dict[str, CostCurve] = {}  # curves timed on a busy machine, by key: this process's, never written


def spot_seconds(model: torch.nn.Module, runtime: Runtime) -> list[float]:
    """Seconds of batch-1 forwards of SPOT_WIDTHS tokens now, the fastest of three each (a fraction of a second)."""
    return list(measure_cost(model, runtime, batch_sizes=(1,), widths=SPOT_WIDTHS, rounds=3).seconds[0])


def inflated(kept: CostCurve, now: list[float]) -> bool:
    """Whether the kept curve reads STALE times slower than forwards timed now at any of SPOT_WIDTHS."""
    return any(k > STALE * n for k, n in zip(kept.at(1, SPOT_WIDTHS), now))


def forward_cost(model: torch.nn.Module, runtime: Runtime, cache_dir: str | Path | None = None,
                 refresh: bool = False) -> CostCurve:
    """The model's cost curve on this machine under the runtime's kernels: read from cache_dir/<key>.json, else
    measured and written there, unless the machine was busy while it was measured (that curve serves this process
    only: the next load times again rather than keep a curve other work inflated). A kept curve is checked against
    forwards timed now, when the machine is quiet: other work the load average missed (one busy thread of two)
    inflates the timings, the narrow ones most, which misleads the plan, so a curve that reads STALE times slower is
    timed again."""
    key = runtime.key(model)
    path = Path(cache_dir) / f"{key}-{FORMAT}.json" if cache_dir is not None else None
    if not refresh and key in _UNKEPT:
        return _UNKEPT[key]
    curve = None if refresh else read_kept(path, CostCurve.from_dict)  # a damaged file is measured again
    if curve is not None and (machine_busy() or not inflated(curve, spot_seconds(model, runtime))):
        return curve
    crowded = machine_busy()  # asked before timing: the timing itself loads the cores
    curve = measure_cost(model, runtime)
    if crowded:
        _UNKEPT[key] = curve
    else:
        write_json(path, curve.to_dict())
    return curve
