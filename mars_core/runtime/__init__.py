"""The machine-facing side of a forward: kernels by rows, width invariance, the cost curve, what was checked."""

from .attention import ATTENTION
from .curve import CostCurve
from .forward import causal_seen, feed, head, keep, new_cache, visible
from .invariance import compare_widths, width_check
from .prepare import prepare, prepared
from .runtime import Runtime, WidthCheck
from .watch import refresh

__all__ = ["ATTENTION", "CostCurve", "Runtime", "WidthCheck", "causal_seen", "compare_widths", "feed", "head", "keep",
           "new_cache", "prepare", "prepared", "refresh", "visible", "width_check"]
