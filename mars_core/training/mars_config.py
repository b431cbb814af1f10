"""Training arguments for MARS (Mask AutoRegreSsion) fine-tuning."""

from __future__ import annotations

from dataclasses import dataclass, field

from transformers import TrainingArguments


@dataclass
class MarsConfig(TrainingArguments):
    """transformers.TrainingArguments plus the MARS knobs: block size B, clean-loss weight α, mask token."""

    # B: the most tokens one forward may commit at decode time; the noisy stream attends within blocks of B.
    block_size: int = field(default=4, metadata={"help": "MARS block size B (tokens one forward may commit)."})
    # α in  loss = CE(noisy) + α · CE(clean); the clean-stream (AR) term keeps one-token quality. Paper: 1.0.
    ar_weight: float = field(default=1.0, metadata={"help": "Weight α of the clean-stream (AR) cross-entropy."})
    # Conversations are cut to this many tokens; the forward sees twice as many ([noisy | clean]).
    max_length: int = field(default=512, metadata={"help": "Cut each tokenized conversation to this many tokens."})
    # The token that replaces every response token in the noisy stream. None: the tokenizer's mask_token_id.
    mask_token_id: int | None = field(
        default=None, metadata={"help": "Mask token id (default: the tokenizer's mask_token_id)."}
    )
    # The collator needs the `labels` column, which the model's forward signature would keep anyway.
    remove_unused_columns: bool = field(default=False, metadata={"help": "Drop dataset columns the model ignores."})
    # There is no compute_metrics: evaluation reports the loss only, never gathers logits.
    prediction_loss_only: bool = field(default=True, metadata={"help": "Evaluation returns the loss only."})
    logging_steps: float = field(default=10, metadata={"help": "Log every X optimizer steps (or a ratio if < 1)."})
    logging_first_step: bool = field(default=True, metadata={"help": "Log the first optimizer step too."})
    report_to: None | str | list[str] = field(default="none", metadata={"help": "Integrations to report to."})

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError(f"block_size (B) must be >= 1, got {self.block_size}")
        if self.ar_weight < 0:
            raise ValueError(f"ar_weight (α) must be >= 0, got {self.ar_weight}")
        if self.max_length < 2:
            raise ValueError(f"max_length must be >= 2 (one prompt and one response token), got {self.max_length}")
        if self.mask_token_id is not None and self.mask_token_id < 0:
            raise ValueError(f"mask_token_id must be a token id >= 0, got {self.mask_token_id}")
        super().__post_init__()
