"""A short live run of mars_core's own trainers (MarsTrainer, or SFTTrainer for the AR-only control): a LoRA on a model
the caller owns, a budget in steps and seconds, and a callback that streams every logged step's losses (the AR loss,
the noisy loss by slot) and, now and then, a probe of what was learned (the caller's: training never decodes).

What the Train tab and benchmarks/train_live.py run; `mars-train` runs the same trainers on files.
"""

from __future__ import annotations

import copy
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback

from .data import tokenized_chats
from .mars_config import MarsConfig
from .mars_trainer import MarsTrainer, slot_terms
from .sft_config import SFTConfig
from .sft_trainer import SFTTrainer

Metrics = dict[str, Any]  # one update of the stream: step, seconds, losses, and a probe's figures when one ran
Probe = Callable[[torch.nn.Module], Metrics]  # what was learned so far, from the model in training (its figures)


@dataclass
class LiveConfig:
    """A live run's settings, with defaults measured to reach 2+ verified tokens per forward on the counting corpus
    within three minutes of a 2-core CPU (docs/training.md, "Live training")."""

    method: Literal["mars", "sft"] = "mars"  # sft: the AR-only control, the same run without the noisy stream
    block_size: int = 4  # MARS block size B
    max_steps: int = 400  # the budget in optimizer steps ...
    max_seconds: float = 180.0  # ... and in seconds of wall time, probes included: whichever ends first
    batch_size: int = 4  # examples per step (4 learnt as much per step as 8, in half the time)
    learning_rate: float = 2e-3  # constant (a few hundred steps have no time to decay); above LoRA's usual 1e-3,
    # which ended lower in 3 minutes (docs/training.md, "Live training")
    lora_r: int = 16  # LoRA rank on every linear layer, alpha = 2r
    lora_layers: int = 0  # LoRA on the top N decoder layers only (0: every layer)
    train_mask_row: bool = True  # the mask token's embedding row trains too (the backward then reaches the bottom)
    max_length: int = 160  # tokens per example (the built-in corpora's are under 100)
    probe_seconds: float = 30.0  # a probe at the start, then at most this often (wall time), and at the end
    probe_at_start: bool = True  # False: the caller knows the untrained model's figures (the Train tab caches them)
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)  # more TrainingArguments fields (tests: tiny budgets)

    def __post_init__(self) -> None:
        if self.method not in ("mars", "sft"):
            raise ValueError(f"method must be 'mars' or 'sft', got {self.method!r}")
        for name in ("block_size", "max_steps", "batch_size", "lora_r"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_seconds <= 0 or self.probe_seconds <= 0:
            raise ValueError("max_seconds and probe_seconds must be positive")


class LiveMetrics(TrainerCallback):
    """Streams a run: `emit` gets a Metrics dict at every logged step (step, seconds, ar_loss, noisy_loss,
    slot_losses for slots 1..B-1) and after every probe (its figures, with the step and seconds); ends the run at the
    next step when `stop` is set or the seconds are spent (what was learned is kept: the model is the caller's)."""

    def __init__(self, emit: Callable[[Metrics], None], config: LiveConfig, probe: Probe | None = None,
                 stop: threading.Event | None = None) -> None:
        self.emit, self.config, self.probe = emit, config, probe
        self.stop = stop or threading.Event()
        self.started = self.probed_at = time.monotonic()
        self.probed_step = -1
        self.steps = 0  # optimizer steps done
        self.stopped_by = ""  # "stop", "seconds" or "" (the steps ran out)

    def seconds(self) -> float:
        return time.monotonic() - self.started

    def run_probe(self, step: int, model: torch.nn.Module) -> None:
        if self.probe is None or step == self.probed_step:
            return
        was_training = model.training
        model.eval()
        with torch.no_grad():
            figures = self.probe(model)
        model.train(was_training)
        self.probed_at, self.probed_step = time.monotonic(), step
        self.emit({"step": step, "seconds": round(self.seconds(), 2), "probe": True, **figures})

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.started = self.probed_at = time.monotonic()
        if self.config.probe_at_start:
            self.run_probe(0, model)

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        sft = self.config.method == "sft"  # the AR-only control: its loss is the AR loss, it has no mask slots
        ar = logs.get("loss") if sft else logs.get("loss_clean")
        if ar is None or "train_runtime" in logs:
            return  # the run's closing summary (train_runtime, ...), not a step
        slots = [] if sft else [logs.get(name) for name in slot_terms(self.config.block_size)[:-1]]
        self.emit({"step": state.global_step, "seconds": round(self.seconds(), 2), "ar_loss": ar,
                   "noisy_loss": logs.get("loss_noisy"), "slot_losses": slots})

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.steps = state.global_step
        if self.stop.is_set():
            self.stopped_by, control.should_training_stop = "stop", True
        elif self.seconds() >= self.config.max_seconds:
            self.stopped_by, control.should_training_stop = "seconds", True
        elif time.monotonic() - self.probed_at >= self.config.probe_seconds:
            self.run_probe(state.global_step, model)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        self.run_probe(state.global_step, model)


def with_lora(model: torch.nn.Module, config: LiveConfig, mask_token_id: int | None) -> torch.nn.Module:
    """The model wrapped in a LoRA on every linear layer (and, for MARS, the mask token's embedding row), as
    mars-train --lora_r does."""
    from .cli import ScriptArguments, apply_lora

    script = ScriptArguments(method=config.method, lora_r=config.lora_r, lora_dropout=0.0,
                             lora_layers=config.lora_layers)
    return apply_lora(model, script, mask_token_id if config.method == "mars" and config.train_mask_row else None)


def training_arguments(config: LiveConfig, mask_token_id: int | None, output_dir: str) -> MarsConfig | SFTConfig:
    """The trainer's arguments: every step logged, nothing saved, a constant rate; bf16 autocast where the CPU runs
    bf16 fast (mars_core.load's test), fp32 elsewhere."""
    from ..load import bf16_supported

    on_cpu = not torch.accelerator.is_available()
    device = torch.device("cpu") if on_cpu else torch.accelerator.current_accelerator()
    values = dict(output_dir=output_dir, max_steps=config.max_steps, per_device_train_batch_size=config.batch_size,
                  learning_rate=config.learning_rate, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
                  logging_steps=1, save_strategy="no", disable_tqdm=True, report_to="none", use_cpu=on_cpu,
                  bf16=bf16_supported(device), dataloader_num_workers=0, max_length=config.max_length,
                  seed=config.seed, **config.extra)
    if config.method == "sft":
        return SFTConfig(**values)
    return MarsConfig(**values, block_size=config.block_size, mask_token_id=mask_token_id)


def train_live(model: torch.nn.Module, tokenizer: Any, examples: Sequence[dict], config: LiveConfig,
               emit: Callable[[Metrics], None], probe: Probe | None = None, *,
               stop: threading.Event | None = None) -> tuple[torch.nn.Module, LiveMetrics]:
    """Train a LoRA on `model` (changed in place: pass a copy you own) over chat `examples` until the budget is spent
    or `stop` is set, streaming metrics to `emit`; returns the LoRA-wrapped model (merged() makes a plain one) and
    the callback (stopped_by says why it ended)."""
    mask_id = getattr(tokenizer, "mask_token_id", None)
    if config.method == "mars" and mask_id is None:
        raise ValueError("MARS training needs a tokenizer with a mask token (mars_core.load guarantees one)")
    model.config.use_cache = False
    wrapped = with_lora(model, config, mask_id)
    dataset = tokenized_chats(examples, tokenizer, config.max_length)
    callback = LiveMetrics(emit, config, probe, stop)
    trainer_class = MarsTrainer if config.method == "mars" else SFTTrainer
    with tempfile.TemporaryDirectory(prefix="mars_live_") as folder:
        trainer = trainer_class(model=wrapped, args=training_arguments(config, mask_id, folder), train_dataset=dataset,
                                processing_class=tokenizer, callbacks=[callback])
        trainer.remove_callback(PrinterCallback)  # the stream is the callback's; no log lines on stdout
        trainer.train()
        # accelerate ran the forward under bf16 autocast by patching it: the model handed back computes as it was
        wrapped = trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False)
    wrapped.eval()
    return wrapped, callback


def merged(wrapped: torch.nn.Module, dtype: torch.dtype | None = None) -> torch.nn.Module:
    """A plain copy of a LoRA-wrapped model with the adapter merged in (the wrapped one is left as it is), in
    `dtype`, in eval mode with its KV cache on: what the decoders and the runtime take."""
    model = copy.deepcopy(wrapped).merge_and_unload()
    model.config.use_cache = True
    return (model.to(dtype) if dtype is not None else model).eval()
