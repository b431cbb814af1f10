"""What the runtime keeps beside the model answers as the model is now (runtime/watch.py): a weight or bias changed in
place by any route, a model moved to another dtype or given other embeddings, is served as a freshly prepared runtime
serves it, eager and compiled, in bf16 (the rows kernel where this CPU has it, else oneDNN) and fp32 (oneDNN)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from mars_core import generate
from mars_core.runtime import ATTENTION, prepare, refresh
from mars_core.runtime.compiled import compile_runtime
from mars_core.runtime.linear import packing_pays
from mars_core.runtime.watch import make_of

from tiny import tiny_llama, tiny_qwen2

PROMPTS = ["Count from 1 to 9:", "The capital of France"]
KW = dict(max_new_tokens=12)
pytestmark = pytest.mark.skipif(not packing_pays(torch.nn.Linear(2, 2)), reason="no packed linears on this CPU")


def answers(model: torch.nn.Module, tokenizer, runtime) -> list:
    """One-token and verified answers to PROMPTS under runtime."""
    return [generate(model, tokenizer, PROMPTS, strategy=s, block_size=4, runtime=runtime, **KW).token_ids
            for s in ("ar", "verified")]


def fresh(model: torch.nn.Module, tokenizer, folder, compiled: bool = False) -> list:
    """The answers of a runtime prepared now for the model as it is, compiled where `compiled` (the compiled forward
    fuses the work between the kernels: in bf16 its bits are its own, not the eager forward's)."""
    runtime = prepare(model, cache_dir=folder, measure_cost=False, check=False)
    if compiled:
        runtime = compile_runtime(model, runtime, folder)
    return answers(model, tokenizer, runtime)


def _middle(model: torch.nn.Module) -> torch.nn.Module:
    return model.model.layers[len(model.model.layers) // 2]


def _data_write(model, tokenizer) -> None:
    _middle(model).mlp.down_proj.weight.data.neg_()  # no version counter moves


def _one_row(model, tokenizer) -> None:
    """One row of the output head (the first answer token's) through .data: a sparse write the check must see."""
    from mars_core.runtime import Runtime

    first = generate(model, tokenizer, PROMPTS[0], strategy="ar", max_new_tokens=1, runtime=Runtime()).token_ids[0][0]
    model.lm_head.weight.data[first].neg_()


def _copy(model, tokenizer) -> None:
    with torch.no_grad():
        w = _middle(model).self_attn.o_proj.weight
        w.copy_(-w)


def _data_assigned(model, tokenizer) -> None:
    w = model.lm_head.weight
    w.data = w.data.flip(0).contiguous()  # another storage behind the same parameter


def _optimizer_step(model, tokenizer) -> None:
    ids = torch.tensor([tokenizer.encode("The quick brown fox jumps over the lazy dog.")])
    optimizer = torch.optim.SGD(model.parameters(), lr=5.0)
    model.train()
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    model.eval()


def _load_state_dict(model, tokenizer) -> None:
    other = type(model)(model.config)
    torch.manual_seed(7)
    with torch.no_grad():
        for p in other.parameters():
            p.normal_(0, 0.3)
    model.load_state_dict(other.to(model.dtype).state_dict())


def _to_fp32(model, tokenizer) -> None:
    model.to(torch.float32)


def _resized(model, tokenizer) -> None:
    model.resize_token_embeddings(len(tokenizer) + 8)  # new embedding and head matrices, of other shapes
    with torch.no_grad():
        head = model.lm_head.weight[: len(tokenizer)]
        head.copy_(head.flip(0))


ROUTES: dict[str, Callable] = {
    ".data write": _data_write, "one row through .data": _one_row, "copy_": _copy, ".data assigned": _data_assigned,
    "optimizer step": _optimizer_step, "load_state_dict": _load_state_dict, "model.to(fp32)": _to_fp32,
    "resized embeddings": _resized,
}


@pytest.fixture(scope="module", params=[torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def dtype(request):
    return request.param


def _model(tokenizer, dtype, bias: bool = False) -> torch.nn.Module:
    build = tiny_qwen2 if bias else tiny_llama  # Qwen2: q/k/v biases, fused as one matrix with the weights
    return build(len(tokenizer), attn_implementation=ATTENTION).to(dtype)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_changed_model_is_served_as_a_fresh_runtime_serves_it(tokenizer, dtype, route, compiled, tmp_path):
    if route == "model.to(fp32)" and dtype == torch.float32:
        pytest.skip("already fp32")
    model = _model(tokenizer, dtype)
    runtime = prepare(model, cache_dir=tmp_path, measure_cost=False)
    if compiled:
        runtime = compile_runtime(model, runtime, tmp_path)
        assert runtime.compiled is not None, runtime.forward_note
    before = answers(model, tokenizer, runtime)
    assert before == fresh(model, tokenizer, tmp_path, compiled)
    ROUTES[route](model, tokenizer)
    after = answers(model, tokenizer, runtime)
    if route != "model.to(fp32)":  # bf16 -> fp32 is exact: the same answers, from other kernels (today: an error)
        assert after != before  # the change is one the answers show
    # a model of another make is served uncompiled (its graph was built for the old one): as a fresh eager runtime
    remade = route in ("model.to(fp32)", "resized embeddings")
    assert not compiled or runtime.compiled.serves != remade
    assert after == fresh(model, tokenizer, tmp_path, compiled and not remade)


def test_two_runtimes_of_one_model_each_serve_the_model_as_it_is(tokenizer, tmp_path):
    """The rows kernel keeps one copy a weight for the whole process, whichever runtime registered it last: a decode's
    check makes its own runtime's copies the ones that serve. A second runtime packs a changed weight; the weight is
    changed back (an exact unmerge): the first runtime, whose copy is of the weight as it is again, serves its own."""
    model = _model(tokenizer, torch.bfloat16)
    one = prepare(model, cache_dir=tmp_path, measure_cost=False, check=False)
    before = answers(model, tokenizer, one)
    two = prepare(model, cache_dir=tmp_path, measure_cost=False, check=False)
    _data_write(model, tokenizer)
    changed = answers(model, tokenizer, two)  # two packs the changed weight anew
    assert changed != before
    _data_write(model, tokenizer)  # back as it was, bit for bit
    assert answers(model, tokenizer, one) == before
    assert answers(model, tokenizer, two) == before


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_bias_changed_in_place_is_served(tokenizer, dtype, compiled, tmp_path):
    """q/k/v biases (fused with their weights into one matrix) read from the model at every call, never copied."""
    model = _model(tokenizer, dtype, bias=True)
    runtime = prepare(model, cache_dir=tmp_path, measure_cost=False)
    if compiled:
        runtime = compile_runtime(model, runtime, tmp_path)
        assert runtime.compiled is not None, runtime.forward_note
    before = answers(model, tokenizer, runtime)
    for layer in model.model.layers:
        layer.self_attn.q_proj.bias.data.add_(3.0)
        layer.self_attn.v_proj.bias.data.mul_(-8.0)
    after = answers(model, tokenizer, runtime)
    assert after != before and after == fresh(model, tokenizer, tmp_path, compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_peft_merge_and_unmerge_are_served(tokenizer, compiled, tmp_path):
    """peft's merge writes the LoRA product into the base weight through `.data` (no version moves); unmerge takes it
    out again: each is served as a fresh runtime serves it, in load()'s dtype on this CPU."""
    from peft import LoraConfig, get_peft_model

    from mars_core.load import resolve_dtype

    dtype = resolve_dtype(None, torch.device("cpu"))
    torch.manual_seed(3)
    peft_model = get_peft_model(tiny_llama(len(tokenizer), attn_implementation=ATTENTION).to(dtype), LoraConfig(
        r=4, lora_alpha=32, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False))
    model = peft_model.get_base_model().eval()
    for module in model.modules():  # a LoRA product large enough to change the answers
        if hasattr(module, "lora_B"):
            torch.nn.init.normal_(module.lora_B["default"].weight, std=0.5)
    runtime = prepare(model, cache_dir=tmp_path, measure_cost=False)
    if compiled:  # (a LoRA-wrapped model's compiled forward may fail its width check: then it serves uncompiled)
        runtime = compile_runtime(model, runtime, tmp_path)
    adapted = answers(model, tokenizer, runtime)
    with peft_model.disable_adapter():
        base = fresh(model, tokenizer, tmp_path, compiled)
    assert adapted != base
    peft_model.merge_adapter()
    assert answers(model, tokenizer, runtime) == fresh(model, tokenizer, tmp_path, compiled)
    peft_model.unmerge_adapter()
    assert answers(model, tokenizer, runtime) == fresh(model, tokenizer, tmp_path, compiled)


def test_a_changed_make_is_served_uncompiled_and_said_unchecked(tokenizer, tmp_path):
    """After model.to(another dtype) the compiled graph (built for the old one) serves no forward, and the guarantee
    says the width check no longer applies; back to the dtype it was checked in, both return."""
    model = _model(tokenizer, torch.bfloat16)
    runtime = compile_runtime(model, prepare(model, cache_dir=tmp_path, measure_cost=False), tmp_path)
    assert runtime.invariant and runtime.guarantee() == "identical to one-token decoding"
    model.to(torch.float32)
    with pytest.warns(UserWarning, match="the model changed since it was prepared"):
        refresh(model, runtime)
    assert not runtime.compiled.serves and not runtime.invariant
    assert "width invariance not checked" in runtime.guarantee()
    model.to(torch.bfloat16)
    refresh(model, runtime)
    assert runtime.compiled.serves and runtime.invariant


def test_the_make_sees_what_a_traced_forward_reads_from_the_modules(tokenizer):
    """A graph without guards on the modules bakes in their plain attributes (peft's merged flag, an epsilon):
    make_of sees them change, and is the same when nothing did."""
    model = tiny_llama(len(tokenizer))
    make = make_of(model)
    assert make_of(model) == make
    model.model.norm.variance_epsilon = 0.5
    assert make_of(model) != make
    model.model.norm.variance_epsilon = model.config.rms_norm_eps
    assert make_of(model) == make
    model.train()
    assert make_of(model) != make
    model.eval()
    model.model.norm.adapters = []  # a list changed in place later (peft's merged_adapters: merge_adapter appends)
    listed = make_of(model)
    model.model.norm.adapters.append("default")
    assert make_of(model) != listed  # the kept make is a copy, not the live list


def test_nothing_is_checked_for_a_plain_runtime(tokenizer):
    """Runtime() keeps no copies: refresh has nothing to do and promises nothing."""
    from mars_core.runtime import Runtime

    model = tiny_llama(len(tokenizer))
    runtime = Runtime()
    refresh(model, runtime)
    assert runtime.watch.make is None and not runtime.linears


def test_a_changed_weight_that_cannot_be_packed_again_loses_its_copy(tokenizer, tmp_path, monkeypatch):
    """Where packing anew gives nothing (a torch build without the ops), the changed weight's stale copy is dropped:
    torch's kernel answers from the weight as it is."""
    from mars_core.runtime import watch

    model = _model(tokenizer, torch.float32)
    runtime = prepare(model, cache_dir=tmp_path, measure_cost=False, check=False)
    w = _middle(model).mlp.down_proj.weight
    assert id(w) in runtime.linears
    monkeypatch.setattr(watch, "pack_linears", lambda model, only=None: {})
    w.data.neg_()
    refresh(model, runtime)
    assert id(w) not in runtime.linears and id(w) not in runtime.watch.digests
    assert answers(model, tokenizer, runtime) == fresh(model, tokenizer, tmp_path)


@pytest.mark.parametrize("threads", [1, 2, 3, 4])
def test_digests_read_every_weight_in_order_whatever_the_threads(threads, monkeypatch):
    """digests() hashes runs of the list in torch's threads at once: the digests are digest()'s, in the list's order,
    and a change of one byte in any run (the helpers' too) shows in its weight's digest and no other."""
    from mars_core.runtime.watch import digest, digests

    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    torch.manual_seed(0)
    weights = [torch.randn(n, 8, dtype=torch.bfloat16) for n in (1, 300, 7, 64, 2, 900, 3)]
    assert digests([]) == []
    assert digests(weights[:1]) == [digest(weights[0])]
    before = digests(weights)
    assert before == [digest(w) for w in weights] and len(set(before)) == len(weights)
    for i in (0, len(weights) // 2, len(weights) - 1):
        weights[i].data.view(torch.int16)[-1, -1] ^= 1  # the last value's lowest bit, through .data
        after = digests(weights)
        assert [j for j, (a, b) in enumerate(zip(before, after)) if a != b] == [i]
        before = after
