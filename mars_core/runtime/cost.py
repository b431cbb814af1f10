"""What a forward costs on this machine, with the runtime's kernels: seconds by batch size and tokens fed per sample,
measured once and kept.

Verified decoding sizes each forward's tree with it: drafts and groups of masks are fed only where the tokens they
are expected to commit pay for their width. Width costs differ by machine: on a 2-core Xeon with AMX (bf16) 16 new
tokens cost 1.4x one, on one without AMX (fp32) 3.6x, so constants tuned on one machine are wrong on the next.

    curve = forward_cost(model, runtime, cache_dir)   # measured in seconds on first use, then read from cache_dir
    curve.at(batch=4, widths=range(33))      # seconds per forward, interpolated linearly in width and batch
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from .curve import CostCurve, interpolate, shape_moved
from .engine import Engine
from .forward import causal_seen, feed, head, keep, new_cache
from .runtime import Runtime
from .slots import SlotCache, cache_slots
from .timing import kept, machine_busy, seconds

__all__ = ["CostCurve", "Timing", "forward_cost", "interpolate", "measure_cost", "spot_seconds"]

FORMAT = "v2"  # in a kept curve's name: v2 prices widths past the budget by batch 1's tokens (older: timed anew)
TOKEN_BUDGET = 32  # widths with batch * width above this are extrapolated, not timed (seconds, not minutes)
ROUNDS = 5  # timed rounds per width; the fastest is kept
STALE = 1.15  # a kept curve that reads this much slower than forwards timed now (spot widths) was timed under load


@dataclass(frozen=True)
class Timing:
    """How a model's curve is timed, and how a kept one is checked at load."""

    batch_sizes: tuple[int, ...] = (1, 4, 16)  # measured batch sizes; others are interpolated (or extrapolated)
    widths: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)  # measured tokens per sample
    context: int = 128  # tokens cached before the timed forwards
    spot_widths: tuple[int, ...] = (1, 4)  # batch-1 widths a kept curve is checked against at load
    spot_rounds: int = 3  # rounds of those (the fastest kept)
    drift: float | None = None  # also timed again where its shape t(w) / t(1) moved by this factor either way
    # a narrower width never priced above a wider one timed (torch: a stall after a change of kernel, not its cost);
    # False: each width as timed, where the kernels really take rows in pairs and an odd width costs more
    narrower_never_dearer: bool = True
    kept_as: str = FORMAT  # in a kept curve's name: a curve kept under another rule is timed anew


# torch's forward; an engine's (llama.cpp: one row takes other kernels than two, so every narrow width is timed; the
# planner reads only the shape, which moves between two hosts of one CPU model, so the shape is checked too; its
# kernels take rows in pairs, so an odd width can cost more than the even one above it: each width as timed, the odd
# ones up to 7, wider ones read between the even widths timed)
TORCH = Timing()
ENGINE = Timing(batch_sizes=(1,), widths=(1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32), context=30,
                spot_widths=(1, 4, 8), spot_rounds=5, drift=1.2, narrower_never_dearer=False,
                kept_as="v3")  # v3: each width as timed
BATCH_SIZES, WIDTHS, SPOT_WIDTHS = TORCH.batch_sizes, TORCH.widths, TORCH.spot_widths


def timing_of(model: torch.nn.Module | Engine) -> Timing:
    """How this model's curve is timed: ENGINE for an Engine, TORCH otherwise."""
    return ENGINE if isinstance(model, Engine) else TORCH


def vocab_size(model: torch.nn.Module | Engine) -> int:
    """Token ids a measurement may feed: the input embeddings' rows (an Engine: its config's vocab_size)."""
    if isinstance(model, Engine):
        return model.config.vocab_size
    return model.get_input_embeddings().weight.shape[0]


@torch.inference_mode()
def measure_cost(model: torch.nn.Module | Engine, runtime: Runtime, *, batch_sizes: tuple[int, ...] | None = None,
                 widths: tuple[int, ...] | None = None, context: int | None = None, rounds: int | None = None,
                 budget: int = TOKEN_BUDGET) -> CostCurve:
    """Time the decoders' forward (forward.feed, logits for up to 8 slots, as verified decoding reads them) after a
    `context`-token prefix, under the runtime's kernels, the fastest of interleaved rounds (other work only ever adds
    time, so the minimum is the forward's own cost), made non-decreasing in width where the Timing says so
    (narrower_never_dearer); widths past the token budget are extrapolated. Unset: the model's Timing (timing_of)
    and ROUNDS."""
    plan = timing_of(model)
    batch_sizes, widths = batch_sizes or plan.batch_sizes, widths or plan.widths
    context, rounds = context or plan.context, rounds or ROUNDS
    dev, vocab = model.device, vocab_size(model)
    gen = torch.Generator().manual_seed(0)
    rows = []
    for b in batch_sizes:
        timed = [w for w in widths if b * w <= budget or w <= 2]
        prefix = torch.randint(vocab, (b, context + max(timed)), generator=gen).to(dev)
        slots = cache_slots(context, max(max(timed), context))
        with new_cache(model, b, slots) as cache:
            _keep_context(model, runtime, cache, prefix[:, :context], slots)
            times: dict[int, list[float]] = {w: [] for w in timed}
            for _ in range(rounds + 1):  # the first round warms up
                for w in timed:
                    times[w].append(_timed_forward(model, runtime, cache, prefix[:, context : context + w], context))
        measured = [min(times[w][1:]) for w in timed]
        # A narrower forward never costs more than a wider one timed (on an Intel Xeon in fp32, MKL's one-row
        # kernel stalled after a run of wide oneDNN forwards and read dearer than two rows), unless the Timing says
        # its kernels' odd widths really cost more (llama.cpp's)
        for j in reversed(range(len(measured) - 1) if plan.narrower_never_dearer else ()):
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


def _keep_context(model: torch.nn.Module | Engine, runtime: Runtime, cache, prefix: torch.Tensor, slots: int) -> None:
    """Keep the prefix [b, context] in the cache before the timed forwards. A batch's context is one sample's
    forward, its keys and values copied to the others (SlotCache.repeat): a forward's cost depends on how many keys it
    reads, not on what they hold, and a batch's own prefill of the context took longer than all its timed forwards."""
    if prefix.shape[0] == 1 or not isinstance(cache, SlotCache):
        _timed_forward(model, runtime, cache, prefix, 0, kept=True)
        return
    with new_cache(model, 1, slots) as one:
        _timed_forward(model, runtime, one, prefix[:1], 0, kept=True)
        cache.repeat(one)


def _timed_forward(model: torch.nn.Module, runtime: Runtime, cache, ids: torch.Tensor, context: int,
                   kept: bool = False) -> float:
    """Seconds of one forward of ids [b, w] (a causal run) after the `context` tokens kept, and the logits of up to 8
    of its slots; kept: its tokens stay (else the next forward overwrites them)."""
    (b, w), dev = ids.shape, ids.device
    fed = torch.ones(b, w, dtype=torch.bool, device=dev)
    seen = causal_seen(fed)
    positions = torch.arange(context, context + w, device=dev).expand(b, -1)

    def forward() -> torch.Tensor:
        hidden = feed(model, cache, ids, positions, seen, fed, runtime=runtime, capture=not kept)
        return head(model, hidden[:, -min(w, 8):], runtime)

    return seconds(forward, dev, after=lambda: keep(cache, fed.sum(1) * kept))


def spot_seconds(model: torch.nn.Module | Engine, runtime: Runtime) -> list[float]:
    """Seconds of batch-1 forwards of the spot widths now, the fastest of the Timing's rounds (under a second)."""
    plan = timing_of(model)
    return list(measure_cost(model, runtime, batch_sizes=(1,), widths=plan.spot_widths, rounds=plan.spot_rounds
                             ).seconds[0])


def stale(curve: CostCurve, now: list[float], plan: Timing = TORCH) -> bool:
    """Whether a kept curve no longer describes this machine, by forwards timed now at the spot widths: it reads STALE
    times slower at any of them (timed under load: other work inflates the narrow widths most, which misleads the
    plan), or, where the Timing says so, its shape moved by `drift` either way."""
    then = curve.at(1, plan.spot_widths)
    return any(k > STALE * n for k, n in zip(then, now)) or (
        plan.drift is not None and shape_moved(then, now, plan.drift))


def forward_cost(model: torch.nn.Module | Engine, runtime: Runtime, cache_dir: str | Path | None = None,
                 refresh: bool = False) -> CostCurve:
    """The model's cost curve on this machine under the runtime's kernels (an Engine: its own forward), kept as
    cache_dir/<key>-<Timing.kept_as>.json (timing.kept: a curve timed while the machine was busy is read back only
    while it is busy). A kept curve is checked against forwards timed now when the machine is quiet, and timed again
    where it went stale; refresh: timed again whatever is kept."""
    plan = timing_of(model)
    path = Path(cache_dir) / f"{runtime.key(model)}-{plan.kept_as}.json" if cache_dir is not None else None
    return kept(path, CostCurve.from_dict, lambda: measure_cost(model, runtime), CostCurve.to_dict, fresh=refresh,
                holds=lambda curve: machine_busy() or not stale(curve, spot_seconds(model, runtime), plan))
