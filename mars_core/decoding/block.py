"""MARS decoding with a block-level KV cache, the paper's strategy for batches.

Generation is cut into blocks of B slots, aligned across the batch. The cache holds the prompt, every
finished block, and the leading slots of the current block that every live sample has filled (`cached`).
Each inner forward runs the rest of the block (filled slots as real tokens, the others as masks):
    prediction for slot s = logits of slot s-1 (slot 0: the last token before the block)
The first unfilled slot is always accepted (its left neighbour is real: the exact AR prediction),
later ones left to right while confident. A sample that filled its block waits for the slowest.
A finished block's uncached tail enters the cache in the first forward of the next block, which feeds
[previous block's tail | new block]: no extra pass. After a forward, the fed slots that now hold a real
token for every live sample stay in the cache (causal attention: their keys/values see only real tokens),
the rest are scratch, overwritten by the next forward (a token's slot is its position). Positions stay aligned
across the batch.
A forward whose threshold is >= 1 can only accept slot `filled`, so it feeds the filled slots not yet
cached (one per forward) and no masks, and reads one logit per sample: one-token mode costs what AR costs.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

import torch

from ..runtime.forward import causal_seen, feed, keep
from .commit import Committed, commit, decode_loop
from .control import DecodeControl
from .feed import decode_cache, logits_at, right_pad
from .sampling import accept_prefix, select
from .spec import DecodeSpec, Step


@dataclass
class Blocks:
    """The block being filled, what enters the cache next, and the answer so far, per sample."""

    uncached: torch.Tensor  # [b, U] tokens that enter the cache with the next forward (prompt, or last block's tail)
    uncached_valid: torch.Tensor  # [b, U] real (not the prompt's right padding)
    uncached_pos: torch.Tensor  # [b, U] their positions
    base: torch.Tensor  # [b] position of the current block's slot 0
    block: torch.Tensor  # [b, B] filled slots (a prefix), masks after them
    filled: torch.Tensor  # [b] filled slots
    answer: Committed  # the answer so far
    filled_max: int = 0  # host copy of filled.max()
    cached: int = 0  # leading block slots already in the cache
    width: int = 0  # block slots cached .. width-1 were fed by the last forward
    shared: int = 0  # host copy: the fed slots every live sample has filled (they stay in the cache)
    complete: bool = False  # host copy: every sample has filled the block or is done


def first_block(prompts: list[list[int]], spec: DecodeSpec, dev: torch.device) -> Blocks:
    """An empty first block after the prompt, which enters the cache with block 0's first forward."""
    b = len(prompts)
    uncached, lengths = right_pad(prompts, spec.pad_id, dev)
    slots = torch.arange(uncached.shape[1], device=dev)
    return Blocks(uncached, slots < lengths[:, None], slots.expand(b, -1), base=lengths,
                  block=empty_block(spec, b, dev), filled=torch.zeros(b, dtype=torch.long, device=dev),
                  answer=Committed.empty(b, spec, spec.block_size, dev))


def empty_block(spec: DecodeSpec, b: int, dev: torch.device) -> torch.Tensor:
    mask_id = spec.mask_id if spec.block_size > 1 else spec.pad_id
    return torch.full((b, spec.block_size), mask_id, dtype=torch.long, device=dev)


def forward(model: torch.nn.Module, cache, s: Blocks, spec: DecodeSpec, width: int) -> tuple[torch.Tensor, int]:
    """Feed [uncached | block slots cached .. width-1], causally; the logits that predict slots first .. width, and
    first (slot s is predicted by slot s-1's logits; slot `cached` by the last real uncached token's)."""
    (b, U), dev = s.uncached.shape, s.block.device
    slots = torch.arange(s.cached, width, device=dev)
    ids = torch.cat([s.uncached, s.block[:, s.cached : width]], 1)
    positions = torch.cat([s.uncached_pos, s.base[:, None] + slots], 1)
    fed = torch.cat([s.uncached_valid, torch.ones((b, width - s.cached), dtype=torch.bool, device=dev)], 1)
    hidden = feed(model, cache, ids, positions, causal_seen(fed), fed, runtime=spec.runtime, capture=False)
    first = s.cached + (U == 0)  # the block slot the first logit predicts (U > 0 means cached == 0)
    rows = U + torch.arange(first - s.cached - 1, width - s.cached, device=dev).expand(b, -1)
    if U:  # slot `cached` is predicted by each sample's last real uncached token
        rows = torch.cat([s.uncached_valid.sum(1, keepdim=True) - 1, rows[:, 1:]], 1)
    return logits_at(model, hidden, rows, spec), first


def predict(logits: torch.Tensor, s: Blocks, ctl, first: int, one_token: bool,
            generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Every block slot's token [b, B] and confidence: filled slots keep theirs (confidence 1); in one-token
    mode only slot `filled` is predicted (the rest are left as they are, confidence 0)."""
    b, B = s.block.shape
    if one_token:
        j = (s.filled - first).clamp(0, logits.shape[1] - 1)
        picked = logits.gather(1, j[:, None, None].expand(-1, 1, logits.shape[-1]))
        tok, tok_conf = select(picked, ctl, generator)
        at = s.filled.clamp_max(B - 1)[:, None]
        return s.block.scatter(1, at, tok), torch.zeros(b, B, device=logits.device).scatter(1, at, tok_conf)
    tokens, conf = select(logits[:, : B - first], ctl, generator)  # the last logit lies past the block
    return (torch.cat([s.block[:, :first], tokens], 1),
            torch.cat([torch.ones(b, first, device=logits.device), conf], 1))


def fill(s: Blocks, tokens: torch.Tensor, conf: torch.Tensor, threshold: float, spec: DecodeSpec
         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Accept slots filled .. end-1 (the first always, then while confident; none for a sample that waits at
    the block's end), cut at max_new_tokens and after a stop token; returns (start, end)."""
    B = spec.block_size
    slots = torch.arange(B, device=tokens.device)
    waiting = s.answer.done | (s.filled >= B)
    end = commit(s.answer, tokens, s.filled, accept_prefix(conf, s.filled, threshold).clamp_max(B), spec,
                 hold=waiting)
    s.block = torch.where((slots >= s.filled[:, None]) & (slots < end[:, None]), tokens, s.block)
    begin, s.filled = s.filled, end
    return begin, end


def settle(cache, s: Blocks, spec: DecodeSpec) -> None:
    """Keep the uncached tokens and the fed slots every live sample has filled (the rest, masks among them, is
    scratch); when the block is complete, start the next one, whose first forward feeds this one's uncached tail."""
    b, B, dev = s.block.shape[0], spec.block_size, s.block.device
    keep(cache, s.uncached_valid.sum(1) + s.shared - s.cached)
    s.cached = s.shared
    tail = torch.arange(s.cached if s.complete else B, B, device=dev)  # nothing is left uncached mid-block
    s.uncached, s.uncached_pos = s.block[:, tail], s.base[:, None] + tail
    s.uncached_valid = torch.ones((b, len(tail)), dtype=torch.bool, device=dev)
    if s.complete:
        s.base, s.block = s.base + B, empty_block(spec, b, dev)
        s.filled, s.filled_max, s.cached = torch.zeros_like(s.filled), 0, 0


def step(model: torch.nn.Module, cache, s: Blocks, spec: DecodeSpec, ctl: DecodeControl) -> Step:
    """One forward over the block's unfilled rest (threshold 1: the filled slots not yet cached), then the commit."""
    B = spec.block_size
    s.width = B if ctl.threshold < 1.0 else s.filled_max  # block slots cached .. width-1 are fed this forward
    logits, first = forward(model, cache, s, spec, s.width)
    tokens, conf = predict(logits, s, ctl, first, s.width < B, spec.generator)
    shared = torch.where(s.answer.done, B, s.filled).min().clamp_max(s.width)  # fed slots real for every live one
    begin, end = fill(s, tokens, conf, ctl.threshold, spec)
    block_done = (s.filled >= B) | s.answer.done
    host = torch.stack([end, s.answer.done.long(), block_done.long(), shared.expand(len(end))]).tolist()  # one sync
    s.filled_max, s.complete, s.shared = max(host[0]), all(host[2]), host[3][0]
    return Step(tokens, conf, begin, end, [bool(d) for d in host[1]], ctl.threshold, s.answer.out,
                s.answer.generated)


def advance(cache, s: Blocks, spec: DecodeSpec, stop: torch.Tensor | None) -> None:
    """After the caller's stop request (which may complete the block), settle the cache for the next forward."""
    if stop is not None:
        s.complete = bool((s.answer.done | (s.filled >= spec.block_size)).all())
    settle(cache, s, spec)


@torch.inference_mode()
def block_decode(
    model: torch.nn.Module, prompts: list[list[int]], spec: DecodeSpec, control: DecodeControl
) -> Generator[Step, torch.Tensor | None, None]:
    """Yield one Step per forward. send() a bool [b] tensor to stop samples (stop strings)."""
    s = first_block(prompts, spec, model.device)
    with decode_cache(model, prompts, spec, 2 * spec.block_size) as cache:
        yield from decode_loop(control, s.answer, lambda ctl: step(model, cache, s, spec, ctl),
                               lambda stop: advance(cache, s, spec, stop))
