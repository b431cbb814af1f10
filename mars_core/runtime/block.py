"""The rows kernel's packed weights in one block of memory, in the order a forward reads them, on 2 MB pages where
Linux gives them (transparent huge pages on request, `madvise`): a forward then streams its weights as one run
through a few dozen page-table entries instead of tens of thousands of 4 KB pages, each a TLB miss
(docs/speed.md#the-rows-kernel). After a repack (a weight changed: watch.py) every copy moves into a new block.

    block = Block(sum(span(c) for c in copies))
    views = [block.hold(c) for c in copies]   # equal to the copies bit for bit, views of one block, in this order
"""

from __future__ import annotations

import ctypes
import sys

import torch

ALIGN = 64  # each copy starts on a cache line, as torch's allocator starts a tensor
HUGE = 2 << 20  # a huge page: the block starts on one, so all its whole 2 MB runs can be backed by them
MADV_HUGEPAGE = 14  # Linux's madvise advice: back this range with huge pages where it can (THP "madvise" mode)


def _madvise() -> ctypes._CFuncPtr | None:
    """libc's madvise on Linux (None elsewhere, or where it cannot be found)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        call = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    call.argtypes, call.restype = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int), ctypes.c_int
    return call


_MADVISE = _madvise()


def huge_block(nbytes: int) -> torch.Tensor:
    """nbytes of uint8 from torch's allocator, untouched yet, that Linux backs with 2 MB pages as it is written where
    it can: a block of several huge pages starts on a 2 MB boundary (2 MB more allocated) and is advised so
    (MADV_HUGEPAGE; a fresh mapping or, once glibc's threshold rose, part of its heap, where the advice outlives the
    block). Plain memory elsewhere, or where the advice is refused. torch owns the memory: freed as any tensor's."""
    if _MADVISE is None or nbytes < 2 * HUGE:
        return torch.empty(nbytes, dtype=torch.uint8)
    whole = torch.empty(nbytes + HUGE, dtype=torch.uint8)
    start = -whole.data_ptr() % HUGE
    _MADVISE(whole.data_ptr() + start, nbytes // HUGE * HUGE, MADV_HUGEPAGE)  # refused: 4 KB pages, same bits
    return whole[start: start + nbytes]


def span(t: torch.Tensor) -> int:
    """The bytes t takes in a block: its own, rounded up to ALIGN."""
    return -(-t.nbytes // ALIGN) * ALIGN


class Block:
    """One huge_block, filled in order: hold(copy) puts the next copy in it and returns its view there (the caller
    drops the copy, so a block is filled while the copies it replaces are freed: memory peaks at one set of copies,
    not two)."""

    def __init__(self, nbytes: int) -> None:
        self.memory = huge_block(nbytes)
        self.used = 0

    def hold(self, copy: torch.Tensor) -> torch.Tensor:
        """A contiguous copy as the next view of the block, equal to it bit for bit."""
        view = self.memory[self.used: self.used + copy.nbytes].view(copy.dtype).view(copy.shape)
        view.copy_(copy)
        self.used += span(copy)
        return view
