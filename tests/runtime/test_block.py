"""One block of packed weights: copies moved there keep their bits and lie in the order given, on cache lines, in
memory Linux may back with 2 MB pages; pack_linears puts the rows kernel's copies there in a forward's order."""

from __future__ import annotations

import ctypes
import mmap
import sys
from pathlib import Path

import pytest
import torch

from mars_core.runtime import prepare, refresh
from mars_core.runtime.block import ALIGN, Block, huge_block, span
from mars_core.runtime.linear import ROWS, linear_groups, pack_linears
from mars_core.runtime.rows import rows_kernel

from tiny import tiny_qwen2

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def test_copies_keep_their_bits_in_order_on_cache_lines_of_one_block():
    g = torch.Generator().manual_seed(0)
    copies = [torch.randint(-128, 128, (3, 5, 7), dtype=torch.int8, generator=g),
              torch.randn(11, 13, generator=g).to(torch.bfloat16), torch.randn(1, generator=g),
              torch.randint(-128, 128, (2, 33), dtype=torch.int8, generator=g)]
    block = Block(sum(span(c) for c in copies))
    views = [block.hold(c) for c in copies]
    base = views[0].untyped_storage().data_ptr()
    assert all(v.untyped_storage().data_ptr() == base for v in views)  # one block
    for view, copy in zip(views, copies):
        assert view.dtype == copy.dtype and view.shape == copy.shape and view.is_contiguous()
        assert torch.equal(view.view(torch.uint8), copy.view(torch.uint8))
        assert view.data_ptr() % ALIGN == 0
    starts = [v.data_ptr() for v in views]
    assert starts == sorted(starts) and all(b - a >= c.nbytes for a, b, c in zip(starts, starts[1:], copies))
    assert block.used == sum(span(c) for c in copies) and huge_block(0).numel() == 0


def _mapping_flags(address: int) -> dict[str, str]:
    """The /proc/self/smaps fields of the mapping that holds address."""
    fields, inside = {}, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:  # a mapping's first line: start-end perms ...
            start, end = (int(x, 16) for x in head.split("-"))
            inside = start <= address < end
        elif inside and ":" in head:
            fields[head.rstrip(":")] = line.split(":", 1)[1].strip()
    return fields


@pytest.mark.skipif(not sys.platform.startswith("linux") or not THP.exists() or "[madvise]" not in THP.read_text(),
                    reason="Linux with transparent huge pages on request (madvise)")
def test_the_block_is_asked_for_huge_pages():
    block = huge_block(8 << 20)
    block.fill_(1)
    assert _mapping_flags(block.data_ptr() + (4 << 20)).get("THPeligible") == "1"
    # a fresh mapping nobody advised is not: the check tells them apart (not torch's memory: glibc serves a large
    # allocation from its heap once large blocks were freed, where a freed block's advice stays)
    plain = mmap.mmap(-1, 8 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # private, as the heap's
    address = ctypes.addressof(ctypes.c_char.from_buffer(plain))
    assert _mapping_flags(address).get("THPeligible") != "1"


@pytest.mark.skipif(not rows_kernel(), reason="no rows kernel on this CPU")
def test_the_rows_kernels_copies_lie_in_one_block_in_a_forwards_order():
    model = tiny_qwen2(64).to(torch.bfloat16)
    linears = pack_linears(model)
    order = [id(layers[0].weight) for layers in linear_groups(model)]  # a forward's: the model's modules'
    copies = _copies(model, linears)
    assert all(linears[k].kernel == ROWS for k in order) and len(copies) == 2 * 4 + 1
    base = copies[0].untyped_storage().data_ptr()
    assert all(c.untyped_storage().data_ptr() == base for c in copies)
    starts = [c.data_ptr() for c in copies]
    assert starts == sorted(starts)
    for k, copy in zip(order, copies):  # each as the kernel packs its weight(s) on its own
        e = linears[k]
        w = torch.cat([lin.weight for lin in e.fused.layers]) if e.fused is not None else e.weight
        assert torch.equal(copy, torch.ops.mars_rows.pack(w.detach()))


@pytest.mark.skipif(not rows_kernel(), reason="no rows kernel on this CPU")
def test_copies_packed_anew_join_the_rest_in_a_new_block():
    """A weight changed in place is packed anew before the next decode (watch.refresh): then every copy lies in one
    new block again, in a forward's order, the changed one its new weight's."""
    model = tiny_qwen2(64).to(torch.bfloat16)
    runtime = prepare(model, measure_cost=False, check=False)
    old = _copies(model, runtime.linears)[0].untyped_storage().data_ptr()
    down = model.model.layers[1].mlp.down_proj.weight
    down.data.neg_()
    refresh(model, runtime)
    copies = _copies(model, runtime.linears)
    base = copies[0].untyped_storage().data_ptr()
    assert base != old and all(c.untyped_storage().data_ptr() == base for c in copies)
    assert [c.data_ptr() for c in copies] == sorted(c.data_ptr() for c in copies)
    assert torch.equal(runtime.linears[id(down)].packed, torch.ops.mars_rows.pack(down.detach()))


def _copies(model, linears) -> list[torch.Tensor]:
    """The rows kernel's copies in a forward's order."""
    order = [id(layers[0].weight) for layers in linear_groups(model)]
    return [linears[k].fused.packed if linears[k].fused is not None else linears[k].packed for k in order]
