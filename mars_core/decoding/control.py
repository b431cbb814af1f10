"""DecodeControl: the settings a decoder reads at every forward, so they can change while it runs."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

CONFIDENCES = ("prob", "entropy", "margin")


@dataclass
class DecodeControl:
    threshold: float = 0.9  # accept a mask prediction when its confidence >= threshold; 1 = one token per forward
    temperature: float = 0.0  # 0 = greedy; > 0 samples from softmax(logits / temperature)
    top_p: float = 1.0  # nucleus sampling mass (used when temperature > 0)
    confidence: str = "prob"  # "prob" (chosen token's probability), "entropy" (1 - H/log V) or "margin" (p1 - p2)
    stopped: bool = False  # set by stop(): the decoder ends before its next forward

    def __post_init__(self) -> None:
        check_settings(self.threshold, self.temperature, self.top_p, self.confidence)

    def stop(self) -> None:
        """Ask the running generation to end before its next forward (a Stop button)."""
        self.stopped = True

    def snapshot(self) -> DecodeControl:
        """A validated copy of the current settings: what one forward uses, even if another thread edits them."""
        return replace(self)


def check_settings(threshold: float, temperature: float, top_p: float, confidence: str) -> None:
    """Raise a ValueError that says which setting is wrong and what is allowed."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1] (1 = one token per forward), got {threshold!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature < math.inf:
        raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {temperature!r}")
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
    if confidence not in CONFIDENCES:
        raise ValueError(f"confidence must be one of {CONFIDENCES}, got {confidence!r}")
