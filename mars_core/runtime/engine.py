"""Engine: a model whose forwards run outside torch (llama.cpp), seen by the decoders through the same seam.

The decoders never call a model directly: they read every forward through runtime/forward.py. A transformers model
takes the torch path there; an Engine answers the same calls itself. A new backend is one Engine subclass: its
forward (hidden_states, head, new_cache) and what a measurement on it depends on (record); prepare(engine) then runs
the same pipeline as for a torch model (runtime/prepare.py: the width check and the cost curve on the engine's
forward, kept on disk). Its cache needs one operation besides being fed: `keep(advance)`, which keeps the first
advance[i] fed slots of the last forward and drops the rest (the decoders keep a prefix of what they fed: the pending
tokens and the drafts that matched).
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
    max_batch: int = 1  # the most samples one forward feeds
    live_cost: bool = True  # verified re-prices width by its own timed forwards (the curve moves under load)

    @abstractmethod
    def record(self) -> dict[str, Any]:
        """Where and how its forwards run (machine, build, weights, threads, mode): what a kept measurement of it
        (width check, cost curve) is keyed by."""

    @abstractmethod
    def new_cache(self) -> Any:
        """An empty cache for one decode; it has keep(advance)."""

    @abstractmethod
    def hidden_states(self, ids: torch.Tensor, positions: torch.Tensor, seen: torch.Tensor, cache: Any
                      ) -> torch.Tensor:
        """Feed ids [b, W] at positions [b, W] after the cache, each fed slot seeing the cache and the fed slots
        seen [b, W, W] lets it (True = attend); return per-slot rows [b, W, H] that head() turns into logits (an
        engine that computes logits anyway may return them here, with head() the identity)."""

    @abstractmethod
    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits of rows [..., H] that hidden_states() returned."""
