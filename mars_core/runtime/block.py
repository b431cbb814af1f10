"""The rows kernel's packed weights in one block of memory, in the order a forward reads them, on 2 MB pages where
Linux gives them (transparent huge pages on request, `madvise`): a forward then streams its weights as one run
through a few dozen page-table entries instead of tens of thousands of 4 KB pages, each a TLB miss
(docs/speed.md#one-block-of-weights).

    views = in_one_block(copies)   # equal to the copies bit for bit, views of one block, in this order
"""

from __future__ import annotations

import mmap
import sys

import torch

ALIGN = 64  # each copy starts on a cache line, as torch's allocator starts a tensor (the kernels' loads assume it)


def huge_block(nbytes: int) -> torch.Tensor:
    """nbytes of uint8 memory, untouched yet, that Linux backs with 2 MB pages as it is written where it can (a private
    anonymous mapping, MADV_HUGEPAGE); torch's memory elsewhere, or where the mapping is refused."""
    if sys.platform.startswith("linux") and hasattr(mmap, "MADV_HUGEPAGE") and nbytes > 0:
        try:
            pages = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            pages.madvise(mmap.MADV_HUGEPAGE)
            return torch.frombuffer(pages, dtype=torch.uint8)  # the tensor keeps the mapping alive
        except (OSError, ValueError):  # no THP in this kernel, or a sandbox refusing the call: plain memory
            pass
    return torch.empty(nbytes, dtype=torch.uint8)


def _span(t: torch.Tensor) -> int:
    """The bytes t takes in the block: its own, rounded up to ALIGN."""
    return -(-t.nbytes // ALIGN) * ALIGN


def in_one_block(copies: list[torch.Tensor]) -> list[torch.Tensor]:
    """The contiguous copies as views of one huge_block, in this order, each equal to its copy bit for bit (the
    copies themselves are left as they are: drop them to free their memory)."""
    if not copies:
        return []
    block = huge_block(sum(_span(c) for c in copies))
    views, at = [], 0
    for c in copies:
        view = block[at: at + c.nbytes].view(c.dtype).view(c.shape)
        view.copy_(c)
        views.append(view)
        at += _span(c)
    return views
