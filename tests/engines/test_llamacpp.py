"""The llama.cpp engine on a tiny Llama built in code: the GGUF export against torch, one-token decoding against
transformers' generate, threshold and verified modes, the tree's sequence ids, and the cache after keep()."""

from __future__ import annotations

import pytest
import torch

from mars_core.decoding.feed import tree_template
from mars_core.decoding.verified import TreeLayout
from mars_core.engines.llamacpp.tree import implied_mask, plan
from mars_core.generate import encode_prompt, generate, stream

from tiny import tiny_llama, tiny_tokenizer

llama_cpp = pytest.importorskip("llama_cpp")

from mars_core.engines.llamacpp import LlamaCppEngine, export_gguf, llamacpp_runtime  # noqa: E402
from mars_core.runtime import cost as runtime_cost  # noqa: E402
from mars_core.runtime.curve import CostCurve  # noqa: E402
from mars_core.runtime.invariance import CHECK_WIDTHS, compare_widths, width_check  # noqa: E402
from mars_core.runtime.runtime import Runtime  # noqa: E402

PROMPTS = ["Count from one to ten:", "What is the capital of France?", "List three colours:",
           "Step by step: 12 * 3"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(torch model, tokenizer, GGUF path) of a tiny Llama in F32."""
    tokenizer = tiny_tokenizer(mask_token=True)
    model = tiny_llama(len(tokenizer), num_hidden_layers=3, max_position_embeddings=512)
    path = export_gguf(model, tokenizer, tmp_path_factory.mktemp("gguf") / "tiny.f32.gguf", weights="f32")
    return model, tokenizer, path


def engine_of(tiny, invariant: bool = False) -> LlamaCppEngine:
    model, _, path = tiny
    return LlamaCppEngine(path, n_ctx=512, threads=1, kv_type="f32", invariant=invariant,
                          eos_token_id=model.generation_config.eos_token_id, mask_id=tiny[1].mask_token_id)


@pytest.fixture(scope="module")
def engine(tiny):
    return engine_of(tiny)


@pytest.fixture(scope="module")
def invariant_engine(tiny):
    return engine_of(tiny, invariant=True)


def ids_of(tokenizer, prompt: str) -> torch.Tensor:
    return torch.tensor([encode_prompt(tokenizer, prompt)])


def chain(engine, cache, ids: torch.Tensor, start: int) -> torch.Tensor:
    """Feed ids [1, W] as a causal run after `start` kept slots, and keep them; the logits of every slot."""
    width = ids.shape[1]
    positions = torch.arange(start, start + width)[None]
    rows = engine.feed(ids, positions, torch.ones(1, width, width, dtype=torch.bool).tril(), cache,
                       list(range(width)))
    cache.keep(width)
    return rows


def test_gguf_logits_match_torch(tiny, engine):
    """F32 GGUF on llama.cpp (F32 KV cache, no flash attention) against the torch model: float rounding apart
    (measured 4e-6 of logits up to 10), so the q/k rows are permuted right and every vocabulary row is in place."""
    model, tokenizer, _ = tiny
    ids = ids_of(tokenizer, PROMPTS[0])
    ours = chain(engine, engine.new_cache(), ids, 0)
    with torch.no_grad():
        theirs = model(ids).logits.float()
    assert ours.shape == theirs.shape
    assert (ours - theirs).abs().max() < 1e-5 * theirs.abs().max()
    assert torch.equal(ours.argmax(-1), theirs.argmax(-1))


@pytest.mark.parametrize("prompt", PROMPTS[:3])
def test_one_token_equals_transformers_generate(tiny, engine, prompt):
    """llama.cpp one-token decoding gives transformers' greedy tokens (F32, token for token)."""
    model, tokenizer, _ = tiny
    ids = ids_of(tokenizer, prompt)
    with torch.no_grad():
        hf = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False)
    ours = generate(engine, tokenizer, prompt, strategy="ar", max_new_tokens=24)
    assert ours.token_ids[0] == hf[0, ids.shape[1]:].tolist()[: len(ours.token_ids[0])]
    assert len(ours.token_ids[0]) == hf.shape[1] - ids.shape[1] or ours.token_ids[0][-1] == tokenizer.eos_token_id


def test_threshold_mode_commits_tokens(tiny, engine):
    """Sliding (threshold) mode runs on llama.cpp: at a threshold near 0 a forward commits about B tokens."""
    _, tokenizer, _ = tiny
    out = generate(engine, tokenizer, PROMPTS[1], strategy="sliding", threshold=0.01, block_size=4, max_new_tokens=24)
    assert out.generated_tokens >= out.forwards
    assert out.tokens_per_forward > 1.5


@pytest.mark.parametrize("prompt", [*PROMPTS, pytest.param(" ".join(PROMPTS * 6), id="past-64-prefill-rows")])
def test_verified_equals_one_token(tiny, invariant_engine, prompt):
    """Verified decoding on llama.cpp (trees of drafts, groups and siblings) equals llama.cpp's one-token decoding,
    token for token, on an engine that runs every forward at two rows or more (one kernel path for every width)."""
    _, tokenizer, _ = tiny
    ar = generate(invariant_engine, tokenizer, prompt, strategy="ar", max_new_tokens=32)

    for layout in (TreeLayout(), TreeLayout(sibling_floor=0.05, group_floor=0.0)):
        ver = generate(invariant_engine, tokenizer, prompt, strategy="verified", threshold=0.01, block_size=4,
                       max_new_tokens=32, layout=layout)
        assert ver.token_ids == ar.token_ids
        assert ver.forwards <= ar.forwards


def test_stream_on_llamacpp(tiny, engine):
    """stream() on the engine: its events' tokens are generate()'s answer (what the app's lanes read)."""
    _, tokenizer, _ = tiny
    events = list(stream(engine, tokenizer, PROMPTS[3], strategy="verified", max_new_tokens=24))
    assert [t for e in events for t in e.token_ids[0]] == generate(engine, tokenizer, PROMPTS[3], strategy="ar",
                                                                    max_new_tokens=24).token_ids[0]


def test_width_check_invariant_engine(invariant_engine, tiny):
    """An invariant engine's rows are bit-identical at every width, one included (two rows or more, always): the torch
    runtime's check (runtime/invariance.py) on the engine's forward."""
    _, tokenizer, _ = tiny
    prompt = torch.tensor([encode_prompt(tokenizer, PROMPTS[0])])
    check = compare_widths(invariant_engine, Runtime(), prompt, torch.tensor([prompt.shape[1]]),
                           torch.arange(20, 32)[None], (2, 3, 8))
    assert check.identical and check.rows == 3 * (1 + 12) and check.max_abs == 0.0  # the prompt's last token too


def test_the_engine_check_is_prepares_and_kept(engine, tmp_path, monkeypatch):
    """prepare()'s width check on an engine: one sample (its forward takes one), CHECK_WIDTHS, 32 new tokens each
    and the prompt's last, kept by the engine's record; read back, it is not taken again."""
    check = width_check(engine, Runtime(), tmp_path)
    assert check.widths == CHECK_WIDTHS and check.batch == 1 and check.rows == len(CHECK_WIDTHS) * (1 + 32)
    assert (tmp_path / f"width-{Runtime().key(engine)}.json").is_file()
    monkeypatch.setattr("mars_core.runtime.invariance.compare_widths", lambda *a: pytest.fail("kept: not taken again"))
    assert width_check(engine, Runtime(), tmp_path) == check


def test_runtime_names_the_guarantee(invariant_engine, tmp_path, monkeypatch):
    """llamacpp_runtime (prepare on the engine) carries the curve and the width check: guarantee() says identical."""
    monkeypatch.setattr(runtime_cost, "ROUNDS", 1)
    runtime = llamacpp_runtime(invariant_engine, cache_dir=tmp_path)
    assert runtime.cost is not None and runtime.invariant and runtime.live_cost  # priced again by each decode
    assert runtime.guarantee() == "identical to one-token decoding"
    assert runtime.cost.widths == runtime_cost.ENGINE.widths and runtime.cost.batch_sizes == (1,)


def test_verified_with_llamacpp_cost_curve(tiny, engine, tmp_path, monkeypatch):
    """The cost curve is measured once and kept; verified sized by it gives one-token decoding's answer."""
    _, tokenizer, _ = tiny
    monkeypatch.setattr(runtime_cost, "ROUNDS", 1)
    curve = runtime_cost.forward_cost(engine, Runtime(), tmp_path)
    assert curve.widths[0] == 1 and all(s > 0 for s in curve.seconds[0])
    monkeypatch.setattr(runtime_cost, "spot_seconds", lambda m, rt: curve.at(1, runtime_cost.ENGINE.spot_widths))
    monkeypatch.setattr(runtime_cost, "measure_cost", lambda m, rt: pytest.fail("a kept curve that holds is read"))
    assert runtime_cost.forward_cost(engine, Runtime(), tmp_path) == curve

    ver = generate(engine, tokenizer, PROMPTS[0], strategy="verified", max_new_tokens=24, runtime=Runtime(cost=curve))
    ar = generate(engine, tokenizer, PROMPTS[0], strategy="ar", max_new_tokens=24)
    assert ver.generated_tokens == ar.generated_tokens


EACH_TOKEN_A_FORWARD = CostCurve.from_function(lambda b, w: 0.01 * w)  # no width pays: w tokens cost w forwards
FREE_WIDTH = CostCurve.from_function(lambda b, w: 0.01)  # every width pays


def fed_widths(engine, monkeypatch) -> list[int]:
    """The tokens each of the engine's forwards is fed from now on (the list grows as it runs)."""
    widths, forward = [], engine.hidden_states
    monkeypatch.setattr(engine, "hidden_states", lambda ids, *rest: widths.append(ids.shape[1]) or forward(ids, *rest))
    return widths


def test_verified_where_no_width_pays_is_one_token_decoding(tiny, engine, monkeypatch):
    """On a curve where no width pays, verified decoding takes one-token decoding's own step path: the same forwards
    (the prompt, then width 1 each), the same answer, even on the plain engine, whose rows differ with the width;
    where width pays it still drafts (trees wider than a token, fewer forwards)."""
    _, tokenizer, _ = tiny
    widths = fed_widths(engine, monkeypatch)
    ar = generate(engine, tokenizer, PROMPTS[0], strategy="ar", max_new_tokens=24, runtime=Runtime())
    ar_widths = widths[:]
    widths.clear()
    kw = dict(strategy="verified", threshold=0.01, block_size=4, max_new_tokens=24)
    ver = generate(engine, tokenizer, PROMPTS[0], runtime=Runtime(cost=EACH_TOKEN_A_FORWARD), **kw)
    assert ver.token_ids == ar.token_ids and widths == ar_widths and set(widths[1:]) == {1}
    widths.clear()
    drafting = generate(engine, tokenizer, PROMPTS[0], runtime=Runtime(cost=FREE_WIDTH), **kw)
    assert max(widths[1:]) > 1 and drafting.forwards < ar.forwards


@pytest.mark.parametrize("weights, trees", [("f32", True), ("bf16", True), ("q8_0", False)])
def test_the_measured_curves_say_where_width_pays(weights, trees):
    """llama.cpp's curves measured on the 2-core AVX2 EPYC (docs/llamacpp.md): F32 and BF16 feed trees at B = 4, Q8_0,
    where a group of 3 masks after a draft costs 2.8x a token, is one-token decoding (it read 0.93-0.96x of it with
    trees: their bookkeeping, no width that paid)."""
    import json
    from pathlib import Path

    from mars_core.decoding.verified import one_token_only

    record = Path(__file__).resolve().parents[2] / "assets/records/llamacpp/avx2_epyc_b1_tinyblas_same_session.json"
    curve = CostCurve.from_dict(json.loads(record.read_text())["llamacpp"][weights]["cost_curve"])
    assert one_token_only(curve, 1, 4) is not trees
    assert not one_token_only(curve, 1, 1) and not one_token_only(None, 1, 4)  # no masks, no curve: nothing to say


def test_extra_buffers_are_off_only_where_llamacpps_amx_buffer_would_serve(monkeypatch):
    """llama.cpp's extra buffer types stay on unless the build has AMX_INT8 and the CPU AMX tiles (its AMX matmul
    segfaults there on quantized files)."""
    from mars_core.engines.llamacpp import engine as engine_module

    for build, flags, safe in [("CPU : AVX2 = 1 | AMX_INT8 = 1", {"amx_tile"}, False),
                               ("CPU : AVX2 = 1 | AMX_INT8 = 1", {"avx2"}, True),
                               ("CPU : AVX2 = 1 | AVX512 = 1", {"amx_tile"}, True)]:
        monkeypatch.setattr("mars_core.engines.llamacpp.cost.build_features", lambda _lib, b=build: b)
        monkeypatch.setattr(engine_module, "cpu_flags", lambda f=flags: f)
        assert engine_module.extra_buffers_safe(llama_cpp) is safe, (build, flags)


def test_a_quantized_gguf_decodes_on_this_machine(tiny, tmp_path):
    """A Q8_0 file decodes in a process of its own (a crash in llama.cpp would take the test runner with it): on an
    AMX Xeon whose build has AMX_INT8, llama.cpp's AMX buffer segfaulted on the first forward until the engine kept
    weights out of it."""
    import subprocess
    import sys
    from pathlib import Path

    model, tokenizer, _ = tiny
    path = export_gguf(model, tokenizer, tmp_path / "tiny.q8_0.gguf", weights="q8_0")
    code = ("import sys; sys.path.insert(0, 'tests'); from tiny import tiny_tokenizer; "
            "from mars_core.engines.llamacpp import LlamaCppEngine; from mars_core.generate import generate; "
            "tok = tiny_tokenizer(mask_token=True); "
            f"e = LlamaCppEngine({str(path)!r}, n_ctx=512, threads=1, mask_id=tok.mask_token_id); "
            "print(generate(e, tok, 'Count from one to ten:', strategy='ar', max_new_tokens=8).generated_tokens)")
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert int(done.stdout.split()[-1]) > 0


def test_sequence_ids_of_verified_trees():
    """Every path of a verified tree (drafts, groups G_j, siblings e_a with H_a) is one sequence; seq 0 holds the
    pending tokens and the drafts; the mask llama.cpp implies is the mask given."""
    n, P, K, g = 10, 1, 3, 3
    template = tree_template(P, K, (0, 1, 3), g, (2,))
    positions = ([n - 1] + [n + a for a in range(K)] + [n + j + t for j in (0, 1, 3) for t in range(g)]
                 + [n + 1 + t for t in range(1 + g)])
    seqs = plan(template, positions, n - 1)
    assert seqs.chain == P + K and seqs.count == 4  # G_0, G_1, G_3 (seq 0, through d_3) and H_2
    assert seqs.seqs[0] == (0, 1, 2, 3)  # the pending token: on every path
    assert seqs.seqs[1] == (0, 2, 3)  # d_1: under G_1, G_3 and e_2
    assert seqs.seqs[2] == seqs.seqs[3] == (0,)  # d_2, d_3: G_3 only (e_2 is d_2's sibling, not its child)
    assert [s[0] for s in seqs.seqs[4:]] == [1] * g + [2] * g + [0] * g + [3] * (1 + g)
    seen = (template | torch.eye(template.shape[0], dtype=torch.bool)).tolist()
    assert implied_mask(seqs.seqs, positions) == seen


def test_sequence_ids_of_plain_runs():
    """A prefill or a one-token forward is one sequence; the first forward of verified (prompt, then G_0) too."""
    assert plan(torch.ones(1, 1, dtype=torch.bool), [5], 5).seqs == ((0,),)
    run = plan(torch.ones(4, 4, dtype=torch.bool).tril(), [0, 1, 2, 3], 0)
    assert run.seqs == ((0,),) * 4 and run.chain == 4 and run.count == 1
    lone = torch.eye(3, dtype=torch.bool)  # slots that see only themselves and the cache: three roots
    assert plan(lone, [7, 7, 7], 7).seqs == ((0,), (1,), (2,))


def test_masks_llamacpp_cannot_express_raise():
    """A gap in a path's positions, or a slot that sees a non-chain set of fed slots, is a clear ValueError."""
    with pytest.raises(ValueError, match="position"):
        plan(torch.ones(2, 2, dtype=torch.bool).tril(), [0, 2], 0)
    diamond = torch.tensor([[1, 0, 0], [1, 1, 0], [0, 1, 1]], dtype=torch.bool)  # slot 2 sees 1 but not 1's parent
    with pytest.raises(ValueError, match="not a tree"):
        plan(diamond, [0, 1, 2], 0)


def test_cache_after_keep_equals_fresh(tiny, engine):
    """Feed a tree, keep the pending token and one draft, feed again: the logits are those of feeding the kept
    prefix fresh (the other paths' cells are gone, seq 0 ends at the kept draft)."""
    _, tokenizer, _ = tiny
    prompt = ids_of(tokenizer, PROMPTS[2])
    n = prompt.shape[1]
    cache = engine.new_cache()
    chain(engine, cache, prompt[:, :-1], 0)
    template = tree_template(1, 2, (0, 2), 3)  # pending, d_1, d_2, G_0, G_2
    ids = torch.tensor([[prompt[0, -1].item(), 7, 9] + [tokenizer.mask_token_id] * 6])
    positions = torch.tensor([[n - 1, n, n + 1, n, n + 1, n + 2, n + 2, n + 3, n + 4]])
    engine.hidden_states(ids, positions, (template | torch.eye(9, dtype=torch.bool))[None], cache)
    cache.keep(2)  # the pending token and d_1
    assert cache.length == n + 1 and cache.next_pos == n + 1
    after = chain(engine, cache, torch.tensor([[11, 12]]), n + 1)
    fresh_cache = engine.new_cache()
    chain(engine, fresh_cache, torch.cat([prompt, torch.tensor([[7]])], 1), 0)
    fresh = chain(engine, fresh_cache, torch.tensor([[11, 12]]), n + 1)
    assert torch.allclose(after, fresh, atol=1e-5, rtol=0)
    assert torch.equal(after.argmax(-1), fresh.argmax(-1))


def test_batch_of_two_is_refused(engine):
    ids = torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="batch 1"):
        engine.hidden_states(ids, torch.arange(3).expand(2, 3), torch.ones(2, 3, 3, dtype=torch.bool),
                             engine.new_cache())


def test_a_twin_is_the_same_engine_again(tiny, engine):
    """twin() (the app's second and third race lanes) keeps every option, the mask token among them, and decodes the
    same answer on its own memory."""
    other = engine.twin()
    assert other.options == engine.options and other.mask_id == engine.mask_id and other.dtype == engine.dtype
    _, tokenizer, _ = tiny
    a = generate(engine, tokenizer, "the cat", strategy="verified", max_new_tokens=8).token_ids
    b = generate(other, tokenizer, "the cat", strategy="verified", max_new_tokens=8).token_ids
    assert a == b


def test_the_engine_names_the_devices_it_runs_on(tiny, engine):
    """backend_devices reads ggml's registry: the CPU is always there, with the name this build gives it; a GPU is
    named only where the build has one, and gpu_layers=0 keeps the engine on the CPU, so the curve's record (the key
    of its file) and the small print name the GPU only when the layers run there."""
    from mars_core.engines.llamacpp.cost import record
    from mars_core.engines.llamacpp.engine import backend_devices

    devices = backend_devices(llama_cpp)
    assert ("CPU" in dict(devices)) and all(name for _, name in devices)
    gpus = [name for kind, name in devices if kind == "GPU"]
    assert engine.gpu == (gpus[0] if gpus else None)
    assert record(engine).get("gpu") == engine.gpu
    cpu_only = LlamaCppEngine(tiny[2], n_ctx=64, threads=1, kv_type="f32", gpu_layers=0)
    assert cpu_only.gpu is None and "gpu" not in record(cpu_only) and cpu_only.options["gpu_layers"] == 0


def test_the_curve_is_keyed_by_the_core(engine, monkeypatch):
    """One CPU name (a VM's "AMD EPYC") on two core generations prices widths apart: the core is in the key."""
    from mars_core import machine
    from mars_core.engines.llamacpp import cost

    monkeypatch.setattr(machine, "cpu_core", lambda: "Zen 1")
    zen1 = Runtime().key(engine)
    monkeypatch.setattr(machine, "cpu_core", lambda: "Zen 4")
    assert Runtime().key(engine) != zen1 and cost.record(engine)["core"] == "Zen 4"


def test_the_curve_is_keyed_by_the_build(engine, monkeypatch, tmp_path):
    """Two builds of one version may take different kernels (LLAMAFILE off: the dot products at every width), so the
    curve and width check of one are never read for the other: the build's features are part of the file's key."""
    from mars_core.engines.llamacpp import cost

    features = cost.build_features(llama_cpp)
    assert "CPU" in features and cost.record(engine)["build"] == features
    here = Runtime().key(engine)
    monkeypatch.setattr(llama_cpp, "llama_print_system_info", lambda: features.replace("LLAMAFILE = 1", "").encode()
                        if "LLAMAFILE = 1" in features else (features + " | LLAMAFILE = 1").encode())
    assert Runtime().key(engine) != here


def test_a_kept_curve_whose_shape_moved_is_timed_again(engine, monkeypatch, tmp_path):
    """The planner reads t(w) / t(1); a kept engine curve whose shape is off by the drift factor either way from
    forwards timed now (kept on another host of one CPU model, or timed under load) is timed again and rewritten;
    within it, it is read (runtime/cost.py's one rule for kept curves, with the engine's Timing)."""
    from mars_core.runtime import timing

    plan = runtime_cost.ENGINE
    kept = CostCurve((1,), (1, 4, 8), ((0.020, 0.032, 0.039),), {})  # 1.6x at 4, 1.93x at 8
    fresh = CostCurve((1,), plan.widths, ((0.02,) * len(plan.widths),), {})
    assert plan.spot_widths == (1, 4, 8) and plan.drift == 1.2
    timed = []
    monkeypatch.setattr(timing, "machine_busy", lambda: False)
    monkeypatch.setattr(runtime_cost, "machine_busy", lambda: False)
    monkeypatch.setattr(runtime_cost, "measure_cost", lambda m, rt: timed.append(1) or fresh)
    path = tmp_path / f"{Runtime().key(engine)}-{plan.kept_as}.json"
    path.write_text(kept.to_json())

    monkeypatch.setattr(runtime_cost, "spot_seconds", lambda m, rt: [0.020, 0.036, 0.045])  # 1.8x, 2.25x: within
    assert runtime_cost.forward_cost(engine, Runtime(), tmp_path) == kept and not timed
    for now in ([0.020, 0.030, 0.050], [0.020, 0.022, 0.030]):  # 2.5x at 8 (dearer), then 1.1x at 4 (cheaper)
        path.write_text(kept.to_json())
        monkeypatch.setattr(runtime_cost, "spot_seconds", lambda m, rt, now=now: now)
        assert runtime_cost.forward_cost(engine, Runtime(), tmp_path) == fresh
        assert CostCurve.from_json(path.read_text()) == fresh  # rewritten
    assert len(timed) == 2
    path.write_text("{not json")  # a damaged file is measured again
    assert runtime_cost.forward_cost(engine, Runtime(), tmp_path) == fresh and len(timed) == 3


def test_spot_seconds_times_real_forwards(engine):
    now = runtime_cost.spot_seconds(engine, Runtime())
    assert len(now) == len(runtime_cost.ENGINE.spot_widths) and all(0 < s < 5 for s in now)
