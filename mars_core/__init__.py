"""MARS Studio's engine: load, train and decode MARS multi-token generation."""

from .control import DecodeControl
from .generate import GenerationResult, StreamEvent, generate, stream
from .load import load
from .mars_config import MarsConfig
from .mars_trainer import MarsTrainer
from .masks import training_attention_mask, training_block_mask
from .sft_config import SFTConfig
from .sft_trainer import SFTTrainer

__all__ = [
    "DecodeControl",
    "GenerationResult",
    "MarsConfig",
    "MarsTrainer",
    "SFTConfig",
    "SFTTrainer",
    "StreamEvent",
    "generate",
    "load",
    "stream",
    "training_attention_mask",
    "training_block_mask",
]
