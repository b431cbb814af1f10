"""Measuring: prompt sources and sets, self-distillation, mars-eval (quality), mars-bench (speed), sweeps."""
