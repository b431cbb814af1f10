"""mars-train end to end on a tiny saved model: flags, recipes, resume, LoRA, and accelerate launch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from mars_core.training.cli import lora_targets, parse_args
from mars_core.training.mars_config import MarsConfig
from mars_core.training.sft_config import SFTConfig

from tiny import tiny_qwen2, tiny_tokenizer

REPO = Path(__file__).resolve().parents[2]
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"},
     {"role": "assistant", "content": "Paris is the capital of France."}],
    [{"role": "user", "content": "List three colours"}, {"role": "assistant", "content": "red, green, blue."}],
    [{"role": "user", "content": "Count from one to ten"}, {"role": "assistant", "content": "1, 2, 3, 4, 5."}],
] * 2


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> dict[str, Path]:
    """A tiny Qwen2 + tokenizer saved with save_pretrained, and a 6-line chat JSONL."""
    root = tmp_path_factory.mktemp("cli")
    tokenizer = tiny_tokenizer(mask_token=True)
    model_dir = root / "model"
    tiny_qwen2(len(tokenizer)).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    data = root / "train.jsonl"
    data.write_text("".join(json.dumps({"messages": m}) + "\n" for m in CHATS))
    return {"root": root, "model": model_dir, "data": data}


def environment() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env.pop("ACCELERATE_USE_CPU", None)
    return env


def run(args: list[str], prefix: list[str] | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run `python -m mars_core.train ARGS` (or PREFIX ARGS) and fail with its output if it fails."""
    command = (prefix or [sys.executable, "-m", "mars_core.train"]) + args
    done = subprocess.run(command, cwd=REPO, env=environment(), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done


def common(ws: dict[str, Path], out: Path) -> list[str]:
    return [
        "--model", str(ws["model"]), "--data", str(ws["data"]), "--output_dir", str(out),
        "--logging_steps", "1", "--disable_tqdm", "true",
    ]


def state(folder: Path) -> dict:
    return json.loads((folder / "trainer_state.json").read_text())


def test_help(capsys) -> None:
    """mars-train --help lists the method's, LoRA's and the Trainer's flags (in-process: the runs below start the
    command itself)."""
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--method", "--block_size", "--ar_weight", "--lora_r", "--resume", "--merge", "--learning_rate"):
        assert flag in out


def test_parse_args(tmp_path) -> None:
    script, config = parse_args(["--data", "d.jsonl", "--block_size", "8", "--output_dir", str(tmp_path)])
    assert isinstance(config, MarsConfig) and config.block_size == 8 and script.method == "mars"
    script, config = parse_args(["--method", "sft", "--data", "d.jsonl", "--output_dir", str(tmp_path)])
    assert isinstance(config, SFTConfig) and not isinstance(config, MarsConfig)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"data: d.jsonl\noutput_dir: {tmp_path}\nblock_size: 8\nar_weight: 0.5\nlora_r: 4\n")
    script, config = parse_args([str(recipe), "--block_size", "16"])  # the flag overrides the file
    assert (config.block_size, config.ar_weight, script.lora_r) == (16, 0.5, 4)
    (tmp_path / "bad.json").write_text(json.dumps({"data": "d.jsonl", "blok_size": 8}))
    with pytest.raises(SystemExit):
        parse_args([str(tmp_path / "bad.json")])
    with pytest.raises(SystemExit):
        parse_args(["--output_dir", str(tmp_path)])  # no --data
    assert lora_targets("all-linear") == "all-linear" and lora_targets("q_proj, v_proj") == ["q_proj", "v_proj"]


@pytest.mark.parametrize("method", ["mars", "sft"])
def test_run_then_resume(workspace, method: str) -> None:
    out = workspace["root"] / f"run-{method}"
    if method == "mars":  # flags on the command line
        first = common(workspace, out) + ["--per_device_train_batch_size", "2", "--save_steps", "2"]
    else:  # a YAML recipe, overridden by flags
        recipe = workspace["root"] / "sft.yaml"
        recipe.write_text(
            f"method: sft\nmodel: {workspace['model']}\ndata: {workspace['data']}\noutput_dir: {out}\n"
            "per_device_train_batch_size: 2\nsave_steps: 2\nlogging_steps: 1\nmax_steps: 50\ndisable_tqdm: true\n"
        )
        first = [str(recipe)]
    run(first + ["--max_steps", "2"])
    assert state(out)["global_step"] == 2
    saved = AutoTokenizer.from_pretrained(out)
    assert saved.mask_token == "<|reserved_1|>"
    assert AutoModelForCausalLM.from_pretrained(out).config.vocab_size == len(saved)
    recipe_out = json.loads((out / "mars_training.json").read_text())
    assert recipe_out["script"]["method"] == method and ("block_size" in recipe_out) == (method == "mars")
    logs = [h for h in state(out)["log_history"] if "loss" in h]
    assert ("loss_noisy" in logs[0]) == (method == "mars")

    checkpoint_state = (out / "checkpoint-2" / "trainer_state.json").read_bytes()
    optimizer_mtime = (out / "checkpoint-2" / "optimizer.pt").stat().st_mtime_ns
    run(first + ["--max_steps", "4", "--resume"])
    assert state(out)["global_step"] == 4 and (out / "checkpoint-4").is_dir()
    # Resumed, not restarted: checkpoint-2 was read, never written again.
    assert (out / "checkpoint-2" / "trainer_state.json").read_bytes() == checkpoint_state
    assert (out / "checkpoint-2" / "optimizer.pt").stat().st_mtime_ns == optimizer_mtime


def test_lora_run_with_merge(workspace) -> None:
    from peft import PeftModel

    out = workspace["root"] / "lora"
    run(common(workspace, out) + [
        "--lora_r", "4", "--merge", "--max_steps", "3", "--learning_rate", "1e-2",
        "--per_device_train_batch_size", "2", "--save_strategy", "no",
    ])
    assert (out / "adapter" / "adapter_config.json").is_file()
    assert not (out / "adapter_config.json").exists()  # the top folder holds plain merged weights
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.mask_token == "<|reserved_1|>"
    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    base = AutoModelForCausalLM.from_pretrained(workspace["model"]).eval()
    # lora_train_mask_embedding (on by default): the mask token's embedding row trained, and no other row.
    changed = (merged.get_input_embeddings().weight != base.get_input_embeddings().weight).any(dim=1)
    assert changed.nonzero().flatten().tolist() == [tokenizer.mask_token_id]
    ids = torch.tensor([[1, 50, 60, 70, 80, 2]])
    with torch.no_grad():
        base_logits = base(input_ids=ids).logits
        adapted = PeftModel.from_pretrained(base, out / "adapter").eval()
        adapter_logits = adapted(input_ids=ids).logits
        merged_logits = merged(input_ids=ids).logits
    torch.testing.assert_close(merged_logits, adapter_logits, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(merged_logits, base_logits, atol=1e-3)  # training changed the model


def test_init_adapter_continues_an_adapter(workspace) -> None:
    """--init_adapter starts the LoRA from a saved adapter: with a zero learning rate the saved adapter is the same
    weights (rank, targets, the mask-token row), and a real run moves them."""
    from safetensors.torch import load_file

    first = workspace["root"] / "lora-first"
    run(common(workspace, first) + ["--lora_r", "4", "--max_steps", "2", "--learning_rate", "1e-2",
                                    "--per_device_train_batch_size", "2", "--save_strategy", "no"])
    still = workspace["root"] / "lora-still"
    run(common(workspace, still) + ["--init_adapter", str(first), "--max_steps", "1", "--learning_rate", "0",
                                    "--per_device_train_batch_size", "2", "--save_strategy", "no"])
    moved = workspace["root"] / "lora-moved"
    run(common(workspace, moved) + ["--init_adapter", str(first), "--max_steps", "2", "--learning_rate", "1e-2",
                                    "--per_device_train_batch_size", "2", "--save_strategy", "no"])
    before, after, trained = (load_file(f / "adapter_model.safetensors") for f in (first, still, moved))
    assert set(before) == set(after) == set(trained) and any("trainable_tokens" in k for k in before)
    for key in before:
        torch.testing.assert_close(after[key].float(), before[key].float())
    assert any(not torch.allclose(trained[k].float(), before[k].float()) for k in before)


ACCELERATE = [
    sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
    "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "mars_core.train",
]


@pytest.mark.parametrize("method", ["mars", "sft"])
def test_accelerate_launch_two_processes(workspace, method: str) -> None:
    """Two data-parallel CPU processes (mars-train turns on ACCELERATE_USE_CPU when there is no accelerator)."""
    out = workspace["root"] / f"accelerate-{method}"
    args = common(workspace, out) + [
        "--method", method, "--max_steps", "2", "--per_device_train_batch_size", "1", "--save_strategy", "no",
        "--eval_data", str(workspace["data"]),
    ]
    run(args, prefix=ACCELERATE, timeout=400)
    final = state(out)
    assert final["global_step"] == 2
    # 6 chats, 1 per process per step: two processes cover 2 chats a step, so 2 steps = 4/6 of an epoch.
    assert final["epoch"] == pytest.approx(4 / 6, abs=1e-3)
    assert (out / "model.safetensors").is_file() and AutoTokenizer.from_pretrained(out).mask_token is not None
    evaluation = json.loads((out / "eval_results.json").read_text())
    assert evaluation["eval_loss"] > 0 and ("eval_loss_noisy" in evaluation) == (method == "mars")
    if method == "mars":
        # Same first global batch as one process with batch 2: the token-count normalisation over processes
        # (num_items_in_batch × num_processes, averaged by DDP) must give the same loss.
        single = workspace["root"] / "single-mars"
        run(common(workspace, single) + ["--max_steps", "1", "--per_device_train_batch_size", "2",
                                         "--save_strategy", "no"])
        first_ddp = next(h for h in final["log_history"] if "loss" in h)
        first_single = next(h for h in state(single)["log_history"] if "loss" in h)
        assert first_ddp["loss"] == pytest.approx(first_single["loss"], rel=1e-4)
