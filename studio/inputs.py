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
    """One numeric input: its slider (range, step, default, label, info) and the name its check's message gives it.
    The range is stated here once: the slider shows it, check() enforces it and its message quotes it."""

    elem_id: str
    name: str  # how a message names it: "Threshold τ", "Block size B", "Max new tokens", …
    low: float
    high: float | None  # None: known when the tab is built (the prompt pool's size): check(..., high=)
    step: float
    value: float
    label: str
    info: str | None = None

    @property
    def whole(self) -> bool:
        """Whole numbers only (the step is a whole number)."""
        return float(self.step).is_integer()


TAU = "Threshold τ"
BLOCK, NEW = "Block size B", "Max new tokens"
INPUTS = {i.elem_id: i for i in (  # every slider whose typed value the page watches (page_js) and a handler checks
    Input("race-threshold", TAU, 0.05, 1.0, 0.01, 0.9, f"{TAU} (MARS τ lane)",
          "acts from the next forward, even mid-run"),
    Input("race-block", BLOCK, 1, MAX_BLOCK_SIZE, 1, 4, BLOCK, "most tokens per forward from the mask slots"),
    Input("race-temperature", "Temperature", 0.0, MAX_TEMPERATURE, 0.05, 0.0, "Temperature", "0 = greedy"),
    Input("race-max-new", NEW, 8, MAX_NEW_TOKENS, 8, 96, NEW),
    Input("walk-threshold", TAU, 0.05, 1.0, 0.01, 0.9, TAU),
    Input("walk-block", BLOCK, 1, 8, 1, 4, BLOCK),
    Input("walk-max-new", NEW, 4, WALK_MAX_NEW_TOKENS, 1, 24, NEW),
    Input("walkv-threshold", "Draft threshold", 0.05, 1.0, 0.01, 0.3, "Draft threshold",
          "drafts are checked while this confident; it never changes the answer"),
    Input("walkv-block", BLOCK, 1, 8, 1, 4, BLOCK),
    Input("walkv-max-new", NEW, 4, WALK_MAX_NEW_TOKENS, 1, 24, NEW),
    Input("mask-n", "Response tokens n", 2, 16, 1, 8, "Response tokens n"),
    Input("mask-block", BLOCK, 1, 8, 1, 4, BLOCK),
    Input("sweep-block", BLOCK, 1, MAX_BLOCK_SIZE, 1, 4, BLOCK),
    Input("sweep-max-new", NEW, 8, SWEEP_MAX_NEW_TOKENS, 8, 48, NEW),
    Input("sweep-limit", "Prompts", 1, None, 1, 9, "Prompts (taken round-robin over the categories)"),
    Input("batch-threshold", TAU, 0.05, 1.0, 0.01, 0.9, TAU),
    Input("batch-block", BLOCK, 1, MAX_BLOCK_SIZE, 1, 4, BLOCK),
    Input("batch-max-new", NEW, 8, BATCH_MAX_NEW_TOKENS, 8, 64, NEW),
    Input("train-block", BLOCK, 2, 8, 1, 4, BLOCK, "tokens one forward may commit: 1 real + B−1 mask slots"),
    Input("train-steps", "Steps", 5, 2000, 5, 400, "Steps (at most)", "4 examples a step"),
    Input("train-minutes", "Minutes", 0.5, 10, 0.5, 3, "Minutes (at most)", "whichever budget ends first"),
)}
WATCHED = tuple(INPUTS)  # the boxes page_js watches, by elem_id
THRESHOLDS = (INPUTS["race-threshold"].low, INPUTS["race-threshold"].high)  # every τ the app takes (the explorer's)


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
    """Let the slider's value reach the handler as sent: the handler's own check (check) then gives the one message
    for a value out of range, in the browser and the API alike, and nothing runs. (gr.Slider's own check raises a
    toast and logs a traceback for each bad value, and the browser then clamps the value and runs anyway.) An
    instance attribute, not a subclass: Gradio writes a .pyi stub next to the module of any component class."""
    slider.preprocess = lambda payload: payload
    return slider


def number(value: Any, name: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}.") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError(f"{name} must be a number, got {value!r}.")
    return number


def integer(value: Any, name: str) -> int:
    whole = number(value, name)
    if not whole.is_integer():
        raise ValueError(f"{name} must be a whole number, got {value!r}.")
    return int(whole)


def check(elem_id: str, value: Any, high: float | None = None) -> float | int:
    """One slider's value checked against its range in INPUTS (high: a top known only now); a ValueError names the
    setting, the range the slider shows, and the value sent."""
    spec = INPUTS[elem_id]
    top = spec.high if high is None else high
    got = integer(value, spec.name) if spec.whole else number(value, spec.name)
    if not spec.low <= got <= top:
        raise ValueError(f"{spec.name} must be between {spec.low:g} and {top:g}, got {got:g}.")
    return got


def check_inputs(
    prompt: Any, threshold: Any, block_size: Any, temperature: Any, max_new_tokens: Any, tab: str = "race"
) -> tuple[str, float, int, float, int]:
    """Validated (prompt, threshold, block size, temperature, max new tokens) of a tab's inputs (elem_ids
    <tab>-threshold, …; a setting the tab has no slider for passes as given); a ValueError says what is wrong."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("Empty prompt: type something (or pick an example) first.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"Prompt too long: {len(prompt)} characters, the limit is {MAX_PROMPT_CHARS}.")
    values = {"threshold": threshold, "block": block_size, "temperature": temperature, "max-new": max_new_tokens}
    out = {k: check(f"{tab}-{k}", v) if f"{tab}-{k}" in INPUTS else v for k, v in values.items()}
    return prompt, out["threshold"], out["block"], out["temperature"], out["max-new"]


def page_js() -> str:
    """The browser clamps a number typed into a slider's box to the slider's range before any event sees it. This
    page script remembers, per watched slider, a value typed out of range (window.marsTyped). It also keeps each race
    lane's text box on its newest text, or on the token where the answer departs from AR's, and has the charts of a
    tab that was hidden while the window changed width (a phone turned) redrawn when the tab shows."""
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
  // each race lane's text box follows its text to the end, except where an answer departs from AR's: then the
  // departing token (outlined, class dep) is kept in view
  let queued = false;
  const follow = () => {
    queued = false;
    for (const body of document.querySelectorAll(".mars-body")) {
      const dep = body.querySelector(".dep");
      body.scrollTop = dep ? Math.max(0, dep.offsetTop - body.clientHeight / 3) : body.scrollHeight;
    }
  };
  new MutationObserver(() => { if (!queued) { queued = true; requestAnimationFrame(follow); } })
    .observe(document.body, {childList: true, subtree: true});
  // a chart laid out while its tab was hidden keeps the old width's layout: a resize once the tab shows redraws it
  document.addEventListener("click", (event) => {
    if (event.target.closest && event.target.closest("button[role=tab], .overflow-dropdown button"))
      setTimeout(() => window.dispatchEvent(new Event("resize")), 150);
  }, true);
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
    """A message as the one line the page shows next to the control it concerns (no toast: one message, once)."""
    return f"⚠ {message}"
