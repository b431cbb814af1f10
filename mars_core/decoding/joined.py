"""Decodes whose samples join and leave between forwards (continuous batching): requests of one model and strategy
share each forward, and each one's answer is the answer it gets alone.

Why it is exact: every decoder keeps its state per sample along dim 0 (the cache's rows, the answer, what the next
forward feeds), and where the runtime is invariant (its width check) a sample's numbers in a forward do not depend on
its batchmates or on the width. So two decodes merge by stacking their states, padding what the next forward feeds
with unfed columns; a finished or stopped sample leaves by dropping its rows. Newcomers run their first forward (the
prefill, as wide as their prompts) as a decode of their own, then join.

    rows = Joined.start(model, prompts, spec, "verified", threshold)   # not yet run
    step = rows.step(thresholds)          # one forward for every sample in it
    rows.finish(stop)                     # done samples marked; ready for the next forward
    rows = rows.take([0, 2]).merge(newcomers)

Greedy decoding only (sampling draws from one generator a decode: its draws would depend on the batch).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..runtime.slots import SlotCache, decode_slots
from ..runtime.watch import refresh
from .commit import Committed
from .control import DecodeControl
from .feed import right_pad
from .sliding import Window
from .sliding import step as sliding_step
from .spec import DecodeSpec, Step
from .verified import decode as verified
from .verified.tree import Tree, pad_to
from .verified.verify import DecodeState

KINDS = ("ar", "sliding", "verified")  # the strategies whose samples can join a running decode


def cache_length(prompt: int, spec: DecodeSpec, kind: str) -> int:
    """The cache a decode of `kind` gives a prompt of this many tokens (its answer and widest forward past it): on a
    static runtime a row reads all of it, so only samples of one length share a forward there."""
    if kind == "verified":
        widest = verified.widest(verified.settings(spec, None)[1], spec.block_size - 1)
    else:
        widest = 2 * (1 if kind == "ar" else spec.block_size)
    return decode_slots(prompt + spec.max_new_tokens, widest, spec.runtime.static)


def own_cache(model: torch.nn.Module, prompts: list[list[int]], spec: DecodeSpec, kind: str) -> SlotCache:
    """A cache of the decode's own (not borrowed: it is stacked and cut as samples come and go), its copies of the
    weights checked first (runtime/watch.py)."""
    refresh(model, spec.runtime)
    return SlotCache(model, len(prompts), cache_length(max(map(len, prompts)), spec, kind))


def stacked_caches(model: torch.nn.Module, caches: list[SlotCache]) -> SlotCache:
    """One cache holding the caches' samples in order (each sample's slots as they were; the longer length kept)."""
    out = SlotCache(model, sum(len(c.at) for c in caches), max(c.slots for c in caches))
    i = 0
    for c in caches:
        n = len(c.at)
        for mine, theirs in zip(out.kv.layers, c.kv.layers):
            mine.keys[i : i + n, :, : c.slots] = theirs.keys
            mine.values[i : i + n, :, : c.slots] = theirs.values
        out.at[i : i + n] = c.at
        i += n
    return out


def kept_cache(model: torch.nn.Module, cache: SlotCache, rows: torch.Tensor) -> SlotCache:
    """The cache of the samples `rows` only."""
    out = SlotCache(model, len(rows), cache.slots)
    for mine, theirs in zip(out.kv.layers, cache.kv.layers):
        mine.keys.copy_(theirs.keys[rows])
        mine.values.copy_(theirs.values[rows])
    out.at.copy_(cache.at[rows])
    return out


def stacked(tensors: list[torch.Tensor], value: float | bool | int) -> torch.Tensor:
    """Tensors [b_k, n_k, ...] stacked along dim 0, each padded with `value` along dim 1 to the widest."""
    width = max(t.shape[1] for t in tensors)
    return torch.cat([pad_to(t, width, value) if t.shape[1] < width else t for t in tensors])


def stacked_answers(answers: list[Committed]) -> Committed:
    return Committed(out=torch.cat([a.out for a in answers]), generated=torch.cat([a.generated for a in answers]),
                     done=torch.cat([a.done for a in answers]))


def kept_answer(answer: Committed, rows: torch.Tensor) -> Committed:
    return Committed(out=answer.out[rows], generated=answer.generated[rows], done=answer.done[rows])


# ----------------------------------------------------------------------------- sliding (and AR: B = 1)


def stacked_windows(windows: list[Window], pad_id: int) -> Window:
    """The windows' samples in one window: each sample's pending run from column 0, padded past its count."""
    return Window(pending=stacked([w.pending for w in windows], pad_id), count=torch.cat([w.count for w in windows]),
                  length=torch.cat([w.length for w in windows]), answer=stacked_answers([w.answer for w in windows]),
                  prefill=False)


def kept_window(w: Window, rows: torch.Tensor) -> Window:
    return Window(pending=w.pending[rows], count=w.count[rows], length=w.length[rows],
                  answer=kept_answer(w.answer, rows), prefill=w.prefill)


# ----------------------------------------------------------------------------- verified


def own_columns(fed: torch.Tensor, columns: tuple[int, ...], offset: int = 0) -> torch.Tensor:
    """fed [b, n] kept only at the columns this tree feeds (c - offset for c in columns): a sample does not start
    feeding a group or sibling because another decode's tree hangs one there."""
    keep = torch.zeros(fed.shape[1], dtype=torch.bool, device=fed.device)
    keep[[c - offset for c in columns if 0 <= c - offset < fed.shape[1]]] = True
    return fed & keep


def stacked_trees(trees: list[Tree], pad_id: int) -> Tree:
    """The trees' samples in one tree: the union of their groups and siblings, each sample fed what its own tree fed
    (greedy trees: no draft distributions)."""
    groups = tuple(sorted({j for t in trees for j in t.groups}))
    siblings = tuple(sorted({a for t in trees for a in t.siblings}))
    drafts = stacked([t.drafts for t in trees], pad_id)
    sibling_ids = sibling_fed = None
    if siblings:
        K = drafts.shape[1]
        sibling_ids = stacked([t.sibling_ids if t.sibling_ids is not None else torch.full_like(t.drafts, pad_id)
                               for t in trees], pad_id)
        sibling_fed = stacked([own_columns(t.sibling_fed, t.siblings, 1) if t.sibling_fed is not None
                               else torch.zeros_like(t.fed) for t in trees], False)[:, :K]
    return Tree(pending=stacked([t.pending for t in trees], pad_id),
                pending_valid=stacked([t.pending_valid for t in trees], False), drafts=drafts,
                fed=stacked([t.fed for t in trees], False), q=None,
                from_lookup=torch.cat([t.from_lookup for t in trees]), groups=groups,
                group_fed=torch.cat([own_columns(t.group_fed, t.groups) for t in trees]), threshold=trees[0].threshold,
                siblings=siblings, sibling_ids=sibling_ids, sibling_fed=sibling_fed)


def kept_tree(t: Tree, rows: torch.Tensor) -> Tree:
    def cut(x: torch.Tensor | None) -> torch.Tensor | None:
        return None if x is None else x[rows]

    return replace(t, pending=t.pending[rows], pending_valid=t.pending_valid[rows], drafts=t.drafts[rows],
                   fed=t.fed[rows], q=cut(t.q), from_lookup=t.from_lookup[rows], group_fed=t.group_fed[rows],
                   sibling_ids=cut(t.sibling_ids), sibling_fed=cut(t.sibling_fed))


def stacked_states(states: list[DecodeState]) -> DecodeState:
    """The states' samples in one (the running draft yield, a planning statistic, is the first decode's)."""
    return DecodeState(prompts=[p for s in states for p in s.prompts],
                       answer=stacked_answers([s.answer for s in states]),
                       length=torch.cat([s.length for s in states]), draft_yield=states[0].draft_yield,
                       lookup_hits=torch.cat([s.lookup_hits for s in states]),
                       lookup_tries=torch.cat([s.lookup_tries for s in states]))


def kept_state(s: DecodeState, rows: torch.Tensor) -> DecodeState:
    return DecodeState(prompts=[s.prompts[i] for i in rows.tolist()], answer=kept_answer(s.answer, rows),
                       length=s.length[rows], draft_yield=s.draft_yield, lookup_hits=s.lookup_hits[rows],
                       lookup_tries=s.lookup_tries[rows])


# ----------------------------------------------------------------------------- one decode, samples coming and going


@dataclass
class Joined:
    """One batched decode of `kind` whose samples can join (merge) and leave (take), between forwards."""

    kind: str  # "ar", "sliding" or "verified"
    model: torch.nn.Module
    spec: DecodeSpec
    cache: SlotCache
    state: Window | verified.VerifiedDecode  # sliding's window, or verified's decode (which holds the cache too)

    @classmethod
    @torch.inference_mode()
    def start(cls, model: torch.nn.Module, prompts: list[list[int]], spec: DecodeSpec, kind: str,
              threshold: float = 1.0) -> Joined:
        """A decode of the prompts before its first forward (verified: its drafts checked at `threshold`; "ar":
        block size 1)."""
        if kind not in KINDS:
            raise ValueError(f"joined decoding runs {KINDS}, not {kind!r}")
        if kind == "verified":
            cache = own_cache(model, prompts, spec, kind)
            return cls(kind, model, spec, cache, verified.start(model, prompts, spec, threshold, cache))
        spec = replace(spec, block_size=1) if kind == "ar" else spec
        pending, lengths = right_pad(prompts, spec.pad_id, model.device)
        window = Window(pending, lengths, lengths, Committed.empty(len(prompts), spec, spec.block_size, model.device))
        return cls(kind, model, spec, own_cache(model, prompts, spec, kind), window)

    @property
    def size(self) -> int:
        """Samples in the decode."""
        return len(self.answer.done)

    @property
    def answer(self) -> Committed:
        return self.state.state.answer if self.kind == "verified" else self.state.answer

    @torch.inference_mode()
    def step(self, thresholds: list[float], confidence: str = "prob") -> Step:
        """One forward for every sample (sliding: each at its own threshold; verified: the first one's, which shapes
        the trees only; AR: 1), confidences read as `confidence` says."""
        if self.kind == "verified":
            return verified.step(self.state, DecodeControl(threshold=thresholds[0], confidence=confidence))
        control = DecodeControl(threshold=min(thresholds), confidence=confidence)
        return sliding_step(self.model, self.cache, self.state, self.spec, control,
                            thresholds if self.kind == "sliding" else None)

    @torch.inference_mode()
    def finish(self, stop: torch.Tensor | None = None) -> None:
        """After a step: the samples in `stop` ([b] bool: stopped by their callers) are done too, and the next
        forward is readied (verified: the matched drafts kept in the cache, the next tree built)."""
        answer = self.answer
        if stop is not None:
            answer.done = answer.done | stop.to(answer.done.device)
        if self.kind == "verified" and not bool(answer.done.all()):
            verified.advance(self.state, stop)

    @torch.inference_mode()
    def take(self, rows: list[int]) -> Joined:
        """The decode of the samples `rows` only, in that order (the others leave; a sample named twice is
        copied: two samples from there on). Called between forwards (after finish()): verified's last verdict and
        choice, not cut, are read no more; the next step makes its own."""
        idx = torch.tensor(rows, dtype=torch.long, device=self.cache.at.device)
        cache = kept_cache(self.model, self.cache, idx)
        if self.kind == "verified":
            r = self.state
            kept = replace(r, cache=cache, state=kept_state(r.state, idx), tree=kept_tree(r.tree, idx))
            verified.repriced(kept, len(rows))  # what its pace learned kept
            return replace(self, cache=cache, state=kept)
        return replace(self, cache=cache, state=kept_window(self.state, idx))

    @torch.inference_mode()
    def merge(self, other: Joined) -> Joined:
        """One decode of this one's samples, then the other's (same model, kind and spec)."""
        cache = stacked_caches(self.model, [self.cache, other.cache])
        pad = self.spec.pad_id
        if self.kind == "verified":
            a, b = self.state, other.state
            r = replace(a, cache=cache, state=stacked_states([a.state, b.state]),
                        tree=stacked_trees([a.tree, b.tree], pad), verdict=a.verdict or b.verdict)
            verified.repriced(r, self.size + other.size)  # this decode's pace kept: it ran the forwards
            return replace(self, cache=cache, state=r)
        return replace(self, cache=cache, state=stacked_windows([self.state, other.state], pad))

