"""MARS Studio's engine: load, train and decode MARS multi-token generation.

Decoding and loading import torch and transformers only. The training names (MarsTrainer, SFTTrainer, their
configs, the training masks) load on first use, with what training needs (transformers' Trainer and accelerate,
datasets): an app that only decodes, such as the Space, never imports them.
"""

from importlib import import_module
from typing import Any

from . import openmp  # noqa: F401 - first: sets OpenMP's wait before torch loads it (mars_core/openmp.py)
from .decoding.control import DecodeControl
from .decoding.verified import Forward, TreeLayout, VerifiedConfig
from .generate import DecodeOptions, GenerationResult, StreamEvent, generate, stream
from .load import load
from .runtime import Runtime, prepare

_TRAINING = {  # name -> the module that defines it, imported on first use (module __getattr__, PEP 562)
    "MarsConfig": ".training.mars_config",
    "MarsTrainer": ".training.mars_trainer",
    "SFTConfig": ".training.sft_config",
    "SFTTrainer": ".training.sft_trainer",
    "training_attention_mask": ".training.masks",
    "training_block_mask": ".training.masks",
}


def __getattr__(name: str) -> Any:
    """The training names, imported when first asked for (`from mars_core import MarsTrainer` works as before)."""
    if name in _TRAINING:
        value = getattr(import_module(_TRAINING[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_TRAINING])


__all__ = [
    "DecodeControl",
    "DecodeOptions",
    "Forward",
    "GenerationResult",
    "MarsConfig",
    "MarsTrainer",
    "Runtime",
    "SFTConfig",
    "SFTTrainer",
    "StreamEvent",
    "TreeLayout",
    "VerifiedConfig",
    "generate",
    "load",
    "prepare",
    "stream",
    "training_attention_mask",
    "training_block_mask",
]
