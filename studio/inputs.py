"""Input limits and checks shared by every tab: one clear message for a value out of range."""

from __future__ import annotations

from typing import Any

import gradio as gr

MAX_NEW_TOKENS = 512  # hard cap per run, whatever the client sends
MAX_PROMPT_CHARS = 4000
MAX_BLOCK_SIZE = 16
MAX_TEMPERATURE = 2.0
WALK_MAX_NEW_TOKENS = 64
SWEEP_MAX_NEW_TOKENS = 256


def number(value: Any, name: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None


def integer(value: Any, name: str) -> int:
    whole = number(value, name)
    if not whole.is_integer():
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    return int(whole)


def check_inputs(
    prompt: Any, threshold: Any, block_size: Any, temperature: Any, max_new_tokens: Any, cap: int = MAX_NEW_TOKENS
) -> tuple[str, float, int, float, int]:
    """Validated (prompt, threshold, block size, temperature, max new tokens); a ValueError says what is wrong."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("Empty prompt: type something (or pick an example) first.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"Prompt too long: {len(prompt)} characters, the limit is {MAX_PROMPT_CHARS}.")
    tau = number(threshold, "threshold")
    if not 0.0 < tau <= 1.0:
        raise ValueError(f"Threshold must be in (0, 1] (1 = one token per forward), got {tau:g}.")
    block = integer(block_size, "block size")
    if not 1 <= block <= MAX_BLOCK_SIZE:
        raise ValueError(f"Block size must be between 1 and {MAX_BLOCK_SIZE}, got {block}.")
    temp = number(temperature, "temperature")
    if not 0.0 <= temp <= MAX_TEMPERATURE:
        raise ValueError(f"Temperature must be between 0 and {MAX_TEMPERATURE:g}, got {temp:g}.")
    new = integer(max_new_tokens, "max new tokens")
    if not 1 <= new <= cap:
        raise ValueError(f"Max new tokens must be between 1 and {cap}, got {new}.")
    return prompt, tau, block, temp, new


def warn(message: str) -> str:
    """Show message as a toast in the UI and return it as a status line."""
    gr.Warning(message)
    return f"⚠ {message}"
