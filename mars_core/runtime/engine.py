"""Engine: a model whose forwards run outside torch (llama.cpp), seen by the decoders through the same seam.

The decoders never call a model directly: they read every forward through runtime/forward.py. A transformers model
takes the torch path there; an Engine answers the same four calls itself. A new backend is one Engine subclass.
Its cache needs one operation besides being fed: `crop(-n)`, which drops the last n slots fed (the decoders keep a
prefix of what they fed: the pending tokens and the drafts that matched).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch


class Engine(ABC):
    """A model served by another engine: it holds its own weights and cache, and answers in torch tensors."""

    device: torch.device = torch.device("cpu")
    config: Any  # what the decoders read of a config: max_position_embeddings (the context), vocab_size
    generation_config: Any = None  # eos_token_id, as transformers' (None: the tokenizer's EOS alone)

    @abstractmethod
    def new_cache(self) -> Any:
        """An empty cache for one decode; it has crop(-n)."""

    @abstractmethod
    def forward(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: Any, keep: int
                ) -> torch.Tensor:
        """Feed ids [b, W] at positions [b, W] under the boolean mask [b, W, T+W] (the cache's T slots, then the W
        fed; True = attend); append them to the cache; return the logits [b, keep, V] of the last `keep` slots."""

    @abstractmethod
    def hidden_states(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: Any
                      ) -> torch.Tensor:
        """As forward, but return per-slot rows [b, W, H] that head() turns into logits (an engine that computes
        logits anyway may return them here, with head() the identity)."""

    @abstractmethod
    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits of rows [..., H] that hidden_states() returned."""
