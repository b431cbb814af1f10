"""python app.py --engine llama.cpp: the choice reaches the race (its three lanes decode on llama.cpp engines of the
served checkpoint's GGUF, the small print names the engine), a bad choice gets one message; no browser."""

from __future__ import annotations

import pytest

import app
from studio import engine, lanes, models
from studio.race import loop as race_loop
from studio.race import state as race_state

from tiny import tiny_llama, tiny_tokenizer

pytest.importorskip("llama_cpp")


@pytest.fixture()
def checkpoint(tmp_path, monkeypatch):
    """A tiny Llama MARS checkpoint in a folder; the GGUF and the measured curves go to a fresh cache."""
    monkeypatch.setenv("MARS_CACHE", str(tmp_path / "cache"))
    tokenizer = tiny_tokenizer(mask_token=True)
    tiny_llama(len(tokenizer), max_position_embeddings=512).save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    return str(tmp_path / "m")


@pytest.fixture()
def launched(checkpoint, monkeypatch):
    """app.main with --engine llama.cpp on the checkpoint, invariant engines (the page not built); models and pools
    restored after."""
    monkeypatch.setattr(app, "build_ui", lambda: type("Demo", (), {"launch": lambda self, **kw: None})())
    monkeypatch.setattr(lanes, "FRAME_SECONDS", 0.0)
    monkeypatch.setattr(models, "CONFIG", models.CONFIG)
    monkeypatch.delenv("SPACE_ID", raising=False)
    saved = [dict(t) for t in (models.MODELS, models.RUNTIMES, models.PREPARING, engine.POOLS)]
    app.main(["--no-preload", "--model", checkpoint, "--engine", "llama.cpp", "--llamacpp-weights", "f32",
              "--llamacpp-threads", "1", "--llamacpp-invariant"])
    yield checkpoint
    for table, before in zip((models.MODELS, models.RUNTIMES, models.PREPARING, engine.POOLS), saved):
        table.clear()
        table.update(before)


def test_the_race_decodes_on_llamacpp(launched, monkeypatch):
    from mars_core import generate

    config = models.CONFIG
    assert (config.engine, config.llamacpp_weights, config.llamacpp_threads) == ("llama.cpp", "f32", 1)
    assert config.llamacpp_invariant
    build = [models.BUILD] if models.rows.must_build() else []  # our kernel, where no earlier test built it here
    assert [what for what, _ in models.stages(launched)] == [engine.STAGE, *build, models.LOAD, models.PREPARE]
    frames = list(race_loop.run_race("Count to five.", 4, 12, race_loop.lane_controls(0.9),
                                     race_state.RaceSession()))
    trace = frames[-1][-1]
    assert trace["status"] == "done" and all(trace[k]["tokens"] > 0 for k in ("ar", "mars", "verified"))
    pool = engine.POOLS[launched]
    assert len(pool.idle) == 3 and all(e.forwards > 0 for e in pool.idle)  # a llama.cpp engine per lane, given back
    assert pool.runtime.cost is not None and engine.race_runtime(launched) is pool.runtime  # llama.cpp's own curve
    ar = generate(pool.idle[0], pool.tokenizer, "Count to five.", strategy="ar", max_new_tokens=12)
    assert trace["ar"]["ids"] == ar.token_ids[0]  # the AR lane is llama.cpp's one-token decoding
    assert trace["verified"]["ids"] == ar.token_ids[0]  # invariant engines: verified is AR bit for bit, and says so
    assert pool.runtime.invariant and "identical to one-token decoding" in frames[-1][2]
    stats = frames[-1][6]
    assert "Measured on this shared CPU on llama.cpp F32, 1 thread," in stats
    assert "llama.cpp F32" in app.intro_markdown()
    # on a GPU build the small print names the GPU, not this CPU's threads
    assert engine.gpu() is None
    monkeypatch.setattr(pool.first, "gpu", "NVIDIA H200")
    assert engine.gpu() == "NVIDIA H200" and engine.label() == "llama.cpp F32 on NVIDIA H200"
    frames = list(race_loop.run_race("Count to five.", 4, 4, race_loop.lane_controls(0.9),
                                     race_state.RaceSession()))
    assert "Measured on llama.cpp F32 on NVIDIA H200, each lane" in frames[-1][6]
    assert "shared CPU" not in frames[-1][6]
    # a CPU build without tinyBLAS (other kernels, other speeds) says so
    import llama_cpp

    monkeypatch.setattr(pool.first, "gpu", None)
    features = llama_cpp.llama_print_system_info().decode()
    assert engine.label() == ("llama.cpp F32, 1 thread" if "LLAMAFILE = 1" in features else
                              "llama.cpp F32, 1 thread, tinyBLAS off")
    monkeypatch.setattr(llama_cpp, "llama_print_system_info", lambda: features.replace("LLAMAFILE = 1", "").encode())
    assert engine.label() == "llama.cpp F32, 1 thread, tinyBLAS off"


@pytest.mark.parametrize("argv, said", [
    (["--engine", "vulkan"], "--engine must be one of torch, llama.cpp"),
    (["--engine", "llama.cpp", "--llamacpp-weights", "q4_k"], "--llamacpp-weights must be one of f32, bf16, q8_0"),
    (["--engine", "llama.cpp", "--ar-model", "other"], "--ar-model is for --engine torch"),
])
def test_a_bad_engine_choice_gets_one_message(argv, said, capsys, monkeypatch):
    monkeypatch.setattr(models, "CONFIG", models.CONFIG)
    with pytest.raises(SystemExit):
        app.main(["--no-preload", *argv])
    assert said in capsys.readouterr().err


def test_torch_stays_the_default(monkeypatch):
    monkeypatch.setattr(models, "CONFIG", models.CONFIG)
    monkeypatch.setattr(app, "build_ui", lambda: type("Demo", (), {"launch": lambda self, **kw: None})())
    app.main(["--no-preload", "--model", "tiny"])
    assert models.CONFIG.engine == "torch" and engine.label() == "" and not engine.on_llamacpp()
    assert engine.check_engine("LlamaCpp", "bf16") == "llama.cpp"
