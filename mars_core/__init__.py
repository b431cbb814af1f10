"""MARS Studio's engine: load, train and decode MARS multi-token generation."""

from .control import DecodeControl
from .generate import GenerationResult, StreamEvent, generate, stream
from .masks import training_attention_mask, training_block_mask

__all__ = [
    "DecodeControl",
    "GenerationResult",
    "StreamEvent",
    "generate",
    "stream",
    "training_attention_mask",
    "training_block_mask",
]
