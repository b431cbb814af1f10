import json
import subprocess
import sys

import pytest
import torch

from mars_core import VerifiedConfig
from mars_core.evaluation.bench import METHODS, bench, bench_table, interleaved, main
from mars_core.runtime import CostCurve
from mars_core.runtime.linear import packing_pays

PROMPTS = ["Count from one to ten", "What is the capital of France?", "hello"]
RECORDS = [{"prompt": p, "category": c} for p, c in zip(PROMPTS, ["counting", "factual", "counting"])]


def test_bench_rows_cover_every_configuration(model, tokenizer):
    rows = bench(model, tokenizer, RECORDS, batch_sizes=(1, 2), block_sizes=(2, 4), thresholds=(1.0, 0.3),
                 max_new_tokens=8, repeats=1, progress=False)
    per_category = {}
    for r in rows:
        per_category.setdefault((r.method, r.batch_size, r.block_size, r.threshold), {})[r.category] = r
    for (_, bs, _, _), parts in per_category.items():  # "all" sums the categories; "predictable" sums lists, ...
        if bs == 2:  # "factual" has one prompt: batches of 2 mix categories and only "all" is reported
            assert set(parts) == {"all"}
            continue
        assert set(parts) == {"all", "predictable", "counting", "factual"}  # factual is neither predictable nor open
        assert parts["all"].generated_tokens == parts["counting"].generated_tokens + parts["factual"].generated_tokens
        assert parts["all"].seconds == pytest.approx(parts["counting"].seconds + parts["factual"].seconds)
        assert parts["predictable"].seconds == parts["counting"].seconds
        assert parts["predictable"].generated_tokens == parts["counting"].generated_tokens
    rows = [r for r in rows if r.category == "all"]
    keys = {(r.method, r.batch_size, r.block_size, r.threshold) for r in rows}
    assert ("hf_prompt_lookup", 1, None, None) in keys
    assert not any(m == "hf_prompt_lookup" and b == 2 for m, b, _, _ in keys)  # batch 1 only in transformers
    assert ("mars_block", 2, 4, 0.3) in keys and ("mars_sliding", 1, 2, 1.0) in keys
    assert ("mars_verified", 2, 4, 0.3) in keys  # verified rows use their own draft thresholds
    assert ("mars_verified_siblings", 2, 4, 0.3) in keys  # verified with siblings, to compare
    assert len(rows) == 2 * (1 + 1 + 2 * 2 * 2 + 2 + 2) + 1
    for r in rows:
        assert r.generated_tokens == 3 * 8  # every method decodes every prompt to max_new_tokens (no EOS here)
        assert r.seconds > 0 and r.tokens_per_second > 0 and r.speedup_vs_hf_generate > 0
        if r.method in ("ar", "hf_generate") or r.threshold == 1.0:
            assert r.tokens_per_forward == 1.0 and r.steps_per_forward == 1.0
        if r.method.startswith("mars_"):  # within a batch, a forward lasts until its slowest sample, so
            # steps/forward <= tokens/forward per batch; summed over a ragged last batch (3 prompts at 2) it need not be
            deepest = max(r.block_size - 1, VerifiedConfig().lookup_drafts) + 1  # verified: a lookup chain + bonus
            most = deepest if r.method.startswith("mars_verified") else r.block_size
            assert 1.0 <= r.steps_per_forward <= most
            if r.batch_size == 1:
                assert r.steps_per_forward == pytest.approx(r.tokens_per_forward)
    assert all(r.speedup_vs_hf_generate == 1.0 for r in rows if r.method == "hf_generate")
    for r in rows:  # batched answers are one-by-one answers (fp32 here), for every method, lossy ones included
        assert r.same_as_batch_1 == (1.0 if r.batch_size > 1 and r.method != "hf_prompt_lookup" else None), r
    for r in rows:  # lossless methods answer exactly what generate answers (fp32 here)
        if r.method in ("hf_generate", "hf_prompt_lookup", "ar", "mars_verified") or r.threshold == 1.0:
            assert r.same_as_generate == 1.0, r
    for r in rows:  # the bound exists for MARS rows of fixed width: steps/forward × t(1-token) / t(B-token forward)
        assert (r.bound is not None) == (r.method in ("mars_sliding", "mars_block"))
        if r.bound is not None:
            assert r.bound > 0  # its size is a timing ratio: no bound on it here, the machine may be busy
            if r.threshold == 1.0:  # one token per forward: nothing to gain, nothing fed beyond AR
                assert r.bound == 1.0
            assert r.speedup_over_bound == pytest.approx(r.speedup_vs_hf_generate / r.bound)
    assert "mars_sliding" in bench_table(rows)


def test_bench_interleaves_repeats_across_configurations(model, tokenizer, monkeypatch):
    """Round r runs every configuration once before round r+1: drift on a shared machine hits every method alike."""
    import mars_core.evaluation.bench as bench_module

    order, real = [], bench_module.time_pass
    monkeypatch.setattr(bench_module, "time_pass", lambda runner, *a: order.append(runner) or real(runner, *a))
    rows = bench(model, tokenizer, [{"prompt": p} for p in PROMPTS], methods=("hf_generate", "mars_verified"),
                 batch_sizes=(1, 2), thresholds=(1.0,), max_new_tokens=4, repeats=3, progress=False)
    jobs = len(rows)  # one "all" row per configuration and batch size: 2 x 2
    assert jobs == 4 and len(order) == 3 * jobs
    rounds = [order[r * jobs : (r + 1) * jobs] for r in range(3)]
    assert len(set(map(id, rounds[0]))) == jobs  # every configuration once in a round
    assert rounds[0] == rounds[1][::-1] == rounds[2]  # turns go forward and back


def test_the_weight_stream_pairs_each_read_with_the_forwards_taken_beside_it(model, tokenizer, monkeypatch):
    """Each round times a read, then every runtime's forward; a ratio is a round's forward over that round's read
    (a VM's memory speed moves between minutes), and the record keeps the median ratio and the rounds'."""
    import mars_core.evaluation.bench as bench_module
    from mars_core.runtime import Runtime

    times = iter([0.010, 0.020, 0.030, 0.020, 0.025, 0.060])  # per round: the read, then the one forward
    monkeypatch.setattr(bench_module, "median_seconds", lambda f, n, device: next(times))
    monkeypatch.setattr(bench_module, "forward_and_linear_seconds", lambda *a, **k: (next(times), None))
    out = bench_module.weight_stream(model, tokenizer, PROMPTS, {"eager": Runtime()}, rounds=3)
    assert out["forward_1_over_read_rounds_eager"] == [2.0, 0.67, 2.4]  # a round's pair, not the medians'
    assert out["forward_1_over_read_eager"] == 2.0 and out["rounds"] == 3  # the medians' ratio would be 0.8
    assert out["weight_read_ms"] == 25.0 and out["forward_1_ms_eager"] == 20.0
    weights = {id(p): p for p in model.parameters()}.values()
    assert out["weight_bytes"] == sum(p.numel() * p.element_size() for p in weights)


def test_the_weight_stream_sets_the_linear_layers_time_beside_each_read_where_the_rows_kernel_serves(
        model, tokenizer, monkeypatch):
    """Where a runtime's linear layers run on the rows kernel, each round also takes its forwards' time in their
    products against that round's read; elsewhere nothing is said of it."""
    import mars_core.evaluation.bench as bench_module
    from mars_core.runtime import Runtime

    class Rows(Runtime):
        rows_linears = True  # as a runtime whose linears the rows kernel serves

    reads = iter([0.010, 0.020])
    forwards = iter([(0.020, 0.012), (0.030, 0.016)])  # per round: the forward, its time in the products
    monkeypatch.setattr(bench_module, "median_seconds", lambda f, n, device: next(reads))
    monkeypatch.setattr(bench_module, "forward_and_linear_seconds", lambda *a, **k: next(forwards))
    monkeypatch.setattr(bench_module, "huge_block", lambda n: torch.zeros(n, dtype=torch.uint8))
    out = bench_module.weight_stream(model, tokenizer, PROMPTS, {"compiled": Rows()}, rounds=2)
    assert out["linear_1_ms_compiled"] == 14.0 and out["linear_1_over_read_compiled"] == 1.0  # 1.2 and 0.8
    assert "linear_1_ms_eager" not in out
    plain = iter([0.010, 0.020])
    monkeypatch.setattr(bench_module, "median_seconds", lambda f, n, device: next(plain))
    monkeypatch.setattr(bench_module, "forward_and_linear_seconds", lambda *a, **k: (next(plain), None))
    assert not any(k.startswith("linear_1") for k in bench_module.weight_stream(
        model, tokenizer, PROMPTS, {"eager": Runtime()}, rounds=1))


def test_the_linear_time_is_read_around_the_forwards_timed(model, tokenizer):
    """forward_and_linear_seconds reads the rows kernel's clock around the very forwards it times (a time in the
    products for a runtime whose linears the kernel serves), and says none for one without the kernel."""
    import copy

    from mars_core.evaluation.bench import forward_and_linear_seconds
    from mars_core.runtime import Runtime, prepare

    assert forward_and_linear_seconds(model, tokenizer, PROMPTS[:1], Runtime(), repeats=3)[1] is None
    served = copy.deepcopy(model).to(torch.bfloat16)
    runtime = prepare(served, check=False, measure_cost=False)
    if not runtime.rows_linears:
        pytest.skip("the rows kernel does not serve bf16 linear layers here")
    seconds, linear = forward_and_linear_seconds(served, tokenizer, PROMPTS[:1], runtime, repeats=3)
    assert seconds > 0 and linear > 0


def test_interleaved_takes_every_job_on_a_category_before_the_next():
    """Jobs alternate category by category (a few prompts each), serpentine; a job batched across categories
    ("all" only) takes its turn with the others that have an "all" part."""
    units = interleaved(2, [{"lists": 0, "chat": 0}, {"lists": 0, "chat": 0}, {"all": 0}])
    assert units[:4] == [(0, "lists", 0), (0, "lists", 1), (0, "chat", 1), (0, "chat", 0)]
    assert units[4:6] == [(0, "all", 2), (1, "lists", 1)]
    assert sorted(units) == sorted({(r, c, k) for r in range(2) for k, cats in
                                    enumerate([("lists", "chat"), ("lists", "chat"), ("all",)]) for c in cats})


def test_cli_help():
    out = subprocess.run([sys.executable, "-m", "mars_core.bench", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--batch-sizes" in out.stdout and "--quick" in out.stdout


def test_cli_runs_on_a_saved_model(tmp_path, model, tokenizer, capsys):
    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    out = tmp_path / "tables" / "bench.json"  # a folder that does not exist yet: mars-bench makes it
    main(["--model", str(tmp_path / "m"), "--quick", "--dtype", "fp32", "--methods", "hf_generate,ar,mars_sliding",
          "--json", str(out), "--plot", str(tmp_path / "speedups.png")])
    data = json.loads(out.read_text())
    assert {r["method"] for r in data["rows"]} == {"hf_generate", "ar", "mars_sliding"}
    assert {r["threshold"] for r in data["rows"]} == {None, 1.0, 0.9}
    assert {"category", "tokens_per_forward", "seconds", "tokens_per_second", "speedup_vs_hf_generate"} <= set(
        data["rows"][0])
    assert (tmp_path / "speedups.png").stat().st_size > 1000  # the plot where --plot asked, none beside the JSON
    assert sorted(p.name for p in out.parent.iterdir()) == ["bench.json"]
    assert data["dtype"] == "float32" and "device" in data
    assert data["peak_rss_mb"] > 50  # the process's peak memory, torch and the model loaded at least
    assert data["graphs"]["failures"] == 0 and "captures" in data["graphs"]  # CUDA graphs (on a CPU: none)
    machine = data["machine"]  # the machine is in the JSON: CPU, the ISA features that matter, threads, torch
    assert machine["cpu"] and isinstance(machine["isa"], list) and machine["threads"] >= 1
    assert machine["torch"] == torch.__version__ and machine["dtype"] == "float32"
    assert data["layout"] == "cost" and data["cost_curve"]["seconds"]  # the curve prepare() measured
    rows_kernel = __import__("mars_core.runtime.rows", fromlist=["rows_kernel"]).rows_kernel()
    # width-invariant and checked: attention by rows (in the rows kernel where this CPU has it)
    rows = ("rows_kernel",) if rows_kernel else ("rows", "rows, a call each")  # a call each: prepare()'s fallback
    assert data["width_check"]["differing"] == 0 and machine["attention"] in rows
    assert machine["rows_kernel"].startswith("serving" if rows_kernel else "not serving")
    assert machine["linear"] == ("onednn_packed" if packing_pays(torch.nn.Linear(2, 2)) else "torch")
    start = data["start"]  # how long until it could decode: no compiled method asked, so no compile
    assert start["cache_at_start"] in ("empty", "kept") and 0 <= start["load_and_prepare_s"] <= start["ready_s"]
    assert "compile_s" not in start
    printed = capsys.readouterr().out
    assert "speedup" in printed and f"machine: {machine['cpu']}" in printed
    assert f"ready to decode in {start['ready_s']:.0f} s" in printed
    assert set(METHODS) >= {r["method"] for r in data["rows"]}


def test_a_start_is_cold_while_mars_cache_holds_nothing(tmp_path, monkeypatch):
    from mars_core.evaluation.bench import cache_empty

    monkeypatch.setenv("MARS_CACHE", str(tmp_path / "cache"))
    assert cache_empty()  # no folder yet
    (tmp_path / "cache").mkdir()
    assert cache_empty()
    (tmp_path / "cache" / "kernels").mkdir()
    assert not cache_empty()


def test_cli_takes_a_cost_curve_for_a_reproducible_layout(tmp_path, model, tokenizer):
    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    curve = CostCurve.from_function(lambda b, w: 0.01 * w)
    (tmp_path / "cost.json").write_text(curve.to_json())
    out = tmp_path / "bench.json"
    main(["--model", str(tmp_path / "m"), "--quick", "--dtype", "fp32", "--methods", "hf_generate,mars_verified",
          "--cost", str(tmp_path / "cost.json"), "--json", str(out)])
    data = json.loads(out.read_text())
    assert CostCurve.from_dict(data["cost_curve"]) == curve
    again = tmp_path / "again.json"  # an earlier run's JSON gives its curve to the next run
    main(["--model", str(tmp_path / "m"), "--quick", "--dtype", "fp32", "--methods", "mars_verified",
          "--cost", str(out), "--json", str(again)])
    assert CostCurve.from_dict(json.loads(again.read_text())["cost_curve"]) == curve
    main(["--model", str(tmp_path / "m"), "--quick", "--dtype", "fp32", "--methods", "mars_verified",
          "--layout", "fixed", "--json", str(out)])
    assert json.loads(out.read_text())["cost_curve"] is None
    with pytest.raises(SystemExit, match="holds no cost curve"):
        main(["--model", str(tmp_path / "m"), "--quick", "--methods", "mars_verified", "--cost", str(out)])
    main(["--model", str(tmp_path / "m"), "--quick", "--dtype", "fp32", "--methods", "hf_generate", "--no-pack",
          "--json", str(out)])
    assert json.loads(out.read_text())["machine"]["linear"] == "torch"  # torch's own kernels, to compare


def test_warm_up_feeds_every_batch_it_will_time_where_graphs_are_captured_or_hf_compiles():
    """On a GPU (a CUDA graph per width) and for hf_compiled (a compile per prompt length) the warm-up is a whole pass
    over the timed batches, untimed; elsewhere 4 tokens of one batch. A _static row's runtime is one per runtime, so
    every call of a run replays the graphs the first captured."""
    from types import SimpleNamespace

    from mars_core.evaluation.bench import variants, warm_up
    from mars_core.runtime import Runtime

    calls = []
    runner = lambda model, tokenizer, batch, n, runtime: calls.append((tuple(batch), n))  # noqa: E731
    batches = {"a": [["p1", "p2"], ["p3"]], "b": [["p4"]]}
    everything = [(("p1", "p2"), 64), (("p3",), 64), (("p4",), 64)]
    for device, method, want in [("cuda", "mars_verified", everything), ("cpu", "hf_compiled", everything),
                                 ("cpu", "mars_verified", [(("p1", "p1"), 4)])]:
        calls.clear()
        warm_up(runner, method, SimpleNamespace(device=torch.device(device)), None, batches, max_new=64,
                runtime=Runtime(), first=["p1", "p1"])
        assert calls == want, (device, method)
    static, runtime = variants(None)["_static"], Runtime()
    assert static(runtime) is static(runtime) and static(runtime).static


@pytest.mark.skipif(__import__("mars_core.runtime.grid", fromlist=["x"]).int8_serves() is not None,
                    reason="no int8 path here")
def test_served_bytes_count_an_int8_copy_at_its_own_bytes(tokenizer, tmp_path):
    """On 8-bit weights a forward reads each packed layer's share of its int8 copy (about 1.03 bytes a weight: 8 bits
    and the scales' exponents), every other parameter at its own bytes."""
    from mars_core.evaluation.bench import served_bytes
    from mars_core.runtime import ATTENTION, grid, prepare
    from mars_core.runtime.linear import linear_groups

    from tiny import tiny_llama

    torch.manual_seed(0)
    model = tiny_llama(len(tokenizer), attn_implementation=ATTENTION).to(torch.bfloat16)
    grid.round_to_grid(model)
    runtime = prepare(model, cache_dir=tmp_path, measure_cost=False)
    packed = {id(lin.weight): lin.weight for group in linear_groups(model) for lin in group}
    others = sum(p.numel() * 2 for p in model.parameters() if id(p) not in packed)
    weights = sum(w.numel() for w in packed.values())
    assert weights <= served_bytes(model, runtime) - others <= weights * 264 / 256 * 1.25  # padding to 8s and 32s
