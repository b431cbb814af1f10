"""MARS Studio's engine: load, train and decode MARS multi-token generation."""

from .decoding.control import DecodeControl
from .decoding.spec import TreeLayout
from .generate import DecodeOptions, GenerationResult, StreamEvent, generate, stream
from .load import load
from .training.mars_config import MarsConfig
from .training.mars_trainer import MarsTrainer
from .training.masks import training_attention_mask, training_block_mask
from .training.sft_config import SFTConfig
from .training.sft_trainer import SFTTrainer

__all__ = [
    "DecodeControl",
    "DecodeOptions",
    "GenerationResult",
    "MarsConfig",
    "MarsTrainer",
    "SFTConfig",
    "SFTTrainer",
    "StreamEvent",
    "TreeLayout",
    "generate",
    "load",
    "stream",
    "training_attention_mask",
    "training_block_mask",
]
