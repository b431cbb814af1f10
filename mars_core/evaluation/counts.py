"""What one mars-bench pass decoded (Counts), and the runner that produces it: shared by the torch and llama.cpp
rows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Counts:
    """What one pass decoded, summed over its batches."""

    tokens: int  # generated tokens, every sample
    sample_forwards: int | None  # forwards in which each sample advanced, summed over samples (None: unknown)
    forwards: int | None  # batched forwards (None: unknown)
    ar_steps: int  # forwards AR takes for the same answers: the longest answer of each batch
    answers: dict[str, list[int]] = field(default_factory=dict)  # prompt -> answer (compared across methods)

    @classmethod
    def of(cls, result: Any, prompts: list[str]) -> Counts:
        """The counts of one generate() call (a GenerationResult) over these prompts, one answer per prompt."""
        return cls(result.generated_tokens, sum(result.sample_forwards), result.forwards,
                   max(map(len, result.token_ids)), dict(zip(prompts, result.token_ids)))

    def __add__(self, other: "Counts") -> "Counts":
        add = lambda a, b: None if a is None or b is None else a + b  # noqa: E731
        return Counts(self.tokens + other.tokens, add(self.sample_forwards, other.sample_forwards),
                      add(self.forwards, other.forwards), self.ar_steps + other.ar_steps,
                      {**self.answers, **other.answers})


Runner = Callable[..., Counts]
