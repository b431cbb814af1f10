"""oneDNN-packed linear layers: the same numbers as F.linear, the packed kernel really runs, and training, weight
updates and adapter merges never see a stale packed copy."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from mars_core import cpu_linear
from mars_core.cpu_linear import (
    is_packed,
    kernel_seconds,
    narrow_rows,
    pack_linears,
    packed_dtypes,
    packed_from,
    packing_pays,
    set_packed_from,
    unpack_linears,
)
from mars_core.load import merge_adapter

from tiny import tiny_qwen2

pytestmark = pytest.mark.skipif(not packing_pays(torch.nn.Linear(2, 2)), reason="needs an x86 CPU with oneDNN")


def packed_ops(fn) -> int:
    """How many times the packed oneDNN kernel ran inside fn()."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return sum(e.count for e in prof.key_averages() if e.key == "mkldnn::_linear_pointwise")


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_packed_layer_computes_f_linear(dtype, tol):
    torch.manual_seed(0)
    layer = torch.nn.Linear(96, 40).to(dtype)
    x = torch.randn(3, 7, 96, dtype=dtype).transpose(0, 1)  # 3D and not contiguous, as attention hands it on
    want = F.linear(x, layer.weight, layer.bias)
    packs = dtype in packed_dtypes()  # bf16 needs oneDNN's bf16 kernels: not on an AVX2-only CPU
    assert pack_linears(layer) == packs and is_packed(layer) == packs
    with torch.inference_mode():
        got = layer(x)
        assert packed_ops(lambda: layer(x)) == packs  # where it does not pack, F.linear answers as before
    assert got.shape == want.shape
    torch.testing.assert_close(got.float(), want.float(), atol=tol, rtol=tol)


def test_bf16_packs_exactly_where_onednn_has_bf16_kernels():
    """On a CPU without them (AVX2 only) oneDNN refuses to reorder a bf16 weight: bf16 is then not a packed dtype,
    and pack_linears leaves a bf16 layer as it was."""
    bf16 = torch.nn.Linear(16, 8).to(torch.bfloat16)
    supported = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert (torch.bfloat16 in packed_dtypes()) == supported and torch.float32 in packed_dtypes()
    assert packing_pays(bf16) == supported
    assert pack_linears(bf16) == supported and is_packed(bf16) == supported
    if not supported:
        with pytest.raises(RuntimeError):
            torch.ops.mkldnn._reorder_linear_weight(bf16.weight.detach(), 16)


def test_training_and_in_place_updates_fall_back_to_f_linear():
    torch.manual_seed(0)
    layer = torch.nn.Linear(32, 16)
    pack_linears(layer)
    x = torch.randn(4, 32)
    assert packed_ops(lambda: layer(x).sum().backward()) == 0  # grad enabled: plain F.linear, gradients flow
    assert layer.weight.grad is not None
    torch.optim.SGD(layer.parameters(), lr=1.0).step()  # updates W in place: the packed copy is stale now
    with torch.no_grad():
        assert packed_ops(lambda: layer(x)) == 0
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias))


def test_unpack_restores_plain_layers():
    model = tiny_qwen2(64)
    linears = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert pack_linears(model) == linears and unpack_linears(model) == linears
    assert not is_packed(model)
    with torch.no_grad():
        assert packed_ops(lambda: model(torch.tensor([[1, 2, 3]]))) == 0


def test_a_model_packed_answers_as_before():
    model = tiny_qwen2(64)
    ids = torch.randint(64, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = model(ids).logits
        pack_linears(model)
        got = model(ids).logits
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_merging_an_adapter_into_a_packed_model(tmp_path):
    """merge_adapter writes the weights in place: the packed model must answer with the merged weights."""
    from peft import LoraConfig, get_peft_model

    base = tiny_qwen2(64)
    adapter = get_peft_model(copy.deepcopy(base), LoraConfig(r=4, target_modules=["q_proj", "down_proj"],
                                                             init_lora_weights=False))
    adapter.save_pretrained(tmp_path)
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    with torch.no_grad():
        want = merge_adapter(copy.deepcopy(base), tmp_path)(ids).logits
        packed = copy.deepcopy(base)
        pack_linears(packed)
        set_packed_from(packed, 2)
        merged = merge_adapter(packed, tmp_path)
        assert is_packed(merged) and packed_ops(lambda: merged(ids)) > 0 and packed_from(merged) == 2
        got = merged(ids).logits
        assert not torch.allclose(base(ids).logits, want, atol=1e-3)  # the adapter changes the answer
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_packed_from_sends_narrow_inputs_to_f_linear():
    """Below packed_from rows a packed layer runs torch's own kernel (faster there on some machines), from it the
    packed one; the numbers are F.linear's either way."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(48, 24)
    pack_linears(layer)
    set_packed_from(layer, 3)
    assert packed_from(layer) == 3
    with torch.inference_mode():
        for rows, packs in ((1, 0), (2, 0), (3, 1), (5, 1)):
            x = torch.randn(1, rows, 48)
            assert packed_ops(lambda: layer(x)) == packs, rows
            torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias))


@pytest.mark.parametrize("torch_ms,packed_ms,want", [
    ([1, 2, 3, 4, 6, 8], [2, 3, 2, 5, 5, 7], 6),   # torch wins at 1, 2 and again at 4: packed from 6
    ([3, 3, 3, 3, 3, 3], [1, 1, 1, 1, 1, 1], 1),   # packed wins everywhere (the EPYC, AMX in bf16)
    ([1, 1, 1, 1, 1, 1], [2, 2, 2, 2, 2, 2], 9),   # torch wins everywhere timed: packed past the widest
])
def test_narrow_rows_picks_the_fewest_rows_from_which_packing_always_wins(monkeypatch, torch_ms, packed_ms, want):
    model = tiny_qwen2(64)
    pack_linears(model)
    monkeypatch.setattr(cpu_linear, "kernel_seconds", lambda *a, **k: {"torch": torch_ms, "packed": packed_ms})
    assert narrow_rows(model) == want
    assert {m.packed_from for m in model.modules() if "packed_weight" in m.__dict__} == {want}


def test_kernel_seconds_times_both_kernels_at_each_row_count():
    model = tiny_qwen2(64)
    pack_linears(model)
    seconds = kernel_seconds(model, rows=(1, 4), rounds=1)
    assert set(seconds) == {"torch", "packed"} and all(len(v) == 2 and min(v) > 0 for v in seconds.values())


def test_choose_kernels_is_timed_once_and_kept(monkeypatch, tmp_path):
    from mars_core.decoding import cost

    calls = []
    monkeypatch.setattr(cost, "narrow_rows", lambda model: calls.append(1) or set_packed_from(model, 3) or 3)
    monkeypatch.setattr(cost, "busy", lambda: False)
    model = tiny_qwen2(64)
    assert cost.choose_kernels(model, tmp_path) == 0 and not calls  # nothing packed: nothing to choose
    pack_linears(model)
    assert cost.choose_kernels(model, tmp_path) == 3 and packed_from(model) == 3
    again = tiny_qwen2(64)
    pack_linears(again)
    assert cost.choose_kernels(again, tmp_path) == 3 and packed_from(again) == 3 and len(calls) == 1  # read back
    assert cost.cost_key(again) != cost.cost_key(tiny_qwen2(64))  # curves are kept apart by the kernels used
