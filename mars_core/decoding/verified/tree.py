"""The tree: what one verified forward feeds after the cache, its positions, what sees what, and the logits it reads.

    slots    [ pending | d_1 .. d_K | G_j for j in groups | e_a H_a for a in siblings ]
    pending  the committed tokens not yet cached, positions n-P .. n-1, causal
    d_a      position n+a-1: sees the cache, the pending tokens and d_1 .. d_{a-1}
    G_j      g mask tokens at positions n+j .. n+j+g-1 after c + d_1..d_j, causal inside the group
    e_a H_a  d_a's sibling at position n+a-1 after c + d_1..d_{a-1}, then its g masks at n+a .., causal
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ...runtime.forward import visible
from ..feed import tree_template


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


def tree_inputs(tree: Tree, length: torch.Tensor, g: int, mask_id: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """What the forward over the tree feeds: ids [b, W], positions [b, W], which fed columns each sees [b, W, W]
    (itself included; every column also sees the sample's cache) and which columns are real [b, W], with n = length
    the tokens committed. Positions: the r real pending tokens (from column 0) n-r .. n-1, d_a n+a-1, mask t of G_j
    n+j+t, e_a n+a-1 and mask t of H_a n+a+t."""
    (b, P), K, dev = tree.pending.shape, tree.drafts.shape[1], tree.pending.device
    cols = torch.tensor(tree.groups, dtype=torch.long, device=dev)
    offsets = (cols[:, None] + torch.arange(g, device=dev)).reshape(-1)
    parts = [tree.pending, tree.drafts, torch.full((b, len(cols) * g), mask_id, device=dev)]
    places = [torch.arange(K, device=dev), offsets]
    fed = [tree.pending_valid, tree.fed, tree.group_fed[:, cols].repeat_interleave(g, 1)]
    if tree.siblings:
        at = torch.tensor(tree.siblings, dtype=torch.long, device=dev) - 1  # e_a's column among the drafts
        masks = torch.full((b, len(at), g), mask_id, device=dev)
        parts.append(torch.cat([tree.sibling_ids[:, at, None], masks], 2).reshape(b, -1))
        places.append((at[:, None] + torch.arange(1 + g, device=dev)).reshape(-1))
        fed.append(tree.sibling_fed[:, at].repeat_interleave(1 + g, 1))
    ids, fed = torch.cat(parts, 1), torch.cat(fed, 1)
    pending = (length - tree.pending_valid.sum(1))[:, None] + torch.arange(P, device=dev)
    positions = torch.cat([pending, length[:, None] + torch.cat(places)], 1)
    template = tree_template(P, K, tree.groups, g, tree.siblings, device=dev)
    return ids, positions, visible(template, fed), fed


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
    """(logits of the verify slots [b, K+1+S, V]: the last real pending token's, the drafts', then each sibling's; of
    that row and every slot after the pending ones [b, W-P+1, V], or None): the groups' masks in the same pass when
    the rows no sample goes on with are few (SPARE_HEAD_ROWS), else mask_chain reads the group it needs."""
    P, K = tree.pending.shape[1], tree.drafts.shape[1]
    spare = (len(tree.groups) - 1 + len(tree.siblings)) * g  # rows past the verify slots and one group
    if P == 1:  # the pending token and what follows: a view
        tail = hidden[:, P - 1 :]
    else:  # each sample's last real pending token (the prompt's at prefill), then what follows
        last = (tree.pending_valid.sum(1) - 1).clamp_min(0)
        tail = torch.cat([hidden.gather(1, last[:, None, None].expand(-1, 1, hidden.shape[-1])), hidden[:, P:]], 1)
    if tree.siblings:
        verify = torch.cat([torch.arange(K + 1, device=hidden.device), sibling_columns(tree, g) - (P - 1)])
    else:  # the verify slots are one run: slices, no copies
        verify = slice(0, K + 1)
    if (tree.groups or tree.siblings) and hidden.shape[0] * spare <= SPARE_HEAD_ROWS:
        logits = head(tail)
        return logits[:, verify], logits
    return head(tail[:, verify]), None
