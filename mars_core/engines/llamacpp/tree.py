"""A decoder's boolean tree mask as llama.cpp sequence ids: what one batch's tokens may see, said the engine's way.

llama.cpp lets a fed token see the cache cells that hold its first sequence id at positions <= its own. The decoders
say what a slot sees with a mask [W, T+W]: the cache, then an ancestor chain among the fed slots (a tree). So:
    leaf        a fed slot no other fed slot sees
    seqs(k)     the leaves that see k (k's own id where k is a leaf): every root-to-leaf path is one sequence
    seq 0       the path through the committed chain (the leading run of slots each seeing all before it: the pending
                tokens, then the drafts), so what keep() keeps is already on seq 0
A slot q then sees the cells on the path of seqs(q)[0] at positions <= pos(q): its ancestors and itself, exactly,
when positions grow by one along every path (descendants on that path sit at later positions). llama.cpp also wants
each sequence's positions in a batch to continue its cells, in batch order: a root slot at the cache's next position,
a child one past its parent and after it in the batch. plan() checks these and that the mask it implies is the mask
given (a ValueError otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SeqPlan:
    """Sequence ids of one batch's fed slots: seqs[k] (seqs[k][0] is the one k attends by), the ids used (0..count-1)
    and the committed chain's length (slots 0..chain-1 are on seq 0, each seeing all before it)."""

    seqs: tuple[tuple[int, ...], ...]
    count: int
    chain: int


Rows = list[list[bool]]  # seen[q][k]: fed slot q sees fed slot k (itself included)


def leading_chain(seen: Rows) -> int:
    """Length of the leading run of slots that each see every slot before them."""
    for k in range(1, len(seen)):
        if not all(seen[k][:k]):
            return k
    return len(seen)


def leaves_of(seen: Rows) -> list[int]:
    """Fed slots that no other fed slot sees, in slot order."""
    width = len(seen)
    return [k for k in range(width) if not any(seen[q][k] for q in range(width) if q != k)]


def leaf_ids(seen: Rows, chain: int) -> dict[int, int]:
    """Sequence id of each leaf: 0 for the first leaf that sees the chain's last slot, 1.. for the others in order."""
    leaves = leaves_of(seen)
    first = next(leaf for leaf in leaves if seen[leaf][chain - 1])
    rest = [leaf for leaf in leaves if leaf != first]
    return {first: 0, **{leaf: i + 1 for i, leaf in enumerate(rest)}}


def check_positions(seen: Rows, positions: list[int], next_pos: int) -> None:
    """Each slot's position is one past its parent's (the ancestor it sees at the latest position), or the cache's
    next position for a root: llama.cpp's rule that a sequence's positions continue without gaps."""
    for q, row in enumerate(seen):
        parents = [positions[k] for k, sees in enumerate(row) if sees and k != q]
        expected = max(parents) + 1 if parents else next_pos
        if positions[q] != expected:
            raise ValueError(f"llama.cpp engine: slot {q} is at position {positions[q]}, but a path through it needs "
                             f"{expected} (positions must grow by one along every path of the tree, from the cache)")


def implied_mask(seqs: tuple[tuple[int, ...], ...], positions: list[int]) -> Rows:
    """What llama.cpp lets slot q see among the fed slots: the slots holding seqs[q][0] at positions <= pos(q)."""
    width = len(seqs)
    return [[seqs[q][0] in seqs[k] and positions[k] <= positions[q] for k in range(width)] for q in range(width)]


def plan(mask: torch.Tensor, positions: list[int], next_pos: int) -> SeqPlan:
    """Sequence ids for the fed slots of `mask` [W, W] (True = attend) at `positions`, after a cache whose next
    position is next_pos; a ValueError where llama.cpp cannot express the mask."""
    seen = [[bool(v) or q == k for k, v in enumerate(row)] for q, row in enumerate(mask.detach().cpu().tolist())]
    if not seen:
        return SeqPlan((), 1, 0)
    if any(seen[q][k] for q in range(len(seen)) for k in range(q + 1, len(seen))):
        raise ValueError("llama.cpp engine: a fed slot sees a later one (a path's slots must come in batch order)")
    check_positions(seen, positions, next_pos)
    chain = leading_chain(seen)
    ids = leaf_ids(seen, chain)
    seqs = tuple(tuple(sorted(s for leaf, s in ids.items() if seen[leaf][k])) for k in range(len(seen)))
    if not all(seqs) or implied_mask(seqs, positions) != seen:
        raise ValueError("llama.cpp engine: the mask is not a tree (each fed slot must see an ancestor chain among "
                         "the fed slots), so sequence ids cannot express it")
    return SeqPlan(seqs, len(ids), chain)
