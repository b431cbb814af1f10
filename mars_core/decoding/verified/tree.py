"""The tree: what one verified forward feeds after the cache, its positions, its mask, and the logits it reads.

    slots    [ pending | d_1 .. d_K | G_j for j in groups | e_a H_a for a in siblings ]
    pending  the committed tokens not yet cached, positions n-P .. n-1, causal
    d_a      position n+a-1: sees the cache, the pending tokens and d_1 .. d_{a-1}
    G_j      g mask tokens at positions n+j .. n+j+g-1 after c + d_1..d_j, causal inside the group
    e_a H_a  d_a's sibling at position n+a-1 after c + d_1..d_{a-1}, then its g masks at n+a .., causal
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import torch

from ...runtime.forward import cache_mask


@dataclass
class Tree:
    """What the coming forward feeds after the cache: [ pending | d_1 .. d_K | G_j for j in groups | e_a H_a ]."""

    pending: torch.Tensor  # [b, P] committed tokens not yet cached (the bonus token; the prompt at prefill)
    pending_valid: torch.Tensor  # [b, P] real (not left padding, not a finished sample)
    drafts: torch.Tensor  # [b, K] d_1 .. d_K for positions n .. n+K-1
    fed: torch.Tensor  # [b, K] which drafts are real, per sample
    q: torch.Tensor | None  # [b, K, V] the drafts' own distributions (None: point masses, as greedy drafts are)
    from_lookup: torch.Tensor  # [b] the drafts came from prompt lookup (else from the mask slots)
    groups: tuple[int, ...]  # the j of each G_j hung in this forward, the union over samples
    group_fed: torch.Tensor  # [b, D+1] G_j is real for sample i
    threshold: float  # the threshold that chose these drafts
    siblings: tuple[int, ...] = ()  # the a of each sibling e_a (with its group H_a) fed, the union over samples
    sibling_ids: torch.Tensor | None = None  # [b, K] e_a: the second choice of d_a's mask slot
    sibling_fed: torch.Tensor | None = None  # [b, K] e_a (and H_a) is real for sample i

    def width(self, g: int) -> int:
        """Tokens fed per sample: P + K + |groups| g + |siblings| (1 + g)."""
        P, K = self.pending.shape[1], self.drafts.shape[1]
        return P + K + len(self.groups) * g + len(self.siblings) * (1 + g)


def leading(ok: torch.Tensor) -> torch.Tensor:
    """Length of the leading run of True per row."""
    return ok.long().cumprod(-1).sum(-1)


def pad_to(x: torch.Tensor, width: int, value: float) -> torch.Tensor:
    """x [b, k, ...] padded with `value` along dim 1 to `width`."""
    pad = torch.full((x.shape[0], width - x.shape[1], *x.shape[2:]), value, dtype=x.dtype, device=x.device)
    return torch.cat([x, pad], 1)


@lru_cache(maxsize=64)
def tree_template(pending: int, drafts: int, groups: tuple[int, ...], g: int, siblings: tuple[int, ...] = ()
                  ) -> torch.Tensor:
    """Boolean [W, W] visibility among the fed slots: pending causal, drafts a chain after them, group G_j after
    the pending tokens and d_1..d_j, causal inside itself; sibling e_a beside d_a (after the pending tokens and
    d_1..d_{a-1}), its group H_a after e_a."""
    width = pending + drafts + len(groups) * g + len(siblings) * (1 + g)
    seen = torch.zeros(width, width, dtype=torch.bool)
    seen[:pending, :pending] = torch.ones(pending, pending, dtype=torch.bool).tril()
    d = slice(pending, pending + drafts)
    seen[d, :pending] = True
    seen[d, d] = torch.ones(drafts, drafts, dtype=torch.bool).tril()
    for c, j in enumerate(groups):
        s = slice(pending + drafts + c * g, pending + drafts + (c + 1) * g)
        seen[s, : pending + j] = True
        seen[s, s] = torch.ones(g, g, dtype=torch.bool).tril()
    for c, a in enumerate(siblings):
        e = pending + drafts + len(groups) * g + c * (1 + g)
        s = slice(e, e + 1 + g)  # e_a, then H_a's masks: a causal run after c + d_1..d_{a-1}
        seen[s, : pending + a - 1] = True
        seen[s, s] = torch.ones(1 + g, 1 + g, dtype=torch.bool).tril()
    return seen


def tree_mask(valid: torch.Tensor, fed_valid: torch.Tensor, template: torch.Tensor) -> torch.Tensor:
    """[b, W, T+W]: every fed slot sees the valid cache slots, and the fed slots its template allows and that are
    real. Each slot always sees itself, so no row is empty (an all-masked row gives NaN in SDPA)."""
    b, width = fed_valid.shape
    template = template.to(valid.device)
    fed = (template[None] & fed_valid[:, None, :]) | torch.eye(width, dtype=torch.bool, device=valid.device)
    return torch.cat([valid[:, None, :].expand(b, width, -1), fed], -1)


def tree_inputs(tree: Tree, length: torch.Tensor, valid: torch.Tensor, g: int, mask_id: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What the forward over the tree feeds: ids [b, W], positions [b, W] and the boolean mask [b, W, T+W] (True =
    attend; the cache's T valid slots, then the W fed), with n = length the tokens committed. Positions: pending
    n-P .. n-1, d_a n+a-1, mask t of G_j n+j+t, e_a n+a-1 and mask t of H_a n+a+t."""
    (b, P), K, dev = tree.pending.shape, tree.drafts.shape[1], tree.pending.device
    if not (K or tree.groups or tree.siblings):  # the pending tokens alone: a causal run after the cache
        return tree.pending, length[:, None] + torch.arange(-P, 0, device=dev), cache_mask(
            torch.cat([valid, tree.pending_valid], 1), P)
    cols = torch.tensor(tree.groups, dtype=torch.long, device=dev)
    offsets = (cols[:, None] + torch.arange(g, device=dev)).reshape(-1)
    parts = [tree.pending, tree.drafts, torch.full((b, len(cols) * g), mask_id, device=dev)]
    places = [torch.arange(-P, K, device=dev), offsets]
    fed = [tree.pending_valid, tree.fed, tree.group_fed[:, cols].repeat_interleave(g, 1)]
    if tree.siblings:
        at = torch.tensor(tree.siblings, dtype=torch.long, device=dev) - 1  # e_a's column among the drafts
        masks = torch.full((b, len(at), g), mask_id, device=dev)
        parts.append(torch.cat([tree.sibling_ids[:, at, None], masks], 2).reshape(b, -1))
        places.append((at[:, None] + torch.arange(1 + g, device=dev)).reshape(-1))
        fed.append(tree.sibling_fed[:, at].repeat_interleave(1 + g, 1))
    ids = torch.cat(parts, 1)
    positions = length[:, None] + torch.cat(places)
    template = tree_template(P, K, tree.groups, g, tree.siblings)
    return ids, positions, tree_mask(valid, torch.cat(fed, 1), template)


# The head's cost is mostly one read of its weights, whatever the rows (docs/speed.md, "The head, read once per
# forward"), so the verify slots and every fed group's masks are read in one pass unless the rows no sample goes on
# with (the other groups') outnumber this; above it, a second pass reads G_m's rows alone.
SPARE_HEAD_ROWS = 16


def sibling_columns(tree: Tree, g: int) -> torch.Tensor:
    """[S] the column of each fed sibling e_a in the tree (its group H_a's g masks follow it)."""
    start = tree.pending.shape[1] + tree.drafts.shape[1] + len(tree.groups) * g
    return start + torch.arange(len(tree.siblings), device=tree.pending.device) * (1 + g)


def read_logits(head: Callable[[torch.Tensor], torch.Tensor], hidden: torch.Tensor, tree: Tree, g: int
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logits of the verify slots [b, K+1+S, V]: the last pending token's, the drafts', then each sibling's; of
    every slot from the last pending token on [b, W-P+1, V], or None): the groups' masks in the same pass when the
    rows no sample goes on with are few (SPARE_HEAD_ROWS), else mask_chain reads the group it needs."""
    P, K = tree.pending.shape[1], tree.drafts.shape[1]
    spare = (len(tree.groups) - 1 + len(tree.siblings)) * g  # rows past the verify slots and one group
    if tree.siblings:
        verify = torch.cat([torch.arange(P - 1, P + K, device=hidden.device), sibling_columns(tree, g)])
        in_pass = verify - (P - 1)
    else:  # the verify slots are one run: slices, no copies
        verify, in_pass = slice(P - 1, P + K), slice(0, K + 1)
    if (tree.groups or tree.siblings) and hidden.shape[0] * spare <= SPARE_HEAD_ROWS:
        logits = head(hidden[:, P - 1 :])
        return logits[:, in_pass], logits
    return head(hidden[:, verify]), None
