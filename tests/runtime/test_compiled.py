"""The compiled forward (runtime/compiled.py): one graph serves every width and batch, its answers are the
uncompiled runtime's guarantees (verified = one-token, batched = alone), its artifacts are kept for the next start,
and a machine that cannot compile serves uncompiled and says why."""

from __future__ import annotations

import os

import pytest
import torch

from mars_core import generate
from mars_core.runtime import ATTENTION, prepare
from mars_core.runtime.compiled import compile_runtime

from guarantees import one_token_everywhere
from tiny import tiny_llama

PROMPTS = ["Count from 1 to 9:", "The capital of France", "Say hi"]
pytestmark = pytest.mark.skipif(not hasattr(torch, "compile"), reason="needs torch.compile")


@pytest.fixture(scope="module")
def compiled(tokenizer, tmp_path_factory):
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    torch.set_num_threads(1)  # as every test here runs (conftest): a graph guards the thread count
    model = tiny_llama(len(tokenizer), attn_implementation=ATTENTION)
    folder = tmp_path_factory.mktemp("cache")
    runtime = prepare(model, cache_dir=folder, measure_cost=False)
    return model, runtime, compile_runtime(model, runtime, folder), folder


def test_one_graph_serves_every_width_and_batch(compiled, tokenizer):
    import torch._dynamo

    model, _, runtime, _ = compiled
    assert runtime.compiled is not None and runtime.forward_note.startswith("compiled"), runtime.forward_note
    generate(model, tokenizer, PROMPTS, strategy="verified", block_size=4, max_new_tokens=12, runtime=runtime)
    generate(model, tokenizer, PROMPTS[0], strategy="ar", max_new_tokens=6, runtime=runtime)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    assert runtime.record(model)["forward"] == "inductor"


def test_the_compiled_forward_passes_its_width_check_and_keeps_the_guarantees(compiled, tokenizer):
    model, eager, runtime, _ = compiled
    assert runtime.width_check is not None and runtime.width_check.identical, runtime.width_check
    ar, verified = one_token_everywhere(model, tokenizer, PROMPTS, runtime)
    assert verified.tokens_per_forward > 1.0
    uncompiled = generate(model, tokenizer, PROMPTS, strategy="ar", max_new_tokens=16, runtime=eager)
    assert uncompiled.token_ids == ar.token_ids


def test_a_compile_in_another_thread_changes_nothing_here(compiled, tokenizer, monkeypatch):
    """torch.compiler.is_compiling() is one flag for the process: while another thread compiles (the app compiles
    its models in the background while it serves), this thread's forwards, compiled or not, and a training step,
    run as before (the ops once called themselves without end, and a training step lost its gradient)."""
    model, eager, runtime, _ = compiled
    kw = dict(strategy="ar", max_new_tokens=8)
    want = [generate(model, tokenizer, PROMPTS[0], runtime=r, **kw).token_ids for r in (runtime, eager)]
    monkeypatch.setattr(torch.compiler, "_is_compiling_flag", True)  # as while another thread's compile traces
    assert torch.compiler.is_compiling()
    assert [generate(model, tokenizer, PROMPTS[0], runtime=r, **kw).token_ids for r in (runtime, eager)] == want
    layer = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
    with eager.active():
        out = layer(torch.randn(2, layer.in_features, dtype=layer.weight.dtype))
    assert out.requires_grad and out.grad_fn is not None


def test_a_compiled_training_step_beside_a_served_runtime_gets_its_gradients(compiled, tokenizer):
    """The Train tab trains in the app's process while the served runtime routes F.linear and its ops are registered:
    a torch.compile'd training step (the "mars" attention, inside a runtime's context even) gets the gradients an
    eager step gets: a trace with grad on gets torch's own linear and SDPA (runtime/linear.py, attention.py)."""
    import copy

    model, eager, runtime, _ = compiled
    generate(model, tokenizer, PROMPTS[0], max_new_tokens=4, runtime=runtime)  # serving: F.linear routed, ops in use
    student = tiny_llama(len(tokenizer), seed=5, attn_implementation=ATTENTION).train()
    reference = copy.deepcopy(student)
    ids = torch.tensor([tokenizer.encode("The quick brown fox jumps over the lazy dog.")])

    def step(m: torch.nn.Module) -> torch.Tensor:
        loss = m(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss.detach()

    want = step(reference)
    with eager.active():
        got = torch.compile(step)(student)
    assert torch.allclose(got, want, atol=1e-5)
    grads = [(n, p.grad, q.grad) for (n, p), q in zip(student.named_parameters(), reference.parameters())]
    assert all(g is not None for _, g, _ in grads), [n for n, g, _ in grads if g is None]
    assert all(torch.allclose(g, r, atol=1e-4, rtol=1e-3) for _, g, r in grads), [
        n for n, g, r in grads if not torch.allclose(g, r, atol=1e-4, rtol=1e-3)]


def test_the_linear_op_has_gradients_wherever_a_graph_holds_it():
    """mars::linear, where a graph that holds it runs with grad on: x W^T + b's gradients, as F.linear's."""
    x = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w, b: torch.ops.mars.linear(x, w, b), (x, w, b))
    assert torch.autograd.gradcheck(lambda x, w: torch.ops.mars.linear(x, w, None), (x, w))


def test_compiled_artifacts_are_kept_and_a_warm_start_loads_them(compiled):
    model, eager, _, folder = compiled
    kept = list(folder.glob("inductor-*.bin"))
    assert len(kept) == 1 and kept[0].stat().st_size > 0
    again = compile_runtime(model, eager, folder)
    assert again.compiled is not None and "kept artifacts" in again.forward_note, again.forward_note


def test_models_of_one_make_share_a_graph_and_each_answers_with_its_own_weights(compiled, tokenizer, tmp_path):
    """The graph keeps no guards on the model's modules (checking them took a good share of a forward): models of one
    make (compiled._make) share it, each answering with its own weights; a model of another make, here another norm
    epsilon (a constant of the graph), gets a graph of its own and answers as its uncompiled self."""
    import torch._dynamo

    model, _, runtime, _ = compiled
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    kw = dict(strategy="ar", max_new_tokens=12)

    def answers(seed: int, **config) -> tuple[list, list]:
        other = tiny_llama(len(tokenizer), seed=seed, attn_implementation=ATTENTION, **config)
        eager = prepare(other, cache_dir=tmp_path, measure_cost=False, check=False)
        served = compile_runtime(other, eager, tmp_path)
        assert served.compiled is not None, served.forward_note
        return [generate(other, tokenizer, PROMPTS, runtime=r, **kw).token_ids for r in (served, eager)]

    same_make = answers(seed=1)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs  # the first model's graph served
    assert same_make[0] == same_make[1] != generate(model, tokenizer, PROMPTS, runtime=runtime, **kw).token_ids
    other_make = answers(seed=1, rms_norm_eps=0.5)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs + 1
    assert other_make[0] == other_make[1] != same_make[1]  # the epsilon changes the answer, and it was honoured


def test_damaged_artifacts_are_compiled_anew_and_replaced(compiled, tmp_path):
    model, eager, _, folder = compiled
    kept = next(folder.glob("inductor-*.bin"))
    damaged = tmp_path / kept.name
    damaged.write_bytes(b"not an artifact")
    out = compile_runtime(model, eager, tmp_path)
    assert out.compiled is not None and "kept artifacts" not in out.forward_note, out.forward_note
    assert damaged.read_bytes() != b"not an artifact" and out.width_check.identical
    assert "kept artifacts" in compile_runtime(model, eager, tmp_path).forward_note


def test_inductors_own_cache_is_kept_beside_ours_unless_chosen(monkeypatch, tmp_path):
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from mars_core.runtime.compiled import _inductor_cache_beside_ours

    monkeypatch.setenv("MARS_CACHE", str(tmp_path))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())  # torch's own pick, named on import
    _inductor_cache_beside_ours()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))  # the user's pick stays
    _inductor_cache_beside_ours()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "mine")


@pytest.mark.parametrize("step", ["_backend", "_load_artifacts", "_inductor_cache_beside_ours"])
def test_whatever_fails_while_compiling_it_serves_uncompiled_and_says_why(tokenizer, monkeypatch, tmp_path, step):
    """compile_runtime never raises: a step before the compile itself failing (the backend's make, the kept
    artifacts, inductor's cache folder) leaves the runtime uncompiled, its note naming the error."""
    from mars_core.runtime import compiled as compiled_module

    def fail(*args, **kwargs):
        raise RuntimeError(f"{step} broke")

    model = tiny_llama(len(tokenizer), attn_implementation=ATTENTION)
    runtime = prepare(model, cache_dir=tmp_path, measure_cost=False, check=False)
    monkeypatch.setattr(compiled_module, step, fail)
    out = compile_runtime(model, runtime, tmp_path)
    assert out.compiled is None and out.forward_note == f"uncompiled: compiling failed (RuntimeError: {step} broke)"


def test_without_a_compiler_it_serves_uncompiled_and_says_why(tokenizer, monkeypatch, tmp_path):
    model = tiny_llama(len(tokenizer), attn_implementation=ATTENTION)
    runtime = prepare(model, cache_dir=tmp_path, measure_cost=False, check=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    out = compile_runtime(model, runtime, tmp_path)
    assert out.compiled is None and out.forward_note.startswith("uncompiled: no C++ compiler"), out.forward_note
    assert generate(model, tokenizer, PROMPTS[0], max_new_tokens=4, runtime=out).token_ids


@pytest.mark.skipif(not __import__("mars_core.runtime.rows", fromlist=["rows_kernel"]).rows_kernel(),
                    reason="no rows kernel on this machine")
def test_with_the_rows_kernel_the_graph_calls_its_ops_and_keeps_the_guarantees(tokenizer, tmp_path, monkeypatch):
    """A bf16 model on a CPU with AMX or AVX512-BF16: the graph calls the rows kernel's own ops (no Python between
    layers), the packed copies found by weight, and verified = one-token = alone still holds (weights changed in place:
    test_watch.py)."""
    import torch._dynamo

    from mars_core.runtime import compiled as compiled_module

    graphs = []
    rows_graph = compiled_module._rows_graph

    def seen(gm, example_inputs, attention):
        out = rows_graph(gm, example_inputs, attention)
        graphs.append({str(n.target) for n in gm.graph.nodes if n.op == "call_function"})
        return out

    monkeypatch.setattr(compiled_module, "_rows_graph", seen)
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = tiny_llama(len(tokenizer), attn_implementation=ATTENTION).to(torch.bfloat16)
    eager = prepare(model, cache_dir=tmp_path, measure_cost=False)
    runtime = compile_runtime(model, eager, tmp_path)
    flavor = __import__("mars_core.runtime.rows", fromlist=["flavor"]).flavor()
    assert runtime.record(model)["linear"] == f"{flavor}_rows" and runtime.record(model)["attention"] == "rows_kernel"
    assert runtime.width_check.identical, runtime.width_check
    one_token_everywhere(model, tokenizer, PROMPTS, runtime)
    ops = set().union(*graphs)
    called = {op.removesuffix(".default") for op in ops}  # q/k/v and gate/up as one call each, o and down alone
    assert {"mars_rows.routed", "mars_rows.routed_siblings", "mars_rows.attention"} <= called, sorted(ops)
    assert not any(op.startswith("mars.") for op in ops), ops


def test_the_compiled_forward_writes_the_cache_where_it_lies_in_loops_of_one_thread(tokenizer, tmp_path):
    """A layer's keys and values are written in place: the graph's code allocates no buffer shaped like a layer's
    cache [b, heads, slots, d] (a scatter_ there had become a copy of the whole cache and a copy back, per layer and
    forward). Sizes read in the code: s* a backed symbol (batch, slots), u* the fed width. And inductor's own loops
    open no OpenMP region (one a loop, several a layer, cost more than the few rows they split)."""
    import re

    import torch._dynamo
    import torch._inductor.config as inductor_config
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    model = tiny_llama(len(tokenizer), attn_implementation=ATTENTION)
    runtime = prepare(model, cache_dir=tmp_path, measure_cost=False, check=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # as served: with one thread inductor would open no region anyway
    try:
        with inductor_config.patch(fx_graph_cache=False):  # compiled here, so its code is written out here
            served, code = run_and_get_code(lambda: compile_runtime(model, runtime, tmp_path))
    finally:
        torch.set_num_threads(threads)
        torch._dynamo.reset()  # its graph guards two threads
    config = model.config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads  # as SlotCache sizes it
    d = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    allocations = re.findall(r"empty_strided_cpu\(\(([^)]*)\)", "\n".join(code))
    assert served.compiled is not None and allocations, served.forward_note
    assert not [a for a in allocations if re.fullmatch(rf"s\d+, {heads}, s\d+, {d}", a.strip())], allocations
    assert "cpp_fused" in "\n".join(code) and "omp parallel" not in "\n".join(code)
    # the same search finds a region where inductor opens one (its own threads, a loop large enough to split)
    torch.set_num_threads(2)
    try:
        with inductor_config.patch(fx_graph_cache=False):
            _, control = run_and_get_code(torch.compile(lambda x: (x * 2).sum(1)), torch.randn(4096, 512))
    finally:
        torch.set_num_threads(threads)
    assert "omp parallel" in "\n".join(control)
