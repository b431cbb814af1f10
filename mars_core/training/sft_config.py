"""Training arguments for plain autoregressive SFT on chat data (the paper's control baseline); MarsConfig extends
them with the MARS knobs."""

from __future__ import annotations

from dataclasses import dataclass, field

from transformers import TrainingArguments


@dataclass
class SFTConfig(TrainingArguments):
    """transformers.TrainingArguments plus the chat-data length, with defaults suited to chat SFT."""

    # Conversations are cut to this many tokens (the paper uses 512); a MARS forward sees twice as many.
    max_length: int = field(default=512, metadata={"help": "Cut each tokenized conversation to this many tokens."})
    # The collator needs the `labels` column, which the model's forward signature would keep anyway.
    remove_unused_columns: bool = field(default=False, metadata={"help": "Drop dataset columns the model ignores."})
    # There is no compute_metrics: evaluation reports the loss only, never gathers logits.
    prediction_loss_only: bool = field(default=True, metadata={"help": "Evaluation returns the loss only."})
    logging_steps: float = field(default=10, metadata={"help": "Log every X optimizer steps (or a ratio if < 1)."})
    logging_first_step: bool = field(default=True, metadata={"help": "Log the first optimizer step too."})
    report_to: None | str | list[str] = field(default="none", metadata={"help": "Integrations to report to."})

    def __post_init__(self) -> None:
        if self.max_length < 2:
            raise ValueError(f"max_length must be >= 2 (one prompt and one response token), got {self.max_length}")
        super().__post_init__()
