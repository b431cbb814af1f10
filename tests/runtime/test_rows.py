"""The rows kernel (runtime/rows.py, kernels/rows.cpp; AMX, AVX512-BF16 or AVX2, the first this CPU has): F.linear's
numbers, each row's bits its own whatever rows travel with it, and a clear reason wherever it does not serve."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import weakref
from pathlib import Path
from xml.etree import ElementTree

import pytest
import torch
import torch.nn.functional as F

from mars_core.runtime import rows


@pytest.fixture
def fresh_state(monkeypatch):
    """rows' verdict taken anew (it is kept per process), no flavor asked for (a run of this file for another flavor
    asks for one)."""
    monkeypatch.setattr(rows, "_STATE", {})
    monkeypatch.delenv("MARS_ROWS_FLAVOR", raising=False)


def test_a_cpu_without_amx_avx512_bf16_or_avx2_with_fma_is_told_so(fresh_state, monkeypatch):
    monkeypatch.setattr(rows, "cpu_flags", lambda: {"avx2", "avx512f"})
    assert rows.why_not() == "no AMX, AVX512-BF16 or AVX2 with FMA on this CPU" and not rows.rows_kernel()


@pytest.mark.parametrize("flags,flavor", [({"amx_bf16", "amx_tile", "avx512f", "avx512_bf16"}, "amx"),
                                          ({"avx512f", "avx512_bf16"}, "avx512_bf16"), ({"avx2", "avx512f"}, None),
                                          ({"avx2", "fma", "avx512f"}, "avx512"), ({"avx2", "fma"}, "avx2")])
def test_the_flavor_is_the_first_this_cpu_has_amx_avx512_bf16_avx512_avx2(fresh_state, monkeypatch, flags, flavor):
    monkeypatch.setattr(rows, "cpu_flags", lambda: flags)
    assert rows.flavor() == flavor


def test_it_can_be_turned_off(fresh_state, monkeypatch):
    monkeypatch.setattr(rows, "cpu_flags", lambda: {"amx_bf16", "amx_tile"})
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    monkeypatch.setattr(rows, "cxx_compiler", lambda: "c++")
    monkeypatch.setenv("MARS_ROWS_KERNEL", "0")
    assert rows.why_not() == "turned off (MARS_ROWS_KERNEL=0)"


def test_a_failed_build_says_why(fresh_state, monkeypatch, tmp_path):
    import torch.utils.cpp_extension as ext

    monkeypatch.setattr(rows, "cpu_flags", lambda: {"amx_bf16", "amx_tile"})
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    monkeypatch.setattr(rows, "cxx_compiler", lambda: "c++")
    monkeypatch.setenv("MARS_CACHE", str(tmp_path))

    def fail(**kwargs):
        raise RuntimeError("Error building extension 'mars_rows'\nmore")

    monkeypatch.setattr(ext, "load", fail)
    assert rows.why_not() == "building it failed (RuntimeError: Error building extension 'mars_rows')"


@pytest.fixture
def builds_as(fresh_state, monkeypatch, tmp_path):
    """A build that 'loads' at once and says it runs the flavor given: set(flavor), for the CPU rows.cpu_flags says."""
    import torch.utils.cpp_extension as ext

    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    monkeypatch.setattr(rows, "cxx_compiler", lambda: "c++")
    monkeypatch.setenv("MARS_CACHE", str(tmp_path))
    monkeypatch.setattr(ext, "load", lambda **kwargs: None)
    monkeypatch.setattr(rows, "_shapes", lambda: None)
    monkeypatch.setattr(torch.ops.mars_rows, "available", lambda: True, raising=False)

    def set_flavor(built: str) -> None:
        monkeypatch.setattr(torch.ops.mars_rows, "flavor", lambda: built, raising=False)
        monkeypatch.setattr(rows, "_STATE", {})

    return set_flavor


@pytest.mark.timeout(120)
def test_a_process_killed_while_building_leaves_no_lock_that_holds_the_next(builds_as, monkeypatch):
    """torch's builder waits with no end while its `lock` file exists: one left by a killed build (a test's app
    stopped mid-start) once held CI until it gave up. Ours is a flock the OS releases: a holder SIGKILLed frees it, and
    the `lock` torch left is cleared before its builder runs."""
    import signal

    import torch.utils.cpp_extension as ext

    monkeypatch.setattr(rows, "cpu_flags", lambda: {"avx2", "fma"})
    builds_as("avx2")
    folder = rows._folder()
    folder.mkdir(parents=True)
    (folder / "lock").touch()  # a killed build's baton
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from filelock import FileLock; "
                               "FileLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(600)",
                               str(folder / "build.lock")], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    seen = []
    monkeypatch.setattr(ext, "load", lambda **kwargs: seen.append((folder / "lock").exists()))
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert rows.why_not() is None and seen == [False]


def test_an_amx_cpu_serves_an_avx512_bf16_build_and_says_so(builds_as, monkeypatch):
    """A compiler that builds only the AVX512-BF16 path on an AMX CPU: that build serves (the CPU runs it), and
    flavor() (the records' word) says AVX512-BF16 once it is loaded; a build for no path the CPU runs is refused, and
    so is a build other than the flavor MARS_ROWS_FLAVOR asks for."""
    monkeypatch.setattr(rows, "cpu_flags", lambda: {"amx_bf16", "amx_tile", "avx512f", "avx512_bf16"})
    builds_as("avx512_bf16")
    assert rows.flavor() == "amx"  # what it would build, before it is built
    assert rows.why_not() is None and rows.flavor() == "avx512_bf16" and rows.note().startswith("serving, avx512_bf16")
    builds_as("none")
    assert rows.why_not() == "the compiler built it for none, which this CPU cannot run (it has amx, avx512_bf16)"
    assert rows.flavor() == "amx"
    builds_as("avx512_bf16")
    monkeypatch.setenv("MARS_ROWS_FLAVOR", "amx")
    assert rows.why_not() == "the compiler built it for avx512_bf16, not amx as MARS_ROWS_FLAVOR asks"


def test_a_flavor_asked_for_is_built_apart_and_one_the_cpu_lacks_is_refused(fresh_state, monkeypatch):
    """MARS_ROWS_FLAVOR=avx512_bf16 builds the kernel without its AMX path (-DMARS_NO_AMX, which rows.cpp's AMX
    guard respects) in a folder of its own; a flavor this CPU lacks, or no flavor at all, is refused with the reason."""
    monkeypatch.setattr(rows, "cpu_flags", lambda: {"amx_bf16", "amx_tile", "avx512f", "avx512_bf16"})
    plain, folder = rows.build_id(), rows._folder()
    assert rows.compile_flags() == rows.FLAGS and rows.flavor() == "amx"
    monkeypatch.setenv("MARS_ROWS_FLAVOR", "avx512_bf16")
    assert "-DMARS_NO_AMX" in rows.compile_flags() and rows.flavor() == "avx512_bf16"
    assert rows.build_id() != plain and rows._folder() != folder
    assert b"!defined(MARS_NO_AMX)" in rows.SOURCE.read_bytes()
    monkeypatch.setattr(rows, "cpu_flags", lambda: {"amx_bf16", "amx_tile", "avx512f", "avx512_bf16", "avx2", "fma"})
    monkeypatch.setenv("MARS_ROWS_FLAVOR", "avx2")  # the AVX2 path on an AVX-512 CPU: built with no AVX-512 at all
    assert "-mno-avx512f" in rows.compile_flags() and rows.flavor() == "avx2" and rows.build_id() != plain
    monkeypatch.delenv("MARS_ROWS_FLAVOR")
    native = rows.build_id()  # this CPU's own build: another folder than the flavor asked for below
    monkeypatch.setenv("MARS_ROWS_FLAVOR", "avx512")  # AVX-512 without BF16 (an Ice Lake's) on an AVX512-BF16 CPU
    assert "-mno-avx512bf16" in rows.compile_flags() and rows.flavor() == "avx512" and rows.build_id() != native
    monkeypatch.setattr(rows, "cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    monkeypatch.setenv("MARS_ROWS_FLAVOR", "amx")
    assert rows.flavor() is None and rows.why_not() == "MARS_ROWS_FLAVOR=amx, but this CPU has no AMX"
    monkeypatch.setattr(rows, "_STATE", {})
    monkeypatch.setenv("MARS_ROWS_FLAVOR", "sse")
    assert rows.why_not() == "MARS_ROWS_FLAVOR=sse names no flavor (amx, avx512_bf16, avx512, avx2)"


serves = pytest.mark.skipif(not rows.rows_kernel(), reason=f"no rows kernel here: {rows.why_not()}")


@serves
@pytest.mark.parametrize("n,k,bias", [(40, 96, True), (1000, 577, False), (192, 576, True), (33, 31, False)])
def test_it_computes_f_linear(n, k, bias):
    """Shapes that fill no panel (40, 33 columns) or tile (577, 31 inputs) whole, with and without a bias, a 3-D
    input that is not contiguous: F.linear's numbers up to bf16's rounding."""
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(n, k, generator=g) * 0.05).bfloat16()
    b = torch.randn(n, generator=g).bfloat16() if bias else None
    x = torch.randn(3, 7, k, generator=g).bfloat16().transpose(0, 1)
    got = torch.ops.mars_rows.linear(x, torch.ops.mars_rows.pack(w), n, b)
    exact = F.linear(x.float(), w.float(), None if b is None else b.float())
    assert got.shape == (7, 3, n) and got.dtype == torch.bfloat16
    assert (got.float() - exact).abs().max() <= (F.linear(x, w, b).float() - exact).abs().max() * 1.5 + 1e-6


int8_path = pytest.mark.skipif(not rows.rows_kernel() or not torch.ops.mars_rows.int8_path(),
                               reason="the int8 path is every build's (AVX2 with FMA)")


@serves
def test_the_grid_is_integers_up_to_127_times_a_power_of_two_a_block():
    """grid(): each block of 32 inputs of a column holds q s, s the smallest power of two with its largest |w| <= 127
    s (the tail block of 577 inputs: one), an all-zero block zeros; rounding again changes nothing; within bf16's
    reach of the weight (half a step of s)."""
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(40, 577, generator=g) * 0.05).bfloat16()
    w[3, 32:64] = 0
    q = torch.ops.mars_rows.grid(w)
    assert q.dtype == torch.bfloat16 and q.shape == w.shape and torch.equal(torch.ops.mars_rows.grid(q), q)
    for start in range(0, 577, 32):
        block, was = q[:, start : start + 32].float(), w[:, start : start + 32].float()
        most = was.abs().amax(1).clamp_min(1e-30)
        scale = torch.exp2(torch.ceil(torch.log2(most / 127)))
        assert torch.equal(block / scale[:, None], torch.round(block / scale[:, None]))  # integers
        assert (block.abs() / scale[:, None]).max() <= 127
        assert ((block - was).abs() <= scale[:, None] / 2).all()
    assert torch.equal(q[3, 32:64], torch.zeros(32, dtype=torch.bfloat16))


def quantized_product(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """x W^T + b as the int8 path defines it, in fp64: each row of x quantized per block of 32 inputs to integers up
    to 127 times the block's largest |x| / 127 (kernels/rows.cpp quantize_rows)."""
    m, k = x.shape
    blocks = -(-k // 32)
    xs = F.pad(x.float(), (0, blocks * 32 - k)).view(m, blocks, 32)  # fp32 steps, as the kernel's
    most = xs.abs().amax(-1, keepdim=True)
    up = torch.full_like(most, 127).div(most.clamp_min(1e-30))  # a division (127 / t is 127 times t's reciprocal)
    q = torch.where(most > 0, torch.round(xs * up), 0).double() * (most / 127).double()
    y = q.view(m, -1)[:, :k] @ w.double().T
    return y if b is None else y + b.double()


@serves
@int8_path
@pytest.mark.parametrize("n,k", [(40, 96), (1000, 577), (576, 1536)])
def test_a_weight_on_the_grid_packs_as_int8_and_multiplies_rows_quantized_each_alone(n, k):
    """pack() of a weight on the int8 grid is an int8 copy (per 8 columns and 32 inputs, 256 int8 and 8 bytes of
    scales: about half a bf16 copy's bytes) that multiplies each row of x quantized to int8 on its own: the product
    as quantized_product defines it, to bf16's rounding, each row its own at every row count; a weight off the grid,
    or int8=False, packs as bf16."""
    g = torch.Generator().manual_seed(2)
    w = torch.ops.mars_rows.grid((torch.randn(n, k, generator=g) * 0.05).bfloat16())
    narrow, wide = torch.ops.mars_rows.pack(w), torch.ops.mars_rows.pack(w, False)
    assert narrow.dtype == torch.int8 and wide.dtype == torch.bfloat16
    assert narrow.shape == (-(-n // 8), -(-k // 32), 264)
    off = w.clone()
    off[0, 0] += off[0, 0].abs().clamp_min(1e-3) * 2 ** -7  # one weight a bf16 step off the grid
    assert torch.ops.mars_rows.pack(off).dtype == torch.bfloat16
    b = torch.randn(n, generator=g).bfloat16()
    x = torch.randn(16, k, generator=g).bfloat16()  # up to two groups of 8 (AVX512-VNNI: a pair's every row count)
    x[4, : k // 2] = 0  # a row with blocks of zeros
    alone = torch.cat([torch.ops.mars_rows.linear(x[r : r + 1], narrow, n, b) for r in range(16)])
    for m in range(1, 17):
        assert torch.equal(torch.ops.mars_rows.linear(x[:m], narrow, n, b), alone[:m]), m
    want = quantized_product(x, w, b)
    assert ((alone.double() - want).abs() <= want.abs() * 2 ** -8 + 1e-6).all()
    exact = F.linear(x.double(), w.double(), b.double())  # 8-bit rows stay near the bf16 product
    assert (alone.double() - exact).abs().max() <= exact.abs().max() * 0.02


@serves
@int8_path
def test_a_whole_block_of_x_quantizes_as_a_short_last_block_does_bit_for_bit():
    """x's rows are quantized per block of 32 in vectors where a block is whole, one value at a time in a last block
    that K leaves short (kernels/rows.cpp): the same integers and scale either way, so with x's and W's input 63 at 0
    a product over K = 64 equals the product over K = 63 bit for bit. Blocks of every size, ties (x * 127 / m halfway
    between two integers: to even), negatives, -0, a block of zeros, and one so small that 127 / m overflows (its
    values quantize to 0)."""
    g = torch.Generator().manual_seed(11)
    n = 24
    w = (torch.randn(n, 64, generator=g) * 0.05).bfloat16()
    w[:, 63] = 0
    w = torch.ops.mars_rows.grid(w)
    x = (torch.randn(40, 64, generator=g) * torch.logspace(-30, 3, 40)[:, None]).bfloat16()
    x[0, 32:40] = torch.tensor([127.0, 0.5, 1.5, 2.5, -0.5, -1.5, 3.5, -0.0])  # m = 127: x itself rounded
    x[0, 40:] = 0
    x[1, 32:] = 0
    x[2, 32:] = 0
    x[2, 32:36] = 2e-38  # 127 / m is not finite in fp32
    x[:, 63] = 0
    whole, short = torch.ops.mars_rows.pack(w), torch.ops.mars_rows.pack(w[:, :63].contiguous())
    assert whole.dtype == short.dtype == torch.int8
    got = torch.ops.mars_rows.linear(x, whole, n, None)
    want = torch.ops.mars_rows.linear(x[:, :63].contiguous(), short, n, None)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    assert got.isfinite().all()


@serves
@int8_path
def test_a_row_with_a_nan_is_nan_and_its_batchmates_are_untouched():
    """A non-finite value in a row makes that row's outputs NaN (as a float product would not be finite), never its
    batchmates'."""
    g = torch.Generator().manual_seed(3)
    w = torch.ops.mars_rows.grid((torch.randn(64, 96, generator=g) * 0.05).bfloat16())
    packed = torch.ops.mars_rows.pack(w)
    x = torch.randn(3, 96, generator=g).bfloat16()
    clean = torch.ops.mars_rows.linear(x, packed, 64, None)
    x[1, 5] = float("inf")
    y = torch.ops.mars_rows.linear(x, packed, 64, None)
    assert y[1].isnan().all() and torch.equal(y[[0, 2]], clean[[0, 2]])


@serves
@pytest.mark.parametrize("int8", [False, True])
def test_a_row_gets_its_own_bits_beside_any_rows(int8):
    """Row r fed alone, among 1..40 rows (more than two blocks of 16 rows for AMX, five groups of 8 for AVX512-BF16,
    ten of 4 for the int8 path, five of 8 with VNNI) and among other rows in another order: the same bits."""
    g = torch.Generator().manual_seed(1)
    w = (torch.randn(576, 1536, generator=g) * 0.05).bfloat16()
    packed = torch.ops.mars_rows.pack(torch.ops.mars_rows.grid(w) if int8 else w)
    x = torch.randn(40, 1536, generator=g).bfloat16()
    alone = torch.cat([torch.ops.mars_rows.linear(x[r : r + 1], packed, 576, None) for r in range(40)])
    for m in range(2, 41):
        assert torch.equal(torch.ops.mars_rows.linear(x[:m], packed, 576, None), alone[:m]), m
    order = torch.randperm(40, generator=g)
    assert torch.equal(torch.ops.mars_rows.linear(x[order], packed, 576, None), alone[order])


@serves
def test_the_build_serves_the_flavor_asked_for_else_one_this_cpu_runs():
    """The loaded build's flavor is what flavor() reports, one this CPU runs, and MARS_ROWS_FLAVOR's where it is set
    (a run of this file for another flavor: test_every_flavor_this_cpu_runs_passes_the_kernel_tests)."""
    built = torch.ops.mars_rows.flavor()
    assert built == rows.flavor() and built in rows.runnable()
    if rows.asked():
        assert built == rows.asked()


def fused(g: torch.Generator, sizes: tuple[int, ...], k: int, int8: bool = False):
    """Sibling weights [n_i, k] fused into one packed matrix, each registered as its columns; their biases (bf16);
    the matrix's columns. int8: the weights on the int8 grid (packed as int8 where the kernel has that path)."""
    ws = [(torch.randn(n, k, generator=g) * 0.05).bfloat16() for n in sizes]
    ws = [torch.ops.mars_rows.grid(w) for w in ws] if int8 else ws
    bs = [torch.randn(w.shape[0], generator=g).bfloat16() for w in ws]
    packed, n, col = torch.ops.mars_rows.pack(torch.cat(ws)), sum(sizes), 0
    for w in ws:
        torch.ops.mars_rows.register(w, packed, n, col, col + w.shape[0])
        col += w.shape[0]
    return ws, bs, packed, n


@serves
def test_siblings_fused_into_one_matrix_are_one_call_else_one_each():
    """routed_siblings: weights registered as the columns of one packed matrix, asked in that order, are that
    matrix's one product (with the call's biases, in order); asked in another order, or some not registered, or some
    with a bias and some without, each is its own routed call. Either way: F.linear of each, side by side."""
    g = torch.Generator().manual_seed(2)
    ws, bs, packed, n = fused(g, (64, 32, 32), 64)
    x = torch.randn(5, 64, generator=g).bfloat16()
    whole = torch.ops.mars_rows.linear(x, packed, n, torch.cat(bs))
    with torch.inference_mode(), torch.profiler.profile() as prof:  # one product: no concatenation of parts
        assert torch.equal(torch.ops.mars_rows.routed_siblings(x, ws, bs), whole)
    assert not any(e.name == "aten::cat" for e in prof.events()), sorted({e.name for e in prof.events()})
    with torch.inference_mode():
        swapped = torch.ops.mars_rows.routed_siblings(x, [ws[1], ws[0]], [bs[1], bs[0]])
        assert torch.equal(swapped, torch.cat([whole[:, 64:96], whole[:, :64]], -1))
        lone = (torch.randn(16, 64, generator=g) * 0.05).bfloat16()  # never registered: torch's F.linear
        mixed = torch.ops.mars_rows.routed_siblings(x, [ws[0], lone], [None, None])
        plain = torch.ops.mars_rows.linear(x, packed, n, None)
        assert torch.equal(mixed, torch.cat([plain[:, :64], F.linear(x, lone)], -1))
        some = torch.ops.mars_rows.routed_siblings(x, ws, [bs[0], None, bs[2]])  # one call each, each its own bias
        assert torch.equal(some, torch.cat([whole[:, :64], plain[:, 64:96], whole[:, 96:]], -1))


@serves
@pytest.mark.parametrize("int8", [False, True])
@pytest.mark.parametrize("rows_of_x", [1, 3, 9, 20])
def test_a_weights_columns_of_a_fused_matrix_are_the_whole_products_bit_for_bit(rows_of_x, int8):
    """A weight registered as columns [col0, col1) of a fused matrix (col0 not a multiple of 32: 40, 67; a range over
    three panels; one inside a panel), routed alone: only its panels are computed, and its columns are the whole
    matrix's product's bit for bit, without a bias and with the call's (bf16 or fp32), a 3-D x too. int8: its strips
    of 8 columns, an odd count or starting at an odd strip, go alone or in other pairs (AVX512-VNNI's int8_pair) than
    in the whole product: the same bits."""
    g = torch.Generator().manual_seed(5)
    ws, bs, packed, n = fused(g, (40, 27, 61, 5, 33), 77, int8=int8)
    x = torch.randn(rows_of_x, 2, 77, generator=g).bfloat16()
    full = [torch.cat(bs), torch.cat(bs).float()]
    with torch.no_grad():
        for bias in (None, *full):
            whole, col = torch.ops.mars_rows.linear(x, packed, n, bias), 0
            for w in ws:
                b = None if bias is None else bias[col : col + w.shape[0]]
                got = torch.ops.mars_rows.routed(x, w, b)
                assert got.shape == (rows_of_x, 2, w.shape[0]) and got.is_contiguous()
                assert torch.equal(got.view(torch.int16), whole[..., col : col + w.shape[0]].view(torch.int16)), col
                col += w.shape[0]


@serves
@pytest.mark.parametrize("int8", [False, True])
def test_inside_feeding_only_the_fed_rows_are_computed_each_with_its_own_bits(int8):
    """Inside rows.feeding(fed [b, W]), a routed or fused call of b * W rows computes the fed rows, each the bits it
    gets with every row computed, and gives 0 for the others; a call of another row count, a forward with every row
    fed, and every call after the context: every row."""
    g = torch.Generator().manual_seed(9)
    ws, bs, packed, n = fused(g, (64, 32, 40), 96, int8=int8)
    x = torch.randn(3, 5, 96, generator=g).bfloat16()
    fed = torch.rand(3, 5, generator=g) < 0.6
    fed[0, 0], fed[1] = True, False  # a sample fed nothing (finished) among fed ones
    with torch.inference_mode():
        whole, alone = torch.ops.mars_rows.routed_siblings(x, ws, bs), torch.ops.mars_rows.routed(x, ws[2], bs[2])
        with rows.feeding(fed):
            some = torch.ops.mars_rows.routed_siblings(x, ws, bs)
            one = torch.ops.mars_rows.routed(x, ws[2], bs[2])
            other = torch.ops.mars_rows.routed(x[:2], ws[2], bs[2])  # 10 rows, not the forward's 15: all of them
        with rows.feeding(torch.ones(3, 5, dtype=torch.bool)):
            every = torch.ops.mars_rows.routed_siblings(x, ws, bs)
        after = torch.ops.mars_rows.routed_siblings(x, ws, bs)
    assert torch.equal(some[fed], whole[fed]) and torch.equal(one[fed], alone[fed])
    assert not some[~fed].any() and not one[~fed].any() and whole[~fed].any()
    assert torch.equal(other, alone[:2]) and torch.equal(every, whole) and torch.equal(after, whole)


@serves
def test_the_calls_biases_serve_never_a_copy():
    """The registry holds no bias: a bias changed in place after register() is the one the next call adds, fused
    (routed_siblings) or alone (routed)."""
    g = torch.Generator().manual_seed(6)
    ws, bs, packed, n = fused(g, (48, 48, 40), 64)
    x = torch.randn(4, 64, generator=g).bfloat16()
    with torch.inference_mode():
        before = torch.ops.mars_rows.routed_siblings(x, ws, bs)
        bs[1].add_(1.0)
        after = torch.ops.mars_rows.routed_siblings(x, ws, bs)
        assert torch.equal(after, torch.ops.mars_rows.linear(x, packed, n, torch.cat(bs)))
        assert not torch.equal(after[:, 48:96], before[:, 48:96]) and torch.equal(after[:, :48], before[:, :48])
        assert torch.equal(torch.ops.mars_rows.routed(x, ws[1], bs[1]), after[:, 48:96])


@serves
def test_nothing_is_kept_between_calls():
    """A fused weight's routed call keeps neither its input nor its product (no per-thread cache): both are freed once
    the caller lets them go."""
    g = torch.Generator().manual_seed(7)
    ws, bs, _, _ = fused(g, (32, 40), 64)
    with torch.inference_mode():
        x = torch.randn(3, 64, generator=g).bfloat16()
        y = torch.ops.mars_rows.routed(x, ws[1], bs[1])
    xs, ys = weakref.ref(x), weakref.ref(y)
    del x, y
    gc.collect()
    assert xs() is None and ys() is None


@serves
def test_its_clock_counts_the_calling_threads_products_only():
    """linear_seconds(): a thread's time inside the kernel's products (what mars-bench sets beside a forward), moved
    by this thread's calls, by no other thread's, and by no more than their wall time."""
    import threading
    import time

    w = torch.randn(512, 256).bfloat16()
    packed, x = torch.ops.mars_rows.pack(w), torch.randn(4, 256).bfloat16()
    clock = torch.ops.mars_rows.linear_seconds
    began, wall = clock(), time.perf_counter()
    for _ in range(20):
        torch.ops.mars_rows.linear(x, packed, 512, None)
    wall, spent = time.perf_counter() - wall, clock() - began
    assert 0 < spent <= wall
    other = threading.Thread(target=lambda: [torch.ops.mars_rows.linear(x, packed, 512, None) for _ in range(20)])
    before = clock()
    other.start()
    other.join()
    assert clock() == before


@serves
def test_a_changed_or_reshaped_weight_is_not_served_from_its_packed_copy():
    """The packed copy serves only the registered weight as it was: changed in place (its version moves on), or the
    same memory seen as another view (a square weight transposed), it is torch's F.linear of the weight as it is."""
    g = torch.Generator().manual_seed(8)
    w = (torch.randn(64, 64, generator=g) * 0.05).bfloat16()
    torch.ops.mars_rows.register(w, torch.ops.mars_rows.pack(w), 64, 0, 64)
    x = torch.randn(3, 64, generator=g).bfloat16()
    with torch.no_grad():
        assert torch.equal(torch.ops.mars_rows.routed(x, w.t(), None), F.linear(x, w.t()))
        w.mul_(2)
        assert torch.equal(torch.ops.mars_rows.routed(x, w, None), F.linear(x, w))


@serves
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("heads,kv_heads,d", [(9, 3, 64), (10, 2, 80), (12, 2, 32), (16, 2, 48), (4, 4, 32)])
def test_its_attention_is_sdpa_row_by_row(dtype, heads, kv_heads, d):
    """The kernel's attention (9 query heads over 3 key heads, as the embedded model; 5, 6 and 8 a key head, more
    than one pass of the heads it computes together; one; heads of 5, 2 and 3 vectors): SDPA's numbers up to
    rounding, each row's bits the same alone, among the others and in a batch of one, and each head's the same
    computed alone."""
    g = torch.Generator().manual_seed(2)
    b, w, slots, group = 2, 6, 100, heads // kv_heads
    q = torch.randn(b, heads, w, d, generator=g).to(dtype)
    k, v = (torch.randn(b, kv_heads, slots, d, generator=g).to(dtype) for _ in range(2))
    mask = torch.rand(b, 1, w, slots, generator=g) < 0.6
    mask[..., 0] = True
    got = torch.ops.mars_rows.attention(q, k, v, mask, 0.125)
    exact = F.scaled_dot_product_attention(q.float(), k.float().repeat_interleave(group, 1),
                                           v.float().repeat_interleave(group, 1), attn_mask=mask, scale=0.125)
    assert got.shape == (b, w, heads, d)
    torch.testing.assert_close(got.float(), exact.transpose(1, 2), atol=1e-2 if dtype == torch.bfloat16 else 1e-5,
                               rtol=1e-2 if dtype == torch.bfloat16 else 1e-5)
    rows = torch.cat([torch.ops.mars_rows.attention(q[:, :, r : r + 1], k, v, mask[:, :, r : r + 1], 0.125)
                      for r in range(w)], 1)
    alone = torch.cat([torch.ops.mars_rows.attention(q[i : i + 1], k[i : i + 1], v[i : i + 1], mask[i : i + 1], 0.125)
                       for i in range(b)])
    one_head = torch.cat([torch.ops.mars_rows.attention(q[:, h : h + 1], k[:, h // group : h // group + 1],
                                                        v[:, h // group : h // group + 1], mask, 0.125)
                          for h in range(heads)], 2)
    assert torch.equal(rows, got) and torch.equal(alone, got) and torch.equal(one_head, got)


@serves
def test_a_row_that_sees_no_key_reads_zeros():
    """No visible key: zeros (SDPA's would be NaN), the other rows as they are."""
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 9, 2, 64, generator=g).bfloat16()
    k, v = (torch.randn(1, 3, 20, 64, generator=g).bfloat16() for _ in range(2))
    mask = torch.ones(1, 1, 2, 20, dtype=torch.bool)
    mask[0, 0, 0] = False
    got = torch.ops.mars_rows.attention(q, k, v, mask, 0.125)
    assert torch.equal(got[:, 0], torch.zeros_like(got[:, 0]))
    assert torch.equal(got[:, 1:], torch.ops.mars_rows.attention(q[:, :, 1:], k, v, mask[:, :, 1:], 0.125))


@serves
def test_each_output_is_rounded_to_bf16_as_torch_rounds():
    """Whole-number inputs whose sums are exact in fp32 in any order, so the kernel's outputs must be torch's rounding
    of them to bf16 bit for bit: ties to even (257 -> 256, 259 -> 260, -257 -> -256, 511 -> 512 carrying into the
    exponent), a bias added first, an infinite weight's column infinite, a NaN c10::BFloat16's NaN (0x7FC0); whole
    panels of 32 columns and a last one of 8."""
    g = torch.Generator().manual_seed(4)
    n, k = 72, 64
    w = torch.randint(-8, 9, (n, k), generator=g).float()
    x = torch.randint(-8, 9, (5, k), generator=g).float()
    x[0], w[3:8] = 0, 0
    x[0, :2] = 1  # row 0, columns 3 to 6: w[c, 0] + w[c, 1], each halfway between two bf16 numbers
    for c, pair in zip(range(3, 7), ([256.0, 1], [256.0, 3], [-256.0, -1], [256.0, 255])):
        w[c, :2] = torch.tensor(pair)
    w[7, 5], w[40, 7] = float("inf"), float("nan")
    bias = torch.randint(-4, 5, (n,), generator=g).float()
    for b in (None, bias):
        got = torch.ops.mars_rows.linear(x.bfloat16(), torch.ops.mars_rows.pack(w.bfloat16()), n,
                                         None if b is None else b.bfloat16())
        exact = F.linear(x.double(), w.double(), None if b is None else b.double()).float()  # exact: small integers
        number = ~exact.isnan()  # a NaN is c10::BFloat16's one NaN, 0x7FC0 (torch's vector cast keeps other bits)
        assert torch.equal(got.view(torch.int16)[number], exact.bfloat16().view(torch.int16)[number])
        assert got.isnan().equal(~number) and got.view(torch.int16)[~number].eq(0x7FC0).all()
        if b is None:
            assert got[0, 3:7].tolist() == [256, 260, -256, 512]  # 257, 259, -257, 511: ties, each to the even one
    assert got[:, 40].isnan().all() and got[1:, 7].isinf().any()  # the setup met both cases


def test_a_changed_source_is_another_build(monkeypatch, tmp_path):
    """build_id() (the build folder's name and the runtime records' rows_build) follows the source: an edited
    kernel is built anew and measured anew, never taken for its predecessor."""
    before = rows.build_id()
    edited = tmp_path / "rows.cpp"
    edited.write_bytes(rows.SOURCE.read_bytes() + b"\n// edited\n")
    monkeypatch.setattr(rows, "SOURCE", edited)
    assert rows.build_id() != before and rows._folder().name == f"rows-{rows.build_id()}"


def test_a_build_to_come_is_known_before_it_starts(fresh_state, monkeypatch, tmp_path):
    """must_build(): true only where the CPU can run it and no build is kept (the app tells of that step)."""
    monkeypatch.setenv("MARS_CACHE", str(tmp_path))
    monkeypatch.setattr(rows, "cpu_flags", lambda: {"avx2"})
    assert not rows.must_build()
    monkeypatch.setattr(rows, "cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    assert rows.must_build()
    monkeypatch.setattr(rows, "cpu_flags", lambda: {"amx_bf16", "amx_tile"})
    assert rows.must_build()
    rows._folder().mkdir(parents=True)
    (rows._folder() / "mars_rows_x.so").write_bytes(b"")
    assert not rows.must_build()


CHECKS = Path(__file__).with_name("test_rows_checks.py")


@pytest.mark.parametrize("name", list(rows.FLAVORS))
def test_every_flavor_this_cpu_runs_passes_the_kernel_tests(name, tmp_path):
    """Each path of the kernel this CPU can run is tested: the build this process loaded by the tests above, any other
    (on an AMX CPU: AVX512-BF16, built with -DMARS_NO_AMX in a folder of its own, ~35 s the first time) by this file
    and test_rows_checks.py run again in a process that asks for it (MARS_ROWS_FLAVOR), where every test must pass and
    none may skip."""
    if name not in rows.runnable():
        pytest.skip(f"the {rows.NAMES[name]} path is not run here: this CPU has no {rows.NAMES[name]} "
                    f"({', '.join(sorted(rows.FLAVORS[name] - rows.cpu_flags()))} not among its flags)")
    if not rows.rows_kernel():
        pytest.skip(f"no rows kernel here: {rows.why_not()}")
    if rows.flavor() == name:
        pytest.skip(f"{rows.NAMES[name]} is the build this process loaded: the tests above ran it")
    report = tmp_path / "report.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", __file__, str(CHECKS), "-x", "-p", "no:cacheprovider",
                           "-k", "not every_flavor", f"--junitxml={report}"],
                          env={**os.environ, "MARS_ROWS_FLAVOR": name}, cwd=Path(__file__).parents[2],
                          capture_output=True, text=True, timeout=900)
    said = done.stdout[-4000:] + done.stderr[-2000:]
    assert done.returncode == 0 and report.exists(), said
    suite = ElementTree.parse(report).getroot().find("testsuite")
    counts = {key: int(suite.get(key)) for key in ("tests", "failures", "errors", "skipped")}
    assert counts["tests"] > 50 and counts["failures"] == counts["errors"] == counts["skipped"] == 0, (counts, said)


def int8_sample() -> torch.Tensor:
    """A product on the int8 path: a weight on the grid (203 columns: a short last strip; 577 inputs: a short last
    block), a bias, 11 rows of x (more than a group of rows of either build), one of zeros and one with a NaN."""
    g = torch.Generator().manual_seed(5)
    w = torch.ops.mars_rows.grid((torch.randn(203, 577, generator=g) * 0.05).bfloat16())
    x = torch.randn(11, 577, generator=g).bfloat16()
    x[3], x[7, 100] = 0, float("nan")
    return torch.ops.mars_rows.linear(x, torch.ops.mars_rows.pack(w), 203, torch.randn(203, generator=g).bfloat16())


@serves
@int8_path
def test_every_build_with_the_int8_path_gives_its_products_the_same_bits(tmp_path):
    """The int8 path's dot products are exact integers (vpdpbusd with VNNI, vpmaddubsw and vpmaddwd without) and
    the rest the same fp32 steps, so every build this CPU runs with that path (here and in a process that asks for
    another flavor) computes the same bits: 8-bit weights answer the same on an AVX2 laptop and an AVX512-BF16
    server."""
    here = int8_sample()
    others = [name for name in rows.runnable() if name != rows.flavor()]
    if not others:
        pytest.skip("no other build with the int8 path runs on this CPU")
    for name in others:
        out = tmp_path / f"{name}.pt"
        code = f"import runpy, torch; torch.save(runpy.run_path({str(__file__)!r})['int8_sample'](), {str(out)!r})"
        done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "MARS_ROWS_FLAVOR": name},
                              cwd=Path(__file__).parents[2], capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        assert torch.equal(torch.load(out).view(torch.int16), here.view(torch.int16)), name
