"""The page's numeric inputs and their checks, shared by every tab: one table (INPUTS) gives each slider its range,
label and elem_id, the page script its watched boxes, and each handler its cap; a value out of range gets one clear
message."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import gradio as gr

MAX_NEW_TOKENS = 512  # hard cap per run, whatever the client sends
MAX_PROMPT_CHARS = 4000
MAX_BLOCK_SIZE = 16
MAX_TEMPERATURE = 2.0
WALK_MAX_NEW_TOKENS = 64
SWEEP_MAX_NEW_TOKENS = 256
BATCH_MAX_NEW_TOKENS = 256  # per sample: a batch of up to 8 prompts, decoded twice (block and AR)


@dataclass(frozen=True)
class Input:
    """One numeric input: its slider (range, step, default, label, info) and which check its value gets (field)."""

    elem_id: str
    field: str  # what check_field checks ("threshold", "block size", "temperature", "max new tokens"), or "prompts"
    low: float
    high: float | None  # None: known when the tab is built (the prompt pool's size)
    step: float
    value: float
    label: str
    info: str | None = None


TAU = "Threshold τ"
INPUTS = {i.elem_id: i for i in (  # every slider whose typed value the page watches (page_js) and a handler checks
    Input("race-threshold", "threshold", 0.05, 1.0, 0.01, 0.9, f"{TAU} (MARS τ lane)",
          "applies from the next forward, even mid-run"),
    Input("race-block", "block size", 1, MAX_BLOCK_SIZE, 1, 4, "Block size B",
          "most tokens per forward from the mask slots"),
    Input("race-temperature", "temperature", 0.0, MAX_TEMPERATURE, 0.05, 0.0, "Temperature", "0 = greedy"),
    Input("race-max-new", "max new tokens", 8, MAX_NEW_TOKENS, 8, 96, "Max new tokens"),
    Input("walk-threshold", "threshold", 0.05, 1.0, 0.01, 0.9, TAU),
    Input("walk-block", "block size", 1, 8, 1, 4, "Block size B"),
    Input("walk-max-new", "max new tokens", 4, WALK_MAX_NEW_TOKENS, 1, 24, "Max new tokens"),
    Input("walkv-threshold", "threshold", 0.05, 1.0, 0.01, 0.3, "Draft threshold",
          "drafts are checked while this confident; it never changes the answer"),
    Input("walkv-block", "block size", 1, 8, 1, 4, "Block size B"),
    Input("walkv-max-new", "max new tokens", 4, WALK_MAX_NEW_TOKENS, 1, 24, "Max new tokens"),
    Input("sweep-block", "block size", 1, MAX_BLOCK_SIZE, 1, 4, "Block size B"),
    Input("sweep-max-new", "max new tokens", 8, SWEEP_MAX_NEW_TOKENS, 8, 48, "Max new tokens"),
    Input("sweep-limit", "prompts", 1, None, 1, 9, "Prompts (taken round-robin over the categories)"),
    Input("batch-threshold", "threshold", 0.05, 1.0, 0.01, 0.9, TAU),
    Input("batch-block", "block size", 1, MAX_BLOCK_SIZE, 1, 4, "Block size B"),
    Input("batch-max-new", "max new tokens", 8, BATCH_MAX_NEW_TOKENS, 8, 64, "Max new tokens"),
)}
WATCHED = tuple(INPUTS)  # the boxes page_js watches, by elem_id


def slider(elem_id: str, **extra: Any) -> gr.Slider:
    """The input's slider as INPUTS has it, unchecked (extra: layout such as scale, or a range known only now)."""
    spec = INPUTS[elem_id]
    settings = dict(minimum=spec.low, maximum=spec.high, value=spec.value, step=spec.step, label=spec.label,
                    info=spec.info, elem_id=elem_id)
    return unchecked(gr.Slider(**{**settings, **extra}))


def cap(elem_id: str) -> int:
    """The most new tokens a tab's handler accepts: its max-new-tokens slider's top (the server-side check)."""
    return int(INPUTS[elem_id].high)


def unchecked(slider: gr.Slider) -> gr.Slider:
    """Let the slider's value reach the handler as sent: the handler's own check (check_inputs) then gives the one
    message for a value out of range, in the browser and the API alike, and nothing runs. (gr.Slider's own check
    raises a toast and logs a traceback for each bad value, and the browser then clamps the value and runs anyway.)
    An instance attribute, not a subclass: Gradio writes a .pyi stub next to the module of any component class."""
    slider.preprocess = lambda payload: payload
    return slider


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


def check_field(field: str, value: Any, cap: int = MAX_NEW_TOKENS) -> float | int:
    """One numeric setting checked alone ("threshold", "block size", "temperature", "max new tokens"); a ValueError
    says what is wrong and what is allowed."""
    if field == "threshold":
        tau = number(value, "threshold")
        if not 0.0 < tau <= 1.0:
            raise ValueError(f"Threshold must be in (0, 1] (1 = one token per forward), got {tau:g}.")
        return tau
    if field == "block size":
        block = integer(value, "block size")
        if not 1 <= block <= MAX_BLOCK_SIZE:
            raise ValueError(f"Block size must be between 1 and {MAX_BLOCK_SIZE}, got {block}.")
        return block
    if field == "temperature":
        temp = number(value, "temperature")
        if not 0.0 <= temp <= MAX_TEMPERATURE:
            raise ValueError(f"Temperature must be between 0 and {MAX_TEMPERATURE:g}, got {temp:g}.")
        return temp
    new = integer(value, "max new tokens")
    if not 1 <= new <= cap:
        raise ValueError(f"Max new tokens must be between 1 and {cap}, got {new}.")
    return new


def check_inputs(
    prompt: Any, threshold: Any, block_size: Any, temperature: Any, max_new_tokens: Any, cap: int = MAX_NEW_TOKENS
) -> tuple[str, float, int, float, int]:
    """Validated (prompt, threshold, block size, temperature, max new tokens); a ValueError says what is wrong."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("Empty prompt: type something (or pick an example) first.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"Prompt too long: {len(prompt)} characters, the limit is {MAX_PROMPT_CHARS}.")
    return (prompt, check_field("threshold", threshold), check_field("block size", block_size),
            check_field("temperature", temperature), check_field("max new tokens", max_new_tokens, cap))


def page_js() -> str:
    """The browser clamps a number typed into a slider's box to the slider's range before any event sees it. This
    page script remembers, per watched slider, a value typed out of range (window.marsTyped)."""
    return """() => {
  const watched = new Set(%s);
  window.marsTyped = {};
  const note = (event) => {
    const box = event.target;
    if (!(box instanceof HTMLInputElement) || box.type !== "number") return;
    let holder = box;
    while (holder && !watched.has(holder.id)) holder = holder.parentElement;
    if (!holder || box.value === "") return;
    const value = box.valueAsNumber, low = parseFloat(box.min), high = parseFloat(box.max);
    const outside = Number.isNaN(value) || value < low || value > high;
    // a value is typed when the box is left or Enter pressed: "0" on the way to "0.3" is not a value
    const done = event.type === "blur" || (event.type === "keydown" && event.key === "Enter");
    if (outside && done) window.marsTyped[holder.id] = box.value;
    else if (!outside && event.type === "input") delete window.marsTyped[holder.id];  // typed again, within range
  };
  // capture phase: a blur reaches this listener before the box's own handler, which clamps the value
  for (const kind of ["input", "blur", "keydown"]) document.addEventListener(kind, note, true);
}""" % json.dumps(list(WATCHED))


def typed_js(inputs: list[Any], consume: bool) -> str:
    """An event's js step: every input (the event's inputs in order: components or elem_ids) whose watched slider
    had a value typed out of range is handed to the handler as typed, not as the browser clamped it, so the handler's
    own check gives its one message and nothing runs. A Run consumes it (pressed again, it runs with what the box now
    shows); a change only peeks, and hands on null for a value out of range that is still being typed ("0" on the way
    to "0.3" fires a change too): its handler ignores null, so only a finished value gets a message."""
    elems = [i if isinstance(i, str) else getattr(i, "elem_id", None) for i in inputs]
    ids = [elem if elem in INPUTS else None for elem in elems]
    ranges = [[INPUTS[i].low, INPUTS[i].high] if i else None for i in ids]
    take = "delete typed[id];" if consume else ""
    typing = "" if consume else ("const [low, high] = ranges[k]; "
                                 "if (typeof v === 'number' && (v < low || (high !== null && v > high))) return null; ")
    return (f"(...args) => {{ const ids = {json.dumps(ids)}; const ranges = {json.dumps(ranges)}; "
            f"const typed = window.marsTyped || {{}}; "
            f"return args.map((v, k) => {{ const id = ids[k]; if (!id) return v; "
            f"if (!(id in typed)) {{ {typing}return v; }} "
            f"const t = typed[id]; {take} const n = Number(t); return Number.isNaN(n) ? t : n; }}); }}")


def warn(message: str) -> str:
    """Show message as a toast in the UI and return it as a status line."""
    gr.Warning(message)
    return f"⚠ {message}"
