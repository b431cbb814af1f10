"""The rows kernel's ops refuse what they cannot compute (kernels/rows.cpp): each wrong input (shape, dtype, a tensor
off the CPU, a bias of another length) is a RuntimeError naming the op and what is wrong, never a read past a buffer
or a crash. A tensor off the CPU is a meta tensor here (one any machine can make)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mars_core.runtime import rows

pytestmark = pytest.mark.skipif(not rows.rows_kernel(), reason=f"no rows kernel here: {rows.why_not()}")
ops = torch.ops.mars_rows


def bf16(*shape: int) -> torch.Tensor:
    return torch.randn(shape).bfloat16()


def meta(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype, device="meta")


W = bf16(40, 64)  # 40 output columns, 64 in-features: packed [2 panels, 32 pairs, 32, 2]
PACKED = ops.pack(W) if rows.rows_kernel() else None  # (where there is no kernel, every test here skips)
X = bf16(3, 64)


@pytest.mark.parametrize("call,reason", [
    (lambda: ops.pack(bf16(64)), "mars_rows.pack: the weight has 1 dimensions, it needs 2"),
    (lambda: ops.pack(bf16(2, 4, 8)), "mars_rows.pack: the weight has 3 dimensions, it needs 2"),
    (lambda: ops.pack(torch.randn(8, 8)), "mars_rows.pack: the weight is Float, not bf16"),
    (lambda: ops.pack(meta(8, 8)), "mars_rows.pack: the weight is on meta, the kernel takes CPU tensors"),
])
def test_pack_refuses(call, reason):
    with pytest.raises(RuntimeError, match=reason):
        call()


@pytest.mark.parametrize("call,reason", [
    # x
    (lambda: ops.linear(X.float(), PACKED, 40, None), "mars_rows.linear: x is Float, not bf16"),
    (lambda: ops.linear(bf16(), PACKED, 40, None), "mars_rows.linear: x has no dimensions"),
    (lambda: ops.linear(bf16(3, 96), PACKED, 40, None), "mars_rows.linear: x has 96 values a row, the packed weight "
                                                        "33 to 64"),
    (lambda: ops.linear(bf16(3, 32), PACKED, 40, None), "mars_rows.linear: x has 32 values a row"),
    (lambda: ops.linear(meta(3, 64), PACKED, 40, None), "mars_rows.linear: x is on meta, the kernel takes CPU"),
    # the packed matrix
    (lambda: ops.linear(X, PACKED.float(), 40, None), "mars_rows.linear: packed is Float, not bf16"),
    (lambda: ops.linear(X, PACKED[0], 40, None), r"mars_rows.linear: packed has shape \[32, 32, 2\], not pack\(\)'s"),
    (lambda: ops.linear(X, W, 40, None), r"mars_rows.linear: packed has shape \[40, 64\]"),
    (lambda: ops.linear(X, PACKED.transpose(0, 1).contiguous().transpose(0, 1), 40, None),
     "mars_rows.linear: packed is not contiguous"),
    (lambda: ops.linear(X, meta(*PACKED.shape), 40, None), "mars_rows.linear: packed is on meta"),
    # n
    (lambda: ops.linear(X, PACKED, 0, None), "mars_rows.linear: n is 0, packed's 2 panels of 32 hold 33 to 64"),
    (lambda: ops.linear(X, PACKED, 65, None), "mars_rows.linear: n is 65, packed's 2 panels"),
    (lambda: ops.linear(X, PACKED, 32, None), "mars_rows.linear: n is 32, packed's 2 panels"),
    # the bias
    (lambda: ops.linear(X, PACKED, 40, bf16(7)), "mars_rows.linear: bias has 7 values, the weight has 40 output "
                                                 "columns"),
    (lambda: ops.linear(X, PACKED, 40, bf16(41)), "mars_rows.linear: bias has 41 values"),
    (lambda: ops.linear(X, PACKED, 40, bf16(1, 40)), "mars_rows.linear: bias has 2 dimensions, not 1"),
    (lambda: ops.linear(X, PACKED, 40, torch.zeros(40, dtype=torch.long)), "mars_rows.linear: bias is Long, not "
                                                                          "floating"),
    (lambda: ops.linear(X, PACKED, 40, meta(40)), "mars_rows.linear: bias is on meta"),
])
def test_linear_refuses(call, reason):
    with pytest.raises(RuntimeError, match=reason):
        call()


def test_linear_takes_any_floating_bias_of_its_columns_and_an_empty_x():
    """A bias of exactly n values in fp32 is as good as bf16; no rows, or rows of no values (a sum of nothing: the
    bias alone), compute without reading a buffer they do not have."""
    b = bf16(40)
    assert torch.equal(ops.linear(X, PACKED, 40, b.float()), ops.linear(X, PACKED, 40, b))
    assert ops.linear(bf16(0, 64), PACKED, 40, b).shape == (0, 40)
    empty = ops.linear(bf16(3, 0), ops.pack(bf16(40, 0)), 40, b)
    assert torch.equal(empty, b.expand(3, 40)) and torch.equal(empty, F.linear(bf16(3, 0), bf16(40, 0), b))


def attention_inputs(b=2, hq=6, hkv=2, w=3, t=10, d=32, dtype=torch.bfloat16):
    q = torch.randn(b, hq, w, d).to(dtype)
    k, v = torch.randn(b, hkv, t, d).to(dtype), torch.randn(b, hkv, t, d).to(dtype)
    return q, k, v, torch.ones(b, 1, w, t, dtype=torch.bool)


def attend(**change):
    """attention on attention_inputs() with some replaced."""
    q, k, v, mask = attention_inputs()
    args = {"q": q, "k": k, "v": v, "mask": mask} | change
    return ops.attention(args["q"], args["k"], args["v"], args["mask"], 0.125)


Q, K, V, MASK = attention_inputs()


@pytest.mark.parametrize("call,reason", [
    (lambda: attend(q=Q[0]), "mars_rows.attention: q, k and v have 3, 4 and 4 dimensions, each needs 4"),
    (lambda: attend(v=V[..., 0]), "mars_rows.attention: q, k and v have 4, 4 and 3 dimensions"),
    (lambda: attend(q=Q.float()), "mars_rows.attention: q, k and v are Float, BFloat16 and BFloat16, not one dtype"),
    (lambda: attend(q=Q.half(), k=K.half(), v=V.half()), "mars_rows.attention: q, k and v are Half, bf16 or fp32 "
                                                         "only"),
    (lambda: attend(v=V[:, :, :5]), r"mars_rows.attention: k has shape \[2, 2, 10, 32\], v \[2, 2, 5, 32\]"),
    (lambda: attend(q=Q[:1]), "mars_rows.attention: q has a batch of 1, k and v 2"),
    (lambda: attend(q=torch.randn(2, 6, 3, 48).bfloat16()), "mars_rows.attention: q's heads have 48 values, k's "
                                                            "and v's 32"),
    (lambda: attend(q=Q[:, :5]), "mars_rows.attention: q's 5 heads are not a multiple of k's and v's 2"),
    (lambda: attend(k=K[:, :0], v=V[:, :0]), "mars_rows.attention: q's 6 heads are not a multiple of k's and v's 0"),
    (lambda: ops.attention(*attention_inputs(d=8), 0.125), "mars_rows.attention: a head's size must be a multiple "
                                                           "of 16, not 8"),
    (lambda: ops.attention(*attention_inputs(d=0), 0.125), "mars_rows.attention: a head's size must be a multiple "
                                                           "of 16, not 0"),
    (lambda: attend(mask=MASK.float()), "mars_rows.attention: mask is Float, not bool"),
    (lambda: attend(mask=MASK[0]), r"mars_rows.attention: mask has shape \[1, 3, 10\], it needs \[b, 1, w, T\] = "
                                   r"\[2, 1, 3, 10\]"),
    (lambda: attend(mask=MASK.expand(2, 2, 3, 10)), r"mars_rows.attention: mask has shape \[2, 2, 3, 10\]"),
    (lambda: attend(mask=MASK[..., :4]), r"mars_rows.attention: mask has shape \[2, 1, 3, 4\]"),
    (lambda: attend(q=meta(*Q.shape)), "mars_rows.attention: q is on meta, the kernel takes CPU tensors"),
    (lambda: attend(mask=meta(*MASK.shape, dtype=torch.bool)), "mars_rows.attention: mask is on meta"),
])
def test_attention_refuses(call, reason):
    with pytest.raises(RuntimeError, match=reason):
        call()


def test_attention_broadcasts_a_mask_of_ones():
    """A mask whose dimensions are 1 where it is the same for all is [b, 1, w, T] broadcast."""
    q, k, v, mask = attention_inputs()
    mask = torch.rand(1, 1, 1, 10) < 0.5
    mask[..., 0] = True
    assert torch.equal(ops.attention(q, k, v, mask, 0.125), ops.attention(q, k, v, mask.expand(2, 1, 3, 10), 0.125))


@pytest.mark.parametrize("call,reason", [
    (lambda: ops.register(bf16(40), PACKED, 40, 0, 40), "mars_rows.register: the weight has 1 dimensions, it needs 2"),
    (lambda: ops.register(W.float(), PACKED, 40, 0, 40), "mars_rows.register: the weight is Float, not bf16"),
    (lambda: ops.register(meta(40, 64), PACKED, 40, 0, 40), "mars_rows.register: the weight is on meta"),
    (lambda: ops.register(W, meta(*PACKED.shape), 40, 0, 40), "mars_rows.register: packed is on meta"),
    (lambda: ops.register(W, PACKED.float(), 40, 0, 40), "mars_rows.register: packed is Float, not bf16"),
    (lambda: ops.register(W, PACKED, 70, 0, 40), "mars_rows.register: n is 70, packed's 2 panels of 32 hold 33 to 64"),
    (lambda: ops.register(bf16(40, 96), PACKED, 40, 0, 40), "mars_rows.register: the weight has 96 in-features, the "
                                                            "packed matrix 33 to 64"),
    (lambda: ops.register(W, PACKED, 40, -1, 39), r"mars_rows.register: columns \[-1, 39\) are not a range within "
                                                  "the packed matrix's 40"),
    (lambda: ops.register(W, PACKED, 40, 10, 50), r"mars_rows.register: columns \[10, 50\) are not a range"),
    (lambda: ops.register(W, PACKED, 40, 20, 20), r"mars_rows.register: columns \[20, 20\) are not a range"),
    (lambda: ops.register(W, PACKED, 40, 0, 30), r"mars_rows.register: columns \[0, 30\) are 30, the weight has 40 "
                                                 "output columns"),
])
def test_register_refuses(call, reason):
    with pytest.raises(RuntimeError, match=reason):
        call()


@pytest.fixture
def served():
    """A weight of 24 output columns registered as columns [40, 64) of a fused packed matrix of 64 (and its sibling,
    [0, 40)): the two weights."""
    first, second = bf16(40, 64), bf16(24, 64)
    packed = ops.pack(torch.cat([first, second]))
    ops.register(first, packed, 64, 0, 40)
    ops.register(second, packed, 64, 40, 64)
    return first, second


def test_routed_refuses(served):
    """Served from its packed copy, routed checks x's row and the bias (the call's: the weight's 24 columns); not
    served, torch's F.linear refuses what it refuses; off the CPU, the op refuses it (its fake, on meta tensors)."""
    _, second = served
    with torch.no_grad():
        assert torch.equal(ops.routed(X, second, None), ops.linear(X, ops.pack(second), 24, None))
        with pytest.raises(RuntimeError, match="mars_rows.routed: x has 96 values a row, the weight has 64 "
                                               "in-features"):
            ops.routed(bf16(3, 96), second, None)
        with pytest.raises(RuntimeError, match="mars_rows.routed: bias has 7 values, the weight has 24 output "
                                               "columns"):
            ops.routed(X, second, bf16(7))
        with pytest.raises(RuntimeError, match="mars_rows.routed: bias has 64 values, the weight has 24"):
            ops.routed(X, second, bf16(64))  # the fused matrix's bias is not this weight's
        with pytest.raises(RuntimeError, match="mars_rows.routed: bias is Long, not floating"):
            ops.routed(X, second, torch.zeros(24, dtype=torch.long))
        with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):  # not registered: F.linear's check
            ops.routed(bf16(3, 96), bf16(24, 64), None)
        for x, w, b, which in ((meta(3, 64), second, None, "x"), (X, meta(24, 64), None, "weight"),
                               (X, second, meta(24), "bias")):
            with pytest.raises(RuntimeError, match=f"mars_rows.routed: {which} is on meta, the kernel takes CPU"):
                ops.routed(x, w, b)


def test_routed_siblings_refuses(served):
    first, second = served
    with torch.no_grad():
        with pytest.raises(RuntimeError, match="mars_rows.routed_siblings: no weights"):
            ops.routed_siblings(X, [], [])
        with pytest.raises(RuntimeError, match=r"mars_rows.routed_siblings: 2 weights and 1 biases, it needs one bias "
                                               r"\(or None\) a weight"):
            ops.routed_siblings(X, [first, second], [None])
        with pytest.raises(RuntimeError, match="mars_rows.routed_siblings: x has no dimensions"):
            ops.routed_siblings(bf16(), [first, second], [None, None])
        with pytest.raises(RuntimeError, match=r"mars_rows.routed_siblings: weights\[1\] has shape \[24, 32\], it "
                                               r"needs \[N, 64\] \(x has 64 values a row\)"):
            ops.routed_siblings(X, [first, bf16(24, 32)], [None, None])
        with pytest.raises(RuntimeError, match=r"mars_rows.routed_siblings: weights\[0\] has shape \[40\]"):
            ops.routed_siblings(X, [bf16(40), second], [None, None])
        with pytest.raises(RuntimeError, match="mars_rows.routed_siblings: bias has 7 values, the weight has 24 "
                                               "output columns"):  # fused: one call with both biases
            ops.routed_siblings(X, [first, second], [bf16(40), bf16(7)])
        with pytest.raises(RuntimeError, match="mars_rows.routed: bias has 7 values, the weight has 24"):
            ops.routed_siblings(X, [first, second], [None, bf16(7)])  # one bias of two: a routed call each
        for x, ws, bs, which in ((meta(3, 64), [first, second], [None, None], "x"),
                                 (X, [first, meta(24, 64)], [None, None], r"weights\[1\]"),
                                 (X, [first, second], [meta(40), None], r"biases\[0\]")):
            with pytest.raises(RuntimeError, match=f"mars_rows.routed_siblings: {which} is on meta, the kernel "
                                                   "takes CPU"):
                ops.routed_siblings(x, ws, bs)


def test_the_ops_fakes_still_trace():
    """Fake tensors (a compiled graph's tracing) read as CPU tensors: the fakes give the ops' shapes."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        x, w, b = (mode.from_tensor(t) for t in (X, W, bf16(40)))
        assert ops.routed(x, w, b).shape == (3, 40)
        assert ops.routed_siblings(x, [w, w], [b, None]).shape == (3, 80)
        q, k, v, mask = (mode.from_tensor(t) for t in (Q, K, V, MASK))
        assert ops.attention(q, k, v, mask, 0.125).shape == (2, 3, 6, 32)
