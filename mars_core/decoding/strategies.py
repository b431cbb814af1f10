"""The strategy table: every decoder generate(), stream(), the harness, mars-bench and the app can run, by name.

Adding a decoder is one module in decoding/ (a generator of Steps: decode(model, prompts, spec, control, **reads))
and one entry here.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import torch

from .block import block_decode
from .control import DecodeControl
from .sliding import sliding_decode
from .spec import DecodeSpec, Step
from .verified import draft_depth, verified_decode

Decoder = Callable[..., Generator[Step, torch.Tensor | None, None]]  # (model, prompts, spec, control, **reads)


@dataclass(frozen=True)
class Strategy:
    """One decoder as its callers see it: what runs, what it reads, what it needs and promises."""

    decode: Decoder  # the generator of Steps
    threshold: float  # DecodeOptions.threshold=None means this (1 = one token per forward)
    lossless: bool  # its answer is greedy AR's at every threshold (else only at threshold 1)
    reads: tuple[str, ...] = ()  # DecodeOptions fields passed to decode as keywords, beyond spec and control
    headroom_blocks: int = 1  # context slots past the answer, in units of block_size - 1 (the masks)
    one_token: bool = False  # always block size 1 (plain AR), whatever block size is asked
    # the most drafts a forward checks past the answer, by the masks a block (B - 1) and the layout, before the masks
    # hung after them (verified: the mask chain's or prompt lookup's); None: no drafts
    drafts: Callable[[int, Any], int] | None = None

    def block_size(self, asked: int) -> int:
        """The block size this strategy decodes with when `asked` is requested."""
        return 1 if self.one_token else asked

    def headroom(self, block_size: int, layout: Any = None) -> int:
        """Context slots a forward may use past the committed tokens: its drafts (as `layout` shapes them; None: the
        default), then the masks after them."""
        g = block_size - 1
        return self.headroom_blocks * g + (self.drafts(g, layout) if self.drafts is not None and g > 0 else 0)


# threshold: sliding and block accept mask predictions at confidence >= 0.9; verified checks the drafts at >= 0.3
# (there it never changes the answer, only the width; the default is measured, see docs/speed.md)
STRATEGIES: dict[str, Strategy] = {
    "ar": Strategy(sliding_decode, threshold=1.0, lossless=True, one_token=True),
    "sliding": Strategy(sliding_decode, threshold=0.9, lossless=False),
    "block": Strategy(block_decode, threshold=0.9, lossless=False),
    "verified": Strategy(verified_decode, threshold=0.3, lossless=True, reads=("layout", "record"),
                         drafts=draft_depth),
}
NAMES = tuple(STRATEGIES)  # "ar", "sliding", "block", "verified"


def strategy(name: str) -> Strategy:
    """The table's entry for `name`; a ValueError that lists the known names otherwise."""
    if name not in STRATEGIES:
        raise ValueError(f"strategy must be one of {NAMES}, got {name!r}")
    return STRATEGIES[name]


def default_threshold(name: str) -> float:
    """The threshold `name` decodes with when none is given."""
    return strategy(name).threshold


def start(name: str, model: torch.nn.Module, prompts: list[list[int]], spec: DecodeSpec, control: DecodeControl,
          **reads) -> Generator[Step, torch.Tensor | None, None]:
    """Start `name`'s decoder with the options it reads (the others are not passed). How its forwards run (kernels,
    fixed widths, graphs) is the runtime's, in spec: one decoder for every runtime and engine."""
    entry = strategy(name)
    return entry.decode(model, prompts, spec, control, **{k: v for k, v in reads.items() if k in entry.reads})
