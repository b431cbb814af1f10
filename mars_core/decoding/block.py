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
the rest are cropped (crop(-n)), never copied. Positions stay aligned across the batch.
A forward whose threshold is >= 1 can only accept slot `filled`, so it feeds the filled slots not yet
cached (one per forward) and no masks, and reads one logit per sample: one-token mode costs what AR costs.
"""

from __future__ import annotations

from collections.abc import Generator

import torch

from .cache import cache_mask, forward, left_pad, new_cache
from .control import DecodeControl
from .sampling import accept_prefix, cap_at_stop, select
from .spec import DecodeSpec, Step, write_out


@torch.inference_mode()
def block_decode(
    model: torch.nn.Module, prompts: list[list[int]], spec: DecodeSpec, control: DecodeControl
) -> Generator[Step, torch.Tensor | None, None]:
    """Yield one Step per forward. send() a bool [b] tensor to stop samples (stop strings)."""
    dev, B, b = model.device, spec.block_size, len(prompts)
    uncached, uncached_valid = left_pad(prompts, spec.pad_id, dev)  # enters the cache with block 0's first forward
    uncached_pos = (uncached_valid.long().cumsum(1) - 1).clamp_min(0)
    base = uncached_valid.sum(1)  # position of the current block's slot 0, per sample
    slots = torch.arange(B, device=dev)
    mask_id = spec.mask_id if B > 1 else spec.pad_id
    block = torch.full((b, B), mask_id, dtype=torch.long, device=dev)
    filled = torch.zeros(b, dtype=torch.long, device=dev)  # filled slots form a prefix of the block
    valid = torch.zeros((b, 0), dtype=torch.bool, device=dev)
    block_ok = torch.ones((b, B), dtype=torch.bool, device=dev)
    out = torch.full((b, spec.max_new_tokens + B), spec.pad_id, dtype=torch.long, device=dev)
    generated = torch.zeros(b, dtype=torch.long, device=dev)
    done = torch.zeros(b, dtype=torch.bool, device=dev)
    cache = new_cache(model)
    filled_max, cached = 0, 0  # host copies: filled.max(), and the block slots already in the cache
    while True:
        ctl = control.snapshot()
        if ctl.stopped:
            return
        U = uncached.shape[1]
        W = B if ctl.threshold < 1.0 else filled_max  # block slots cached .. W-1 are fed this forward
        ids = torch.cat([uncached, block[:, cached:W]], 1)
        positions = torch.cat([uncached_pos, base[:, None] + slots[cached:W]], 1)
        mask = cache_mask(torch.cat([valid, uncached_valid, block_ok[:, cached:W]], 1), U + W - cached)
        first = cached + (U == 0)  # the block slot the first kept logit predicts (U > 0 means cached == 0)
        logits = forward(model, ids, positions, mask, cache, keep=W - first + 1)  # predict slots first .. W
        if W < B:  # one-token mode: the prediction for slot `filled` only
            j = (filled - first).clamp(0, logits.shape[1] - 1)
            picked = logits.gather(1, j[:, None, None].expand(-1, 1, logits.shape[-1]))
            tok, tok_conf = select(picked, ctl, spec.generator)
            at = filled.clamp_max(B - 1)[:, None]
            tokens = block.scatter(1, at, tok)
            conf = torch.zeros(b, B, device=dev).scatter(1, at, tok_conf)
        else:  # slots before `first` are filled already (confidence 1); the last logit lies past the block
            tokens, conf = select(logits[:, : B - first], ctl, spec.generator)
            tokens = torch.cat([block[:, :first], tokens], 1)
            conf = torch.cat([torch.ones(b, first, device=dev), conf], 1)
        shared = torch.where(done, B, filled).min().clamp_max(W)  # fed slots real for every live sample

        waiting = done | (filled >= B)
        end = accept_prefix(conf, filled, ctl.threshold).clamp_max(B)
        end = torch.minimum(end, filled + spec.max_new_tokens - generated)
        end, hit = cap_at_stop(tokens, filled, end, spec.stop_ids)
        end = torch.where(waiting, filled, end)
        done = done | hit | (generated + end - filled >= spec.max_new_tokens)
        block = torch.where((slots >= filled[:, None]) & (slots < end[:, None]), tokens, block)
        start = filled
        write_out(out, generated, tokens, start, end)
        filled = end
        block_done = (filled >= B) | done
        host = torch.stack([end, done.long(), block_done.long(), shared.expand(b)]).tolist()  # one host sync
        stop = yield Step(tokens, conf, start, end, [bool(d) for d in host[1]], ctl.threshold, out, generated)
        if stop is not None:
            done = done | stop.to(dev)
        if bool(done.all()):
            return
        keep = host[3][0]
        if W > keep:
            cache.crop(-(W - keep))  # drop the slots some sample has not filled yet (masks among them)
        valid = torch.cat([valid, uncached_valid, block_ok[:, cached:keep]], 1)  # what the cache now holds
        cached, filled_max = keep, max(host[0])
        complete = all(host[2]) if stop is None else bool((done | (filled >= B)).all())
        if complete:
            # next block: this one's uncached tail enters the cache with the next forward
            tail = slots[cached:]
            uncached, uncached_valid, uncached_pos = block[:, tail], block_ok[:, tail], base[:, None] + tail
            base = base + B
            block = torch.full((b, B), mask_id, dtype=torch.long, device=dev)
            filled = torch.zeros(b, dtype=torch.long, device=dev)
            filled_max, cached = 0, 0
        else:
            uncached = uncached[:, :0]
            uncached_valid = uncached_valid[:, :0]
            uncached_pos = uncached_pos[:, :0]
