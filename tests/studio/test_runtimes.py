"""Every tab on either runtime the app serves (the default, and --static-shapes: fixed widths, every row reading the
whole cache): the same decoders, verified giving one-token decoding's answer, the Train tab's race before and after
training on the same path."""

from __future__ import annotations

import pytest

from mars_core import DecodeControl, generate
from mars_core.runtime import ATTENTION, prepare
from studio import explorer, lanes, models
from studio.batch import state as batch_state
from studio.batch import tab as batch
from studio.race import loop as race_loop
from studio.race import state as race_state
from studio.train import loop as train_loop
from studio.train import state as train_state
from studio.train.state import TrainSession
from studio.walkthrough import tab as walkthrough
from studio.walkthrough import verified as walk_verified

from tiny import tiny_llama, tiny_qwen2, tiny_tokenizer

PROMPT = "Count from one to ten"


@pytest.fixture(params=[False, True], ids=["default", "static-shapes"])
def served_on(request, monkeypatch):
    """A tiny model with the attention by rows, served on the default runtime or a static one (and so prepared)."""
    tok = tiny_tokenizer(mask_token=True)
    model = tiny_qwen2(len(tok), attn_implementation=ATTENTION, max_position_embeddings=1024)
    monkeypatch.setitem(models.MODELS, "tiny", (model, tok))
    monkeypatch.setitem(models.RUNTIMES, "tiny", prepare(model, measure_cost=False, static=request.param))
    monkeypatch.setattr(models, "CONFIG", models.AppConfig(model="tiny", static=request.param))
    monkeypatch.setattr(lanes, "FRAME_SECONDS", 0.0)
    yield request.param
    assert models.TRACKER.active == 0


def test_the_race_gives_verified_ar_s_answer(served_on):
    assert models.get_runtime("tiny").static == served_on and models.get_runtime("tiny").invariant
    keep: dict = {}
    controls = {k: DecodeControl(threshold=t) for k, t in (("ar", 1.0), ("mars", 0.9), ("verified", 0.3))}
    frames = list(race_loop.run_race(PROMPT, 4, 16, controls, race_state.RaceSession(), keep=keep))
    assert keep["verified"].ids == keep["ar"].ids and keep["exact"] and len(keep["ar"].ids) == 16
    assert "identical to one-token decoding" in frames[-1][2]


def test_the_batch_at_tau_one_is_ar(served_on):
    outputs = list(batch.batch_race("\n".join([PROMPT, "List three colours", "hello", "What is 2 + 2?"]), 1.0, 4, 12,
                                    batch_state.BatchSession()))
    trace = outputs[-1][-1]
    assert trace["status"] == "done" and trace["block"]["ids"] == trace["ar"]["ids"]


def test_both_walkthroughs_run(served_on):
    page, walk = walkthrough.walk_decode(PROMPT, 0.3, 4, 16)
    assert sum(s["accepted"] for s in walk.steps) == 16 and "Forward 1 of" in page
    page, fig, walk = walk_verified.walk_verified(PROMPT, 0.05, 4, 16)
    assert "Forward 1 of" in page and "⚠" not in page
    model, tok = models.get_model("tiny")
    want = generate(model, tok, PROMPT, strategy="ar", max_new_tokens=16, runtime=models.get_runtime("tiny")).texts[0]
    assert "".join(t for s in walk.steps for t in s["committed"]) == want


def test_the_explorer_in_verified_mode_keeps_every_answer(served_on):
    fig, table, path, status = explorer.run_sweep("1, 0.3", 4, 12, ["lists"], 2, "verified",
                                                  progress=lambda *a, **k: None)
    assert list(table["exact_match"]) == [1.0, 1.0]


def test_the_train_race_runs_before_and_after_on_the_served_path(served_on, monkeypatch):
    """A training's model is prepared as the served one is (static or not), so the race's two sides, the base before
    training and the trained model after, decode on one path; verified after training gives its AR lane's answer."""
    from mars_core.training import live
    from mars_core.training.corpora import corpus_split

    monkeypatch.setattr(train_loop, "corpus_split", lambda name: corpus_split(name, train=40, held_out=3))
    monkeypatch.setattr(train_loop, "CHECK_TOKENS", 16)
    monkeypatch.setattr(train_loop, "PROBE_TOKENS", 8)
    monkeypatch.setattr(train_loop, "RACE_TOKENS", 12)
    init = live.LiveConfig.__init__
    monkeypatch.setattr(live.LiveConfig, "__init__",
                        lambda self, *a, **kw: init(self, *a, **{**kw, "batch_size": 2, "probe_seconds": 10.0}))
    session = TrainSession()
    frames = list(train_loop.train("counting", "", 4, 5, 1, session))
    trained = train_state.kept(session)
    assert trained is not None, frames[-1][-1]
    assert trained.runtime.static == models.get_runtime(train_state.base_name()).static == served_on
    prompt = trained.held_out[0]["messages"][0]["content"]
    last = list(train_loop.race(prompt, session))[-1]
    assert "before training" in last[-1] and "(AR's answer)" in last[-1].split("after training")[1]


def test_a_compiled_forward_serves_once_compiled_in_the_background(monkeypatch):
    """--compile: the model serves uncompiled while its forward compiles, the status line says so, then the race runs
    on the compiled forward, still giving verified AR's answer, and the small print names it. A compile and a model's
    preparation never overlap (models.PREPARE_LOCK: a load changes the global state a compile's trace guards)."""
    import threading
    import time

    import torch

    tok = tiny_tokenizer(mask_token=True)
    model = tiny_llama(len(tok), attn_implementation=ATTENTION)  # as tests/runtime/test_compiled.py: inductor's
    torch.set_num_threads(1)  # cache then serves one of the two the other's kernels
    monkeypatch.setitem(models.MODELS, "tiny", (model, tok))
    monkeypatch.setitem(models.RUNTIMES, "tiny", prepare(model, measure_cost=False))
    monkeypatch.setattr(models, "CONFIG", models.AppConfig(model="tiny", compile=True))
    monkeypatch.setattr(lanes, "FRAME_SECONDS", 0.0)
    with models.PREPARE_LOCK:  # another model preparing or compiling: this one waits its turn and says so
        models.compile_in_background("tiny")
        time.sleep(0.2)
        waiting = models.COMPILE_WAITING
        assert waiting in models.status_markdown()[0] and waiting in models.forward_note("tiny")
    assert "Compiling" in models.status_markdown()[0] and models.forward_note("tiny").startswith("uncompiled while")
    while models.COMPILING.get("tiny", ("",))[0] == models.COMPILE_WAITING:
        time.sleep(0.01)
    loaded_while: list[bool] = []  # a model asked for now is prepared once the compile has ended
    monkeypatch.setattr(models, "load", lambda name=None: loaded_while.append(models.RUNTIMES["tiny"].compiled is None)
                        or (model, tok))
    for table in (models.MODELS, models.RUNTIMES, models.PREPARING):
        monkeypatch.delitem(table, "other", raising=False)
    monkeypatch.setattr(models, "CONFIG", models.AppConfig(model="tiny"))  # "other" is not compiled once prepared
    loading = threading.Thread(target=models.get_model, args=("other",), daemon=True)
    loading.start()
    began = time.monotonic()
    while "tiny" in models.COMPILING and time.monotonic() - began < 300:
        time.sleep(0.5)
    loading.join(60)
    assert loaded_while == [False]
    assert models.RUNTIMES["tiny"].compiled is not None, models.forward_note("tiny")
    for table in (models.MODELS, models.RUNTIMES, models.PREPARING):
        table.pop("other", None)
    assert models.forward_note("tiny").startswith("compiled") and "Compiling" not in models.status_markdown()[0]
    keep: dict = {}
    controls = {k: DecodeControl(threshold=t) for k, t in (("ar", 1.0), ("mars", 0.9), ("verified", 0.3))}
    frames = list(race_loop.run_race(PROMPT, 4, 16, controls, race_state.RaceSession(), keep=keep))
    assert keep["verified"].ids == keep["ar"].ids and keep["exact"]
    assert any("forward compiled" in str(part) for part in frames[-1])  # the stats' small print


@pytest.mark.parametrize("flavor,name", [("amx", "AMX"), ("avx512_bf16", "AVX512-BF16")])
def test_the_small_print_says_when_linear_layers_run_on_our_rows_kernel(monkeypatch, flavor, name):
    """forward_note adds the kernel, by the instructions it runs on, where a served runtime's linears were packed for
    it, and nothing elsewhere."""
    import torch

    from mars_core.runtime import Runtime
    from mars_core.runtime.linear import ONEDNN, ROWS, Packed

    monkeypatch.setattr(models.rows, "flavor", lambda: flavor)
    weight = torch.zeros(2, 2)
    for kernel, said in ((ROWS, True), (ONEDNN, False)):
        runtime = Runtime(linears={id(weight): Packed(weight, weight, 0, weight.data_ptr(), kernel=kernel)},
                          forward_note="compiled (x)")
        monkeypatch.setitem(models.RUNTIMES, "kernel-note", runtime)
        note = models.forward_note("kernel-note")
        assert note.startswith("compiled (x)") and (f"our {name} kernel" in note) == said, note
