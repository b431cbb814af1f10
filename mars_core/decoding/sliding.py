"""MARS sliding-window decoding with a KV cache: one forward per step, no extra pass.

Each forward feeds the committed tokens not yet in the cache, then B-1 mask tokens:
    slots  [ pending c[L-k..L) | m_0 .. m_{B-2} ]      positions  L-k .. L-1 | L .. L+B-2
prediction 0 = argmax of the last pending token's logits (the exact AR next token, always accepted),
prediction j = from mask j-1's logits, accepted left to right while its confidence >= threshold.
The masks' keys/values are then cropped from the cache (crop(-(B-1))); accepted tokens are fed as
real tokens in the next forward. With B = 1 this is plain autoregressive decoding with a KV cache, and
a forward whose threshold is >= 1 feeds no masks at all (none could be accepted): one-token mode costs
exactly what AR costs.

Batches: samples accept different counts, so the pending run is right-aligned and padded on the left;
the padding ("holes") stays in the cache marked invalid, and positions are explicit per sample.
"""

from __future__ import annotations

from collections.abc import Generator

import torch

from ..runtime.forward import cache_mask, forward, new_cache
from .cache import left_pad
from .control import DecodeControl
from .sampling import accept_prefix, cap_at_stop, select
from .spec import DecodeSpec, Step, write_out


def right_align(tokens: torch.Tensor, count: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Row i's first count[i] tokens, right-aligned in `width` slots, and which slots are real."""
    j = torch.arange(width, device=tokens.device)[None, :] - (width - count)[:, None]
    valid = j >= 0
    return tokens.gather(1, j.clamp_min(0)), valid


@torch.inference_mode()
def sliding_decode(
    model: torch.nn.Module, prompts: list[list[int]], spec: DecodeSpec, control: DecodeControl
) -> Generator[Step, torch.Tensor | None, None]:
    """Yield one Step per forward. send() a bool [b] tensor to stop samples (stop strings)."""
    dev, B, b = model.device, spec.block_size, len(prompts)
    pending, pending_valid = left_pad(prompts, spec.pad_id, dev)  # prefill is the first step's pending run
    length = pending_valid.sum(1)  # committed tokens per sample, pending ones included
    valid = torch.zeros((b, 0), dtype=torch.bool, device=dev)  # which cache slots hold real tokens
    all_masks = torch.full((b, B - 1), spec.mask_id if B > 1 else spec.pad_id, dtype=torch.long, device=dev)
    out = torch.full((b, spec.max_new_tokens + B), spec.pad_id, dtype=torch.long, device=dev)
    generated = torch.zeros(b, dtype=torch.long, device=dev)
    done = torch.zeros(b, dtype=torch.bool, device=dev)
    first = torch.zeros(b, dtype=torch.long, device=dev)
    cache = new_cache(model)
    while True:
        ctl = control.snapshot()
        if ctl.stopped:
            return
        P, M = pending.shape[1], (B - 1 if ctl.threshold < 1.0 else 0)  # M mask slots this forward
        ids = torch.cat([pending, all_masks[:, :M]], 1)
        offsets = torch.arange(-P, M, device=dev)  # pending slot s -> L-P+s, mask m -> L+m
        positions = (length[:, None] + offsets).clamp_min(0)
        mask_ok = torch.ones((b, M), dtype=torch.bool, device=dev)
        mask = cache_mask(torch.cat([valid, pending_valid, mask_ok], 1), P + M)
        logits = forward(model, ids, positions, mask, cache, M + 1, spec.runtime)  # slots P-1 .. P+M-1
        if M:
            cache.crop(-M)  # drop the masks' keys/values
        valid = torch.cat([valid, pending_valid], 1)

        tokens, conf = select(logits, ctl, spec.generator)
        end = accept_prefix(conf, first, ctl.threshold)
        end = torch.minimum(end, spec.max_new_tokens - generated)
        end, hit = cap_at_stop(tokens, first, end, spec.stop_ids)
        end = torch.where(done, 0, end)
        done = done | hit | (generated + end >= spec.max_new_tokens)
        write_out(out, generated, tokens, first, end)  # also advances generated
        length = length + end
        host = torch.stack([end, done.long()]).tolist()  # the one host sync per forward
        stop = yield Step(tokens, conf, first, end, [bool(d) for d in host[1]], ctl.threshold, out, generated)
        if stop is not None:
            done = done | stop.to(dev)
        if bool(done.all()):
            return
        pending, pending_valid = right_align(tokens, end, max(max(host[0]), 1))
        pending_valid &= ~done[:, None]
