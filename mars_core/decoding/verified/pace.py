"""Width priced by this decode's own forwards: the cost curve's shape, corrected as the forwards are timed.

The curve (runtime.cost) is timed once, at load. On a shared CPU the price of width then moves with other load:
within minutes a llama.cpp F32 forward of 4 tokens read 1.32x one of 1 token in the curve and 1.8-1.9x inside the
decodes (docs/llamacpp.md#speed), and trees priced at 1.32x did not pay. Where the
runtime asks (Runtime.live_cost), and on a GPU (where the step around the forward decides), each step after the
prefill is timed, from its forward to its host copy, and the seconds the plan reads become
    t(w) = t1 + k (s_w - s_1)
with s the curve's seconds, t1 a running mean of the plain forwards' seconds and k one of (o - t1) / (s_w - s_1)
over the wider ones, o their seconds. Each decode starts from the curve as timed (t1 = s_1, k = 1), so a price that
stopped the trees in one decode is tried afresh in the next.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

WEIGHT = 0.25  # weight of the newest forward in both running means (a forward's time moves by a fifth alone)
K_RANGE = (0.5, 3.0)  # k is kept within these: one forward slowed by other work must not price width out for good


@dataclass
class Pace:
    """The price of width as this decode's forwards found it: the curve's seconds by width (w = 0..W, at this batch
    size), the running mean t1 of a plain forward's seconds and the factor k on the curve's price of width."""

    curve: list[float]
    t1: float
    k: float = 1.0

    @classmethod
    def from_curve(cls, seconds: torch.Tensor) -> Pace:
        """The curve as timed: t1 = s_1, k = 1."""
        curve = seconds.tolist()
        return cls(curve, curve[1])

    def rebased(self, seconds: torch.Tensor) -> Pace:
        """This pace on another curve (the batch's live samples priced anew): what it learned kept, k as it is and t1
        scaled by the new curve's one-token seconds over the old one's."""
        curve = seconds.tolist()
        return Pace(curve, self.t1 * curve[1] / self.curve[1], self.k)

    def observe(self, width: int, elapsed: float) -> None:
        """Move t1 (width 1) or k (wider) by one forward of `width` tokens per sample that took `elapsed` seconds."""
        if width <= 1:
            self.t1 += WEIGHT * (elapsed - self.t1)
            return
        span = self.curve[min(width, len(self.curve) - 1)] - self.curve[1]
        if span <= 0:  # a curve that prices this width as one token says nothing of k
            return
        k = min(max((elapsed - self.t1) / span, K_RANGE[0]), K_RANGE[1])
        self.k += WEIGHT * (k - self.k)

    def seconds(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """[W+1] seconds by width as the plan reads them: t1 + k (s_w - s_1)."""
        s1 = self.curve[1]
        return torch.tensor([self.t1 + self.k * (s - s1) for s in self.curve], dtype=torch.float32, device=device)
