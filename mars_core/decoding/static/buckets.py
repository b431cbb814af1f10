"""The fixed trees a static-shape decoder feeds, one per width, and the plan that picks one for each forward.

A bucket is a whole tree fed at one width W, whatever each sample uses of it (the rest is marked unfed):
    [ pending p_0 .. p_{P-1} | drafts d_1 .. d_k | G_0 | G_1 | .. | G_k ]      G_j: g masks after d_1..d_j
Verified decoding feeds P = 1 (the bonus token), k drafts and every group G_0..G_k, so the next drafts exist whatever
m verification finds: W = 1 + k + (k + 1) g, k = 0..D; at threshold 1 (or g = 0) the plain bucket, W = 1. Threshold
decoding feeds P = B (the tokens it accepted, left-aligned) and G_0: W = B + g. On a GPU each width is one captured
graph; on a CPU a bucket is a handful of shapes the kernels have already seen.

The plan prices a whole step by its width: with c_1..c_D the chain's confidences and t(W) the seconds of a forward of
width W (the runtime's cost curve at this batch size), it feeds k* = argmax_k  sum_i [1 + sum_{a <= min(k, n_i)}
c_i1 .. c_ia] / t(W_k), n_i sample i's confident drafts; computed on the device, read with the step's one host copy.
t starts as the cost curve's forward, and where the decode prices its own steps (a GPU, or Runtime.live_cost) each
step moves its bucket's t toward the step's whole time, forward and bookkeeping: width is nearly free on a GPU, and
there the step around the forward decides (a bucket's first step, which captures its graph, is not counted).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

import torch

from ..verified.tree import tree_template


@dataclass(frozen=True)
class Bucket:
    """One fixed tree: `pending` slots, `drafts` drafts, then G_0..G_drafts of g masks each (none where g = 0)."""

    pending: int
    drafts: int
    g: int

    @property
    def groups(self) -> tuple[int, ...]:
        return tuple(range(self.drafts + 1)) if self.g else ()

    @property
    def width(self) -> int:
        return self.pending + self.drafts + len(self.groups) * self.g

    @cached_property
    def template(self) -> torch.Tensor:
        """[W, W] which fed slots each slot sees (verified/tree.py's tree_template)."""
        return tree_template(self.pending, self.drafts, self.groups, self.g)

    @cached_property
    def offsets(self) -> torch.Tensor:
        """[W - P] positions of the drafts and masks after the last pending token's (d_a: a, mask t of G_j: j+1+t)."""
        masks = [j + 1 + t for j in self.groups for t in range(self.g)]
        return torch.tensor(list(range(1, self.drafts + 1)) + masks, dtype=torch.long)

    def group_start(self, j: torch.Tensor) -> torch.Tensor:
        """The first slot of G_j (j [b])."""
        return self.pending + self.drafts + j * self.g


@lru_cache(maxsize=256)
def on_device(bucket: Bucket, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The bucket's template and offsets on `device`, copied there once (not once a forward)."""
    return bucket.template.to(device), bucket.offsets.to(device)


WEIGHT = 0.25  # weight of the newest step in a bucket's running price


def price_step(seconds: torch.Tensor, k: int, elapsed: float) -> None:
    """Move bucket k's price (seconds [D+1], in place) toward a step of it that took `elapsed` seconds."""
    seconds[k] += WEIGHT * (elapsed - seconds[k])


def verify_buckets(depth: int, g: int) -> list[Bucket]:
    """The verified decoder's buckets, k = 0..D drafts, each with every group (one plain bucket without masks)."""
    if g == 0:
        return [Bucket(1, 0, 0)]
    return [Bucket(1, k, g) for k in range(depth + 1)]


def expected_tokens(conf: torch.Tensor, count: torch.Tensor, live: torch.Tensor) -> torch.Tensor:
    """[D+1] tokens the live samples are expected to commit with k = 0..D drafts checked: sum_i 1 + c_i1 + c_i1 c_i2
    + .. over their first min(k, count_i) drafts."""
    depth = conf.shape[1]
    kept = torch.arange(depth, device=conf.device) < count[:, None]
    runs = torch.cumprod(torch.where(kept, conf, 0.0), 1)  # [b, D] P(the first a drafts all match)
    per_k = torch.cat([torch.zeros_like(runs[:, :1]), runs.cumsum(1)], 1) + 1.0  # [b, D+1]
    return (per_k * live[:, None]).sum(0)


def choose(conf: torch.Tensor, count: torch.Tensor, live: torch.Tensor, seconds: torch.Tensor | None) -> torch.Tensor:
    """[] the drafts the next forward feeds: the k with the most expected tokens per second (seconds [D+1]: a forward
    of bucket k), ties to the smaller k; without seconds, the longest confident chain."""
    if seconds is None:
        return torch.where(live, count, 0).max()
    rate = expected_tokens(conf, count, live) / seconds
    return (rate >= rate.max()).long().argmax()  # the first k that reaches the best rate
