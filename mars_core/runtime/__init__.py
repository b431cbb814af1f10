"""The machine-facing side of a forward: kernels by rows, width invariance, the cost curve, what was checked."""

from .attention import ATTENTION
from .curve import CostCurve
from .forward import cache_mask, forward, head, hidden_states, new_cache
from .invariance import compare_widths, width_check
from .prepare import prepare
from .runtime import Runtime, WidthCheck

__all__ = ["ATTENTION", "CostCurve", "Runtime", "WidthCheck", "cache_mask", "compare_widths", "forward", "head",
           "hidden_states", "new_cache", "prepare", "width_check"]
