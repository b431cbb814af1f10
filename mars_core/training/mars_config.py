"""Training arguments for MARS (Mask AutoRegreSsion) fine-tuning: the chat-SFT arguments plus the MARS knobs."""

from __future__ import annotations

from dataclasses import dataclass, field

from .sft_config import SFTConfig


@dataclass
class MarsConfig(SFTConfig):
    """SFTConfig (transformers.TrainingArguments for chat data) plus block size B, clean-loss weight α, mask token."""

    # B: the most tokens one forward may commit at decode time; the noisy stream attends within blocks of B.
    block_size: int = field(default=4, metadata={"help": "MARS block size B (tokens one forward may commit)."})
    # α in  loss = CE(noisy) + α · CE(clean); the clean-stream (AR) term keeps one-token quality. Paper: 1.0.
    ar_weight: float = field(default=1.0, metadata={"help": "Weight α of the clean-stream (AR) cross-entropy."})
    # The token that replaces every response token in the noisy stream. None: the tokenizer's mask_token_id.
    mask_token_id: int | None = field(
        default=None, metadata={"help": "Mask token id (default: the tokenizer's mask_token_id)."}
    )

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError(f"block_size (B) must be >= 1, got {self.block_size}")
        if self.ar_weight < 0:
            raise ValueError(f"ar_weight (α) must be >= 0, got {self.ar_weight}")
        if self.mask_token_id is not None and self.mask_token_id < 0:
            raise ValueError(f"mask_token_id must be a token id >= 0, got {self.mask_token_id}")
        super().__post_init__()  # max_length, then transformers' own checks
