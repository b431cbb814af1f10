"""The verified decoder's loop: per forward, feed the tree, verify, commit, choose the next chain, keep what matched.

The loop carries two small states, DecodeState (what is committed, what the cache holds) and Tree (what the coming
forward feeds); the one host sync per forward returns the next tree's layout (how many draft columns, which groups
and siblings: the union over samples). The threshold in force when a forward runs decides which of its drafts the
next forward checks.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field, fields, replace
from itertools import accumulate
from time import perf_counter
from typing import Any

import torch

from ...runtime.curve import CostCurve
from ...runtime.forward import fed_then, head
from ..commit import Committed, decode_loop
from ..control import DecodeControl
from ..feed import decode_cache, right_pad
from ..lookup import expected_run
from ..sliding import sliding_decode
from ..spec import DecodeSpec, Step
from .chain import Chain, Choice, live_only, mask_chain, next_chain, next_tree, track_lookup
from .config import VerifiedConfig
from .pace import Pace
from .plan import FLOORS, YIELD_PRIOR, group_odds, one_token_only, seconds_by_width, sibling_odds
from .record import Forward
from .tree import Tree, leading, read_logits, tree_inputs
from .verify import DecodeState, Verdict, checked_path, commit_verdict, settle, track_yield, verify


def to_host(*tensors: torch.Tensor) -> list[list[int]]:
    """The tensors' values as Python lists of ints, in one device-to-host copy (one sync per forward). On the CPU
    there is no sync to save, and a list each is cheaper than packing them (a dozen small ops a forward)."""
    if tensors[0].device.type == "cpu":
        return [[int(v) for v in (t.tolist() if t.dim() == 1 else t.reshape(-1).tolist())] for t in tensors]
    flat = torch.cat([t.reshape(-1) if t.dtype == torch.long else t.reshape(-1).long() for t in tensors]).tolist()
    sizes = [t.numel() for t in tensors]
    return [flat[end - n : end] for end, n in zip(accumulate(sizes), sizes)]


def prefill(prompts: list[list[int]], spec: DecodeSpec, threshold: float, depth: int, dev: torch.device
          ) -> tuple[DecodeState, Tree]:
    """Nothing committed; the first forward is the prefill, with G_0 after the prompt to propose the first drafts."""
    b, g = len(prompts), spec.block_size - 1
    pending, lengths = right_pad(prompts, spec.pad_id, dev)
    pending_valid = torch.arange(pending.shape[1], device=dev) < lengths[:, None]
    state = DecodeState(prompts=prompts, answer=Committed.empty(b, spec, depth + 1, dev), length=lengths,
                        draft_yield=torch.tensor(YIELD_PRIOR, device=dev), lookup_hits=torch.zeros(b, device=dev),
                        lookup_tries=torch.zeros(b, device=dev))
    tree = Tree(pending, pending_valid, drafts=pending[:, :0], fed=pending_valid[:, :0], q=None,
                from_lookup=torch.zeros(b, dtype=torch.bool, device=dev),
                groups=(0,) if g > 0 and threshold < 1.0 else (), threshold=threshold,
                group_fed=torch.ones((b, depth + 1), dtype=torch.bool, device=dev))
    return state, tree


def record_of(tree: Tree, fed: tuple[torch.Tensor, ...], verdict: Verdict, proposed: Chain, choice: Choice, *,
              state: DecodeState, threshold: float, seconds: torch.Tensor | None, floors: tuple[float, ...]
              ) -> Forward:
    """The record a caller asked for (DecodeOptions.record): what was fed, found and chosen, with the numbers."""
    chain, done = choice.chain, state.answer.done
    kept = leading(proposed.conf >= threshold)
    ids, positions, seen, real = fed
    return Forward(tree=tree, ids=ids, positions=positions, seen=seen, fed=real, cached=positions[:, 0],
                   m=verdict.m, tokens=verdict.tokens, confidence=verdict.conf, proposed=proposed, chain=chain,
                   group_fed=choice.group_fed, odds=group_odds(chain.conf, chain.count), seconds=seconds,
                   by_sibling=verdict.by_sibling, sibling_fed=choice.sibling_fed,
                   sibling_odds=sibling_odds(chain.conf, chain.second_p, chain.count, done), mask_kept=kept,
                   mask_run=expected_run(proposed.conf, kept), chain_run=expected_run(chain.conf, chain.count),
                   floors=None if seconds is None else floors)


@dataclass(kw_only=True)
class VerifiedDecode:
    """One verified decode: what is fixed for it, the two states its loop carries, and the last forward's choices
    the next forward is built from."""

    model: torch.nn.Module
    spec: DecodeSpec
    config: VerifiedConfig
    cache: Any  # the decode's cache (runtime/slots.py), read and kept through runtime/forward.py
    depth: int  # D: the longest draft chain a forward may check
    floors: tuple[float, ...]  # the group floors the plan tries (a static runtime: none or every group)
    seconds: torch.Tensor | None  # seconds of a forward by tokens fed (None: the fixed rules)
    priced_for: int  # the samples seconds are priced for (the live ones as samples finish, where fed_rows_only)
    pace: Pace | None  # the price of width as this decode's forwards find it (None: the curve as timed)
    record: Callable[[Forward], None] | None
    state: DecodeState
    tree: Tree
    verdict: Verdict | None = None  # the last forward's
    choice: Choice | None = None  # the last forward's choice for the next one
    threshold: float = 1.0  # the threshold that choice was made at
    layout: list[list[int]] = field(default_factory=list)  # its host copy: draft counts, groups, siblings, ..

    @property
    def g(self) -> int:
        return self.spec.block_size - 1

    def logits_of(self, rows: torch.Tensor) -> torch.Tensor:
        """The head over hidden rows, under the runtime's kernels."""
        return head(self.model, rows, self.spec.runtime)


def tree_tensors(tree: Tree) -> tuple[torch.Tensor, ...]:
    """What of the tree the head, verification and the next mask drafts read, as tensors (a CUDA graph's inputs)."""
    siblings = (tree.sibling_ids, tree.sibling_fed) if tree.siblings else ()
    return tree.pending_valid, tree.drafts, tree.fed, tree.group_fed, *siblings


def with_tensors(tree: Tree, tensors: tuple[torch.Tensor, ...]) -> Tree:
    """The tree with tree_tensors' tensors replaced by these (a CUDA graph's input buffers)."""
    pending_valid, drafts, fed, group_fed, *siblings = tensors
    tree = replace(tree, pending_valid=pending_valid, drafts=drafts, fed=fed, group_fed=group_fed)
    return replace(tree, sibling_ids=siblings[0], sibling_fed=siblings[1]) if siblings else tree


def judged(r: VerifiedDecode, tree: Tree, ctl: DecodeControl, fed: tuple[torch.Tensor, ...], capture: bool
           ) -> tuple[Verdict, Chain]:
    """The forward over the tree, then the head over the rows it reads, verification and the next mask drafts (for
    samples live before this forward's commit: live_only after it): greedy, one fed_then step, which on a GPU's
    static runtime is one CUDA graph a width and layout, head included; sampling (its draws read the generator on
    the host) the same calls after the forward, eagerly."""
    spec, g = r.spec, r.g

    def then(hidden: torch.Tensor, *tensors: torch.Tensor) -> tuple[Verdict, Chain]:
        *parts, done = tensors
        seen = with_tensors(tree, tuple(parts))
        logits, all_logits = read_logits(r.logits_of, hidden, seen, g)
        verdict = verify(logits, seen, ctl, spec.generator)
        return verdict, mask_chain(r.logits_of, hidden, all_logits, seen, verdict, done=done, ctl=ctl,
                                   pad_id=spec.pad_id, g=g, depth=r.depth, generator=spec.generator)

    inputs = (*tree_tensors(tree), r.state.answer.done)
    if ctl.temperature > 0:
        return then(fed_then(r.model, r.cache, *fed, runtime=spec.runtime, capture=capture), *inputs)
    layout = (tree.pending.shape[1], tree.drafts.shape[1], tree.groups, tree.siblings, g, r.depth, spec.pad_id,
              ctl.confidence)
    verdict, chain = fed_then(r.model, r.cache, *fed, *inputs, runtime=spec.runtime, capture=capture, then=then,
                              then_key=("verified", *layout))
    return (copied(verdict), copied(chain)) if spec.runtime.static else (verdict, chain)


def copied(value: Any) -> Any:
    """A dataclass of tensors with each tensor copied: a CUDA graph's outputs are overwritten by its next replay."""
    return replace(value, **{f.name: getattr(value, f.name).clone() for f in fields(value)
                             if isinstance(getattr(value, f.name), torch.Tensor)})


def step(r: VerifiedDecode, ctl: DecodeControl) -> Step:
    """One forward: feed the tree, verify, commit, choose the next chain (and record it where asked)."""
    spec, state, tree, g = r.spec, r.state, r.tree, r.g
    fed = tree_inputs(tree, state.length, g, spec.mask_id if g > 0 else spec.pad_id)
    began = perf_counter()
    verdict, proposed = judged(r, tree, ctl, fed, capture=r.verdict is not None)
    end = commit_verdict(state, verdict, spec)
    track_yield(state, tree, verdict.m)
    track_lookup(state, tree, verdict.m)
    proposed = live_only(proposed, state.answer.done)
    choice = next_chain(proposed, state, ctl.threshold, config=r.config, g=g, pad_id=spec.pad_id,
                        seconds=r.seconds, floors=r.floors)
    if r.record is not None:  # a caller that asked sees what was fed and decided (no cost otherwise)
        r.record(record_of(tree, fed, verdict, proposed, choice, state=state, threshold=ctl.threshold,
                           seconds=r.seconds, floors=r.floors))
    m, by_sibling = verdict.m, verdict.by_sibling
    done, *r.layout = to_host(  # the one host sync
        state.answer.done, choice.chain.count, choice.group_fed.any(0),
        choice.sibling_fed.any(0), by_sibling.any())
    if r.pace is not None and r.verdict is not None:  # every step but the prefill prices the width it fed
        r.pace.observe(fed[0].shape[1], perf_counter() - began)
        r.seconds = r.pace.seconds(fed[0].device)
    priced_live(r, done.count(0))
    r.verdict, r.choice, r.threshold = verdict, choice, ctl.threshold
    return Step(verdict.tokens, verdict.conf, torch.zeros_like(m), end, [bool(d) for d in done], tree.threshold,
                state.answer.out, state.answer.generated, drafts=checked_path(tree, verdict),
                drafted=tree.fed.sum(1), matched=torch.minimum(m, end), looked_up=tree.from_lookup)


def advance(r: VerifiedDecode, stop: torch.Tensor | None = None) -> None:
    """Keep what was matched in the cache and build the tree the last forward chose; samples a stop string ended
    (`stop`, already in answer.done) are priced as finished from the next plan on."""
    if stop is not None:
        priced_live(r, int((~r.state.answer.done).sum()))
    counts, hung, beside, took = r.layout
    settle(r.cache, r.state, r.tree, r.verdict)
    r.tree = next_tree(r.verdict, r.choice, r.state.answer.done, r.threshold,
                       groups=tuple(j for j, any_fed in enumerate(hung) if any_fed),
                       siblings=tuple(a + 1 for a, any_fed in enumerate(beside) if any_fed),
                       drafts=max(counts), any_sibling=bool(took[0]))


def one_token_decode(model: torch.nn.Module, prompts: list[list[int]], spec: DecodeSpec, control: DecodeControl
                     ) -> Generator[Step, torch.Tensor | None, None]:
    """Strategy "ar"'s decode (sliding at B = 1: no mask slots, no verify, one-token decoding's cost): verified's where
    no width pays on the curve, its answer one-token decoding's by construction."""
    return sliding_decode(model, prompts, replace(spec, block_size=1), control)


def settings(spec: DecodeSpec, layout: VerifiedConfig | None) -> tuple[VerifiedConfig, int, CostCurve | None]:
    """The layout a decode uses (a static runtime's fixed widths: every group up to the drafts checked, no
    siblings), its depth D and the curve its trees are sized by (None: the fixed rules)."""
    config, g = layout or VerifiedConfig(), spec.block_size - 1
    if spec.runtime.static:
        config = replace(config, group_floor=0.0, sibling_floor=None)
    return config, draft_depth(g, config), curve_of(config, spec)


def draft_depth(g: int, config: VerifiedConfig | None = None) -> int:
    """D, the most drafts a forward checks with g masks a block: the mask chain's g or prompt lookup's, whichever is
    longer (check_request reserves the context for them and the g masks hung after them; config None: the default
    layout)."""
    return max(g, (config or VerifiedConfig()).lookup_drafts) if g > 0 else 0


def curve_of(config: VerifiedConfig, spec: DecodeSpec) -> CostCurve | None:
    """The curve a decode of this layout sizes its trees by (None: the fixed rules)."""
    return (config.cost or spec.runtime.cost) if config.use_cost else None


def widest(depth: int, g: int) -> int:
    """The widest tree a forward may feed per sample: two pending, D drafts, every group and sibling."""
    return 2 + depth + (depth + 1) * g + depth * (1 + g)


def priced(r: VerifiedDecode, batch: int) -> None:
    """Price r's widths for `batch` samples: its curve's seconds by width (curve_of), and the pace that learns them
    as the forwards run (a CPU step's time is known when its host copy returns; on a GPU the step decides)."""
    r.priced_for = batch
    r.seconds = seconds_by_width(curve_of(r.config, r.spec), batch, r.depth, r.g, r.model.device)
    live = r.seconds is not None and (r.spec.runtime.live_cost or r.model.device.type == "cuda")
    r.pace = Pace.from_curve(r.seconds) if live else None


def priced_live(r: VerifiedDecode, live: int) -> None:
    """Where samples finished since r was priced, price its widths for the `live` ones: on the rows kernel a finished
    sample's rows cost no product (Runtime.fed_rows_only; elsewhere they still cost, and the batch's price stands)."""
    if r.spec.runtime.fed_rows_only and r.seconds is not None and 0 < live < r.priced_for:
        repriced(r, live)


def repriced(r: VerifiedDecode, live: int) -> None:
    """Price r's widths for its `live` samples on the curve it was priced by, what its pace learned kept."""
    seconds = seconds_by_width(curve_of(r.config, r.spec), live, r.depth, r.g, r.model.device)
    r.priced_for = live
    if r.pace is None:
        r.seconds = seconds
    else:
        r.pace = r.pace.rebased(seconds)
        r.seconds = r.pace.seconds(r.model.device)


def start(model: torch.nn.Module, prompts: list[list[int]], spec: DecodeSpec, threshold: float, cache: Any, *,
          layout: VerifiedConfig | None = None, record: Callable[[Forward], None] | None = None) -> VerifiedDecode:
    """A verified decode of the prompts over `cache` (sized for them: widest()), before its first forward."""
    config, depth, _ = settings(spec, layout)
    state, tree = prefill(prompts, spec, threshold, depth, model.device)
    r = VerifiedDecode(model=model, spec=spec, config=config, cache=cache, depth=depth, record=record, state=state,
                       tree=tree, seconds=None, priced_for=len(prompts), pace=None,
                       floors=(FLOORS[0], 0.0) if spec.runtime.static else FLOORS)
    priced(r, len(prompts))
    return r


@torch.inference_mode()
def verified_decode(
    model: torch.nn.Module, prompts: list[list[int]], spec: DecodeSpec, control: DecodeControl, *,
    layout: VerifiedConfig | None = None, record: Callable[[Forward], None] | None = None,
) -> Generator[Step, torch.Tensor | None, None]:
    """Yield one Step per forward. send() a bool [b] tensor to stop samples (stop strings). layout: how trees are
    shaped (None: VerifiedConfig()); record: called with each forward's Forward. Where no width pays on the curve
    (plan.one_token_only), it is one-token decoding itself, unless a caller asked for the trees' records."""
    _, depth, curve = settings(spec, layout)
    if record is None and one_token_only(curve, len(prompts), spec.block_size):
        yield from one_token_decode(model, prompts, spec, control)
        return
    with decode_cache(model, prompts, spec, widest(depth, spec.block_size - 1)) as cache:
        r = start(model, prompts, spec, control.snapshot().threshold, cache, layout=layout, record=record)
        yield from decode_loop(control, r.state.answer, lambda ctl: step(r, ctl), lambda stop: advance(r, stop))
