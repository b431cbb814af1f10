"""Packed linear layers held by the runtime (oneDNN's kernel, and the rows kernel where this CPU has it): the same
numbers as F.linear, the packed kernel really runs inside the runtime (and nowhere else: nothing is set on the model),
each row gets the same bits at every row count, and training, weight updates and adapter merges never see a stale
packed copy."""

from __future__ import annotations

import copy
import dataclasses
import importlib

import pytest
import torch
import torch.nn.functional as F

from mars_core.load import merge_adapter
from mars_core.runtime import Runtime, linear, timing
from mars_core.runtime.linear import (
    ONEDNN,
    ROWS,
    LinearKernels,
    fewest_packed_rows,
    kernel_seconds,
    pack_linears,
    packed_dtypes,
    packing_pays,
)
from mars_core.runtime.rows import build_id, rows_kernel

from tiny import tiny_qwen2

pytestmark = pytest.mark.skipif(not packing_pays(torch.nn.Linear(2, 2)), reason="needs an x86 CPU with oneDNN")


def matrices(runtime: Runtime) -> set[int]:
    """The packed matrices (siblings that read the same input are one: linear.FUSED)."""
    return {id(e.fused) if e.fused else id(e) for e in runtime.linears.values()}


OPS = {ONEDNN: "mkldnn::_linear_pointwise", ROWS: "mars_rows::routed"}  # the rows kernel's op decides and computes
# ours= for pack_linears: oneDNN, and the rows kernel where it serves
BF16_KERNELS = [False, *([True] if rows_kernel() else [])]


def packed_ops(fn, kernel: str = ONEDNN) -> int:
    """How many times the packed kernel ran inside fn()."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return sum(e.count for e in prof.key_averages() if e.key == OPS[kernel])


@pytest.mark.parametrize("dtype,tol,ours", [(torch.float32, 1e-5, True), *((torch.bfloat16, 2e-2, ours)
                                                                             for ours in BF16_KERNELS)])
def test_packed_layer_computes_f_linear(dtype, tol, ours):
    torch.manual_seed(0)
    layer = torch.nn.Linear(96, 40).to(dtype)  # 40 outputs: a part-filled panel of the rows kernel; 96 = 3 tiles
    x = torch.randn(3, 7, 96, dtype=dtype).transpose(0, 1)  # 3D and not contiguous, as attention hands it on
    want = F.linear(x, layer.weight, layer.bias)
    packs = dtype in packed_dtypes(ours)  # bf16: oneDNN's bf16 kernels (not on an AVX2-only CPU), or the rows kernel
    linears = pack_linears(layer, ours=ours)
    kernel = ROWS if ours and dtype == torch.bfloat16 else ONEDNN  # fp32 is oneDNN's on every CPU
    assert len(linears) == packs and all(e.kernel == kernel for e in linears.values())
    with torch.inference_mode():
        assert packed_ops(lambda: layer(x), kernel) == 0  # outside the runtime the layer is as it was
        with LinearKernels(linears):
            got = layer(x)
            assert packed_ops(lambda: layer(x), kernel) == packs  # where it does not pack, F.linear answers as before
    assert got.shape == want.shape and "packed_weight" not in layer.__dict__ and "forward" not in layer.__dict__
    torch.testing.assert_close(got.float(), want.float(), atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype,ours", [(torch.float32, False), *((torch.bfloat16, ours) for ours in BF16_KERNELS)])
def test_a_row_gets_the_same_bits_at_every_row_count(dtype, ours):
    """Width invariance of the packed kernel: row r of a 1..33-row input equals row r fed alone, bit for bit, at
    the embedded model's layer shapes (q, k/v, up, down, head)."""
    if dtype not in packed_dtypes(ours):
        pytest.skip("oneDNN has no bf16 kernels on this CPU")
    torch.manual_seed(0)
    for n, k in ((576, 576), (192, 576), (1536, 576), (576, 1536), (4096, 576)):
        layer = torch.nn.Linear(k, n, bias=False).to(dtype)
        x = torch.randn(33, k).to(dtype)
        with torch.inference_mode(), LinearKernels(pack_linears(layer, ours=ours)):
            alone = torch.cat([layer(x[r : r + 1]) for r in range(33)])
            assert all(torch.equal(layer(x[:m]), alone[:m]) for m in range(2, 34)), (n, k)


@pytest.mark.parametrize("dtype", packed_dtypes(ours=False))
def test_a_lone_row_is_fed_as_two_where_the_cpu_computes_it_apart(dtype):
    """Where oneDNN's kernel for one row gives other bits than its kernel for two (one_row_differs, probed once per
    shape when packing), a lone row is fed beside a copy of itself and gets the bits it gets beside another row."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(1536, 576, bias=False).to(dtype)
    x = torch.randn(2, 1536).to(dtype)
    (entry,) = pack_linears(layer, ours=False).values()
    assert entry.pair == linear.one_row_differs(entry.packed, 1536, dtype)
    paired, alone = dataclasses.replace(entry, pair=True), dataclasses.replace(entry, pair=False)
    pointwise = torch.ops.mkldnn._linear_pointwise
    with torch.inference_mode():
        got = linear.packed_linear(x[:1][None], paired, None)  # [1, 1, 1536], as a decoder feeds one token
        assert got.shape == (1, 1, 576)
        assert torch.equal(got[0], pointwise(torch.stack([x[0], x[0]]), entry.packed, None, "none", [], "")[:1])
        assert torch.equal(linear.packed_linear(x[:1], alone, None), pointwise(x[:1], entry.packed, None, "none", [],
                                                                                    ""))
        assert torch.equal(linear.packed_linear(x, paired, None), linear.packed_linear(x, alone, None))  # 2 rows as is


def test_a_shape_is_paired_when_any_of_its_weights_shows_the_one_row_difference(monkeypatch):
    """Whether a weight's one-row bits differ shows on some weights of a shape only (SmolLM2's first down projection
    shows nothing, the next ones do): every weight is probed until one of its shape does, and then all of that shape
    are fed as two; a shape none of whose weights shows it is left alone."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(64, 32, bias=False) for _ in range(4)), torch.nn.Linear(32, 64))
    shows = {id(model[2].weight)}  # the third weight of shape (32, 64) is the first to show it
    probed = []

    def probe(packed, inputs, dtype):
        weight = next(m.weight for m in model if m.weight.shape[1] == inputs and id(m.weight) not in probed_ids)
        probed_ids.add(id(weight))
        probed.append(inputs)
        return id(weight) in shows

    probed_ids: set[int] = set()
    monkeypatch.setattr(linear, "one_row_differs", probe)
    entries = pack_linears(model)
    assert [entries[id(m.weight)].pair for m in model] == [True, True, True, True, False]
    assert probed == [64, 64, 64, 32]  # the fourth (32, 64) weight needs no probe: its shape already pairs


def test_bf16_packs_exactly_where_onednn_has_bf16_kernels_or_the_rows_kernel_serves():
    """On a CPU without them (AVX2 only) oneDNN refuses to reorder a bf16 weight: bf16 is then packed only for the
    rows kernel (where it serves), and pack_linears(ours=False) leaves a bf16 layer as it was."""
    bf16 = torch.nn.Linear(16, 8).to(torch.bfloat16)
    supported = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert (torch.bfloat16 in packed_dtypes(ours=False)) == supported and torch.float32 in packed_dtypes()
    assert (torch.bfloat16 in packed_dtypes()) == (supported or rows_kernel())
    assert packing_pays(bf16, ours=False) == supported and packing_pays(bf16) == (supported or rows_kernel())
    assert len(pack_linears(bf16, ours=False)) == supported and len(pack_linears(bf16)) == (supported or rows_kernel())
    if not supported:
        with pytest.raises(RuntimeError):
            torch.ops.mkldnn._reorder_linear_weight(bf16.weight.detach(), 16)


def test_training_and_in_place_updates_fall_back_to_f_linear():
    torch.manual_seed(0)
    layer = torch.nn.Linear(32, 16)
    linears = pack_linears(layer)
    x = torch.randn(4, 32)
    with LinearKernels(linears):
        assert packed_ops(lambda: layer(x).sum().backward()) == 0  # grad enabled: plain F.linear, gradients flow
    assert layer.weight.grad is not None
    torch.optim.SGD(layer.parameters(), lr=1.0).step()  # updates W in place: the packed copy is stale now
    with torch.no_grad(), LinearKernels(linears):
        assert packed_ops(lambda: layer(x)) == 0
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias))


@pytest.mark.skipif(not rows_kernel(), reason="no rows kernel on this CPU")
def test_gradients_through_the_rows_kernel_op_are_f_linears():
    """With grad on, the rows kernel's op computes torch's linear and its gradients are F.linear's (training beside
    serving: a forward inside the runtime with grad on still trains)."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 40).to(torch.bfloat16)
    linears = pack_linears(layer)
    assert all(e.kernel == ROWS for e in linears.values())
    x = torch.randn(3, 64, dtype=torch.bfloat16, requires_grad=True)
    with LinearKernels(linears):
        layer(x).float().square().sum().backward()
    got = (x.grad, layer.weight.grad, layer.bias.grad)
    assert all(g is not None for g in got)
    x.grad = None
    layer.zero_grad()
    F.linear(x, layer.weight, layer.bias).float().square().sum().backward()
    for a, b in zip(got, (x.grad, layer.weight.grad, layer.bias.grad)):
        torch.testing.assert_close(a.float(), b.float(), atol=2e-2, rtol=2e-2)


def test_a_model_in_a_runtime_answers_as_before():
    model = tiny_qwen2(64)
    ids = torch.randint(64, (2, 9), generator=torch.Generator().manual_seed(0))
    runtime = Runtime(linears=pack_linears(model))
    assert len(runtime.linears) == sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    with torch.no_grad():
        want = model(ids).logits
        with runtime.active():
            got = model(ids).logits
            # one call per packed matrix: q, k and v as one, gate and up as one (linear.FUSED)
            assert packed_ops(lambda: model(ids)) == len(matrices(runtime)) == 2 * 4 + 1
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_a_runtime_prepared_after_merging_an_adapter_answers_with_the_merged_weights(tmp_path):
    """merge_adapter writes the weights in place (through .data, which moves no version counter): the runtime is
    prepared after it, as evaluation.loading.load_prepared does, and answers with the merged weights."""
    from peft import LoraConfig, get_peft_model

    base = tiny_qwen2(64)
    adapter = get_peft_model(copy.deepcopy(base), LoraConfig(r=4, target_modules=["q_proj", "down_proj"],
                                                             init_lora_weights=False))
    adapter.save_pretrained(tmp_path)
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    with torch.no_grad():
        want = merge_adapter(copy.deepcopy(base), tmp_path)(ids).logits
        merged = merge_adapter(copy.deepcopy(base), tmp_path)
        runtime = Runtime(linears=pack_linears(merged))
        with runtime.active():
            got = merged(ids).logits
            assert packed_ops(lambda: merged(ids)) == len(matrices(runtime))
        assert not torch.allclose(base(ids).logits, want, atol=1e-3)  # the adapter changes the answer
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_rows_below_the_threshold_go_to_f_linear():
    """Below `rows` rows a packed layer runs torch's own kernel (faster there on some machines), from it the packed
    one; the numbers are F.linear's either way."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(48, 24)
    with torch.inference_mode(), LinearKernels(pack_linears(layer), rows=3):
        for rows, packs in ((1, 0), (2, 0), (3, 1), (5, 1)):
            x = torch.randn(1, rows, 48)
            assert packed_ops(lambda: layer(x)) == packs, rows
            torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias))


@pytest.mark.parametrize("torch_ms,packed_ms,want", [
    ([1, 2, 3, 4, 6, 8], [2, 3, 2, 5, 5, 7], 6),   # torch wins at 1, 2 and again at 4: packed from 6
    ([3, 3, 3, 3, 3, 3], [1, 1, 1, 1, 1, 1], 1),   # packed wins everywhere (the EPYC, AMX in bf16)
    ([1, 1, 1, 1, 1, 1], [2, 2, 2, 2, 2, 2], 9),   # torch wins everywhere timed: packed past the widest
])
def test_fewest_packed_rows_picks_the_rows_from_which_packing_always_wins(monkeypatch, torch_ms, packed_ms, want):
    linears = pack_linears(tiny_qwen2(64))
    monkeypatch.setattr(linear, "kernel_seconds", lambda *a, **k: {"torch": torch_ms, "packed": packed_ms})
    assert fewest_packed_rows(linears) == want


def test_kernel_seconds_times_both_kernels_at_each_row_count():
    seconds = kernel_seconds(pack_linears(tiny_qwen2(64)), rows=(1, 4), rounds=1)
    assert set(seconds) == {"torch", "packed"} and all(len(v) == 2 and min(v) > 0 for v in seconds.values())


def test_kernel_rows_are_timed_once_and_kept(monkeypatch, tmp_path):
    prep = importlib.import_module("mars_core.runtime.prepare")

    calls = []
    monkeypatch.setattr(prep, "fewest_packed_rows", lambda linears: calls.append(1) or 3)
    monkeypatch.setattr(timing, "machine_busy", lambda: False)
    model = tiny_qwen2(64)
    runtime = prep.prepare(model, invariant=False, check=False, measure_cost=False, cache_dir=tmp_path)
    assert runtime.packed_from == 3 and runtime.linears and not runtime.rows
    again = prep.prepare(tiny_qwen2(64), invariant=False, check=False, measure_cost=False, cache_dir=tmp_path)
    assert again.packed_from == 3 and len(calls) == 1  # read back
    plain = prep.prepare(tiny_qwen2(64), pack=False, check=False, measure_cost=False, cache_dir=tmp_path)
    assert plain.key(model) != runtime.key(model)  # measurements are kept apart by the kernels used


@pytest.mark.skipif(not rows_kernel(), reason="no rows kernel on this CPU")
def test_measurements_under_the_rows_kernel_name_its_build(monkeypatch, tmp_path):
    """A runtime on the rows kernel records which build answers (rows_build), so its kept width check and cost curve
    belong to that build: an edited kernel gets a key of its own and is checked and timed anew."""
    prep = importlib.import_module("mars_core.runtime.prepare")
    runtime_module = importlib.import_module("mars_core.runtime.runtime")
    model = tiny_qwen2(64).to(torch.bfloat16)
    runtime = prep.prepare(model, check=False, measure_cost=False, cache_dir=tmp_path)
    assert runtime.record(model)["linear"].endswith("_rows")
    assert runtime.record(model)["rows_build"] == build_id()
    key = runtime.key(model)
    monkeypatch.setattr(runtime_module, "build_id", lambda: "another build")
    assert runtime.key(model) != key


def test_the_key_changes_with_the_code_that_runs_the_forward(monkeypatch):
    """A width check, cost curve or compiled graph kept under Runtime.key is not read by another transformers or
    another runtime code (an upgrade): the key names both."""
    import transformers

    runtime_module = importlib.import_module("mars_core.runtime.runtime")
    model, runtime = tiny_qwen2(64), Runtime()
    key = runtime.key(model)
    assert runtime.key(model) == key  # the same code: the same key
    runtime_module.code_digest.cache_clear()
    monkeypatch.setattr(transformers, "__version__", transformers.__version__ + ".post1")
    try:
        assert runtime.key(model) != key
    finally:
        runtime_module.code_digest.cache_clear()
