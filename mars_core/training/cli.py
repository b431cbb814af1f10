"""mars-train: MARS (or plain AR SFT) fine-tuning of a causal LM on chat JSONL data.

    mars-train --model PATH_OR_ID --data train.jsonl --output_dir out [--method mars|sft] [TrainingArguments...]
    mars-train recipe.yaml [--any_flag value ...]          # a YAML/JSON file of the same fields; flags override it
    accelerate launch --multi_gpu --num_processes N -m mars_core.train ...   # same flags, data-parallel DDP

On a machine without GPUs that last line still runs N CPU processes with DDP (gloo): mars-train sets
ACCELERATE_USE_CPU itself. (`accelerate launch --cpu --num_processes N` starts only ONE process in accelerate
1.15: its multi-CPU mode needs mpirun.) On CPU, bf16 autocast needs `--use_cpu --bf16`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from transformers import HfArgumentParser, PreTrainedModel, Trainer
from transformers.trainer_utils import get_last_checkpoint

from .data import load_chat_dataset
from .mars_config import MarsConfig
from .mars_trainer import MarsTrainer
from .sft_config import SFTConfig
from .sft_trainer import SFTTrainer

logger = logging.getLogger("mars_core.training")

CONFIG_SUFFIXES = (".yaml", ".yml", ".json")
RECIPE_FILE = "mars_training.json"


@dataclass
class ScriptArguments:
    """What to train on and how to set up the model; the optimisation knobs live in MarsConfig / SFTConfig."""

    method: Literal["mars", "sft"] = field(
        default="mars", metadata={"help": "mars: MARS fine-tuning; sft: plain AR SFT (the paper's control)."}
    )
    model: str | None = field(
        default=None, metadata={"help": "Model folder, .gguf file or hub id (default: mars_core.load's default)."}
    )
    data: str | None = field(default=None, metadata={"help": "Training JSONL, one {\"messages\": [...]} per line."})
    eval_data: str | None = field(default=None, metadata={"help": "Optional evaluation JSONL (same format)."})
    dtype: Literal["fp32", "bf16", "auto"] = field(
        default="fp32",
        metadata={"help": "Weight dtype. bf16 weights are faster but tiny updates can round away; fp32 + --bf16 "
                  "(autocast) is the safe fast choice. auto: bf16 where the hardware has it."},
    )
    trust_remote_code: bool = field(default=False, metadata={"help": "Allow remote code when loading the model."})
    lora_r: int = field(default=0, metadata={"help": "LoRA rank; 0 = full fine-tune."})
    lora_alpha: int | None = field(default=None, metadata={"help": "LoRA alpha (default: 2 * lora_r)."})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout."})
    lora_target_modules: str = field(
        default="all-linear",
        metadata={"help": "Comma-separated module names for LoRA, or all-linear (every linear projection)."},
    )
    lora_layers: int = field(
        default=0,
        metadata={"help": "LoRA on the top N decoder layers only (0: every layer). Without the mask row training too, "
                  "the backward pass then stops at the lowest adapted layer."},
    )
    lora_train_mask_embedding: bool = field(
        default=True,
        metadata={"help": "With LoRA and --method mars: also train the mask token's embedding row (peft "
                  "trainable_token_indices), so the model can learn what a mask slot means."},
    )
    init_adapter: str | None = field(
        default=None,
        metadata={"help": "Start the LoRA from this adapter folder's weights (continue an adapter on new data); its "
                  "rank, targets and trainable token rows replace the --lora_* settings."},
    )
    resume: bool = field(default=False, metadata={"help": "Resume from the last checkpoint in output_dir."})
    merge: bool = field(
        default=False,
        metadata={"help": "With LoRA: save merged full weights in output_dir and the adapter in output_dir/adapter."},
    )

    def __post_init__(self) -> None:
        if self.lora_r < 0:
            raise ValueError(f"lora_r must be >= 0, got {self.lora_r}")


# ----------------------------------------------------------------------------- arguments


def config_class(method: str) -> type[MarsConfig] | type[SFTConfig]:
    """The TrainingArguments subclass for a method."""
    if method not in ("mars", "sft"):
        raise ValueError(f"--method must be 'mars' or 'sft', got {method!r}")
    return MarsConfig if method == "mars" else SFTConfig


def build_parser(method: str = "mars") -> HfArgumentParser:
    """HfArgumentParser over ScriptArguments and the method's config (all TrainingArguments flags included)."""
    return HfArgumentParser(
        (ScriptArguments, config_class(method)),
        prog="mars-train",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """The fields of a YAML or JSON recipe as a dict."""
    text = Path(path).read_text(encoding="utf-8")
    if str(path).lower().endswith(".json"):
        values = json.loads(text)
    else:
        import yaml

        values = yaml.safe_load(text) or {}
    if not isinstance(values, dict):
        raise ValueError(f"{path}: a recipe must be a mapping of field names to values")
    return values


def _peek_method(argv: list[str]) -> str | None:
    """--method from the command line before the full parser exists (it decides the config class)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--method", default=None)
    return pre.parse_known_args(argv)[0].method


def parse_args(argv: list[str] | None = None) -> tuple[ScriptArguments, MarsConfig | SFTConfig]:
    """Flags, or a recipe file (first argument *.yaml/*.yml/*.json) whose values the flags may override."""
    argv = list(sys.argv[1:] if argv is None else argv)
    file_values: dict[str, Any] = {}
    if argv and not argv[0].startswith("-") and argv[0].lower().endswith(CONFIG_SUFFIXES):
        file_values = read_config_file(argv.pop(0))
    method = _peek_method(argv) or file_values.get("method", "mars")
    parser = build_parser(method)
    if file_values:
        known = {action.dest for action in parser._actions}
        unknown = sorted(set(file_values) - known)
        if unknown:
            parser.error(f"unknown field(s) in the recipe file: {', '.join(unknown)}")
        parser.set_defaults(**file_values)  # recipe values become defaults, so command-line flags win
    script, config = parser.parse_args_into_dataclasses(args=argv)
    if script.data is None:
        parser.error("--data is required (a JSONL file of {\"messages\": [...]} lines)")
    return script, config


# ----------------------------------------------------------------------------- model


def lora_targets(spec: str | list[str]) -> str | list[str]:
    """peft target_modules from 'all-linear' or a comma-separated list (a YAML list also works)."""
    if isinstance(spec, list):
        return spec
    names = [s.strip() for s in spec.split(",") if s.strip()]
    return names[0] if names == ["all-linear"] else names


def apply_lora(model: PreTrainedModel, script: ScriptArguments, mask_token_id: int | None = None) -> torch.nn.Module:
    """Wrap the model in a peft LoRA adapter (only the adapter trains, plus the mask token's embedding row if given)."""
    from peft import LoraConfig, get_peft_model

    layers = model.config.num_hidden_layers
    top = min(script.lora_layers, layers) if script.lora_layers > 0 else layers
    targets = lora_targets(script.lora_target_modules)
    if top < layers and isinstance(targets, str):  # peft takes the layers only with module names: those of the layers
        targets = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules()
                          if isinstance(m, torch.nn.Linear) and ".layers." in f".{n}"})
    config = LoraConfig(
        layers_to_transform=list(range(layers - top, layers)) if top < layers else None,
        trainable_token_indices=[mask_token_id] if mask_token_id is not None else None,
        r=script.lora_r,
        lora_alpha=script.lora_alpha if script.lora_alpha is not None else 2 * script.lora_r,
        lora_dropout=script.lora_dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def model_to_train(script: ScriptArguments) -> tuple[torch.nn.Module, Any]:
    """(model, tokenizer) via mars_core.load on the CPU (the Trainer/accelerate place it), without a KV cache or a
    runtime (those are for decoding), LoRA-wrapped if asked."""
    from ..load import load

    model, tokenizer = load(script.model, dtype=script.dtype, device="cpu", trust_remote_code=script.trust_remote_code,
                            attn_implementation="sdpa")  # training decodes nothing: transformers' own attention
    model.config.use_cache = False  # no KV cache in training
    if script.init_adapter:
        from peft import PeftModel

        return PeftModel.from_pretrained(model, script.init_adapter, is_trainable=True), tokenizer
    if script.lora_r > 0:
        train_mask = script.method == "mars" and script.lora_train_mask_embedding
        model = apply_lora(model, script, tokenizer.mask_token_id if train_mask else None)
    return model, tokenizer


# ----------------------------------------------------------------------------- run


def resume_checkpoint(script: ScriptArguments, config: MarsConfig | SFTConfig) -> str | None:
    """The checkpoint to resume from: --resume_from_checkpoint, else with --resume the last one in output_dir."""
    if config.resume_from_checkpoint:
        return config.resume_from_checkpoint
    if not script.resume:
        return None
    last = get_last_checkpoint(config.output_dir) if os.path.isdir(config.output_dir) else None
    if last is None:
        logger.warning("--resume: no checkpoint in %s, starting from scratch", config.output_dir)
    return last


def build_trainer(
    script: ScriptArguments, config: MarsConfig | SFTConfig, model: torch.nn.Module, tokenizer
) -> Trainer:
    """The MarsTrainer or SFTTrainer over the tokenized chat data."""
    train = load_chat_dataset(script.data, tokenizer, config.max_length)
    evaluation = load_chat_dataset(script.eval_data, tokenizer, config.max_length) if script.eval_data else None
    trainer_class = MarsTrainer if script.method == "mars" else SFTTrainer
    return trainer_class(
        model=model, args=config, train_dataset=train, eval_dataset=evaluation, processing_class=tokenizer
    )


def write_recipe(script: ScriptArguments, config: MarsConfig | SFTConfig, folder: str | os.PathLike) -> None:
    """mars_training.json: what produced this checkpoint (method, B, α, mask id, base model, LoRA)."""
    recipe = {"script": asdict(script), "max_length": config.max_length}
    if isinstance(config, MarsConfig):
        recipe.update(block_size=config.block_size, ar_weight=config.ar_weight, mask_token_id=config.mask_token_id)
    Path(folder, RECIPE_FILE).write_text(json.dumps(recipe, indent=2))


def save_final(trainer: Trainer, script: ScriptArguments, config: MarsConfig | SFTConfig) -> None:
    """Save model + tokenizer in output_dir; with LoRA the adapter, or with --merge the merged weights."""
    out = config.output_dir
    if not ((script.lora_r > 0 or script.init_adapter) and script.merge):
        trainer.save_model(out)
        if trainer.is_world_process_zero():
            write_recipe(script, config, out)
        return
    trainer.save_model(os.path.join(out, "adapter"))
    trainer.accelerator.wait_for_everyone()
    if trainer.is_world_process_zero():
        merged = trainer.accelerator.unwrap_model(trainer.model).merge_and_unload()
        merged.save_pretrained(out)
        trainer.processing_class.save_pretrained(out)
        write_recipe(script, config, out)
    trainer.accelerator.wait_for_everyone()


def run(script: ScriptArguments, config: MarsConfig | SFTConfig) -> Trainer:
    """Load, train (resuming if asked), evaluate if there is eval data, save. Returns the trainer."""
    model, tokenizer = model_to_train(script)
    if isinstance(config, MarsConfig) and config.mask_token_id is None:
        config.mask_token_id = tokenizer.mask_token_id
    trainer = build_trainer(script, config, model, tokenizer)
    result = trainer.train(resume_from_checkpoint=resume_checkpoint(script, config))
    trainer.log_metrics("train", result.metrics)
    trainer.save_metrics("train", result.metrics)
    trainer.save_state()
    if trainer.eval_dataset is not None:
        metrics = trainer.evaluate()
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)
    save_final(trainer, script, config)
    return trainer


def cpu_only_distributed() -> bool:
    """True when launched as several processes (torchrun / accelerate launch) on a machine with no accelerator."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.accelerator.is_available()


def main(argv: list[str] | None = None) -> None:
    """Entry point of the mars-train command."""
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.INFO)
    if cpu_only_distributed():
        # Without this, transformers sees an initialised process group but stays NOT_PARALLEL: every process
        # would train on all the data alone. ACCELERATE_USE_CPU makes it data-parallel DDP (gloo) on the CPU.
        os.environ.setdefault("ACCELERATE_USE_CPU", "true")
    script, config = parse_args(argv)
    run(script, config)


if __name__ == "__main__":
    main()
