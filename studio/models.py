"""The models the app serves: set once at launch, loaded once per name (preloaded in the background), the ZeroGPU
wrapper, the app-wide generation slots every tab that runs a model waits in (in_a_slot), and the count of running
work."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from mars_core.load import load
from mars_core.serving import LoadTracker

log = logging.getLogger("mars_studio")

try:  # Hugging Face ZeroGPU: a GPU per call when the `spaces` package is there; a no-op everywhere else
    import spaces

    gpu: Callable = getattr(spaces, "GPU", None) or (lambda fn: fn)
except ImportError:
    gpu = lambda fn: fn  # noqa: E731

SPACE_MODELS = (
    "default",
    "smollm2-135m-instruct",
    "HuggingFaceTB/SmolLM2-135M-Instruct",
    "Xalphinions/MARS-Qwen2.5-0.5B-AR-SFT",
    "Xalphinions/MARS-Qwen2.5-0.5B-blk4",
    "Xalphinions/MARS-Qwen2.5-0.5B-blk8",
    "Xalphinions/MARS-Qwen2.5-0.5B-blk16",
)


@dataclass(frozen=True)
class AppConfig:
    """What the app serves: set once by main(), the same for every user."""

    model: str | None = None  # MARS checkpoint: a local path, hub id, or None for the embedded default
    ar_model: str | None = None  # separate AR baseline; None = the MARS checkpoint in one-token mode
    concurrency: int = 4  # generations decoding at once, all tabs together (the others wait for a slot)
    dtype: str | None = None  # weights' dtype: None = mars_core.load's choice (bf16 where fast), "fp32" for exactness


CONFIG = AppConfig()
MODELS: dict[str, tuple[Any, Any]] = {}  # loaded (model, tokenizer) by name: read-only once loaded
_LOAD_LOCK = threading.Lock()
T = TypeVar("T")  # a frame: what a handler yields to the page
TRACKER = LoadTracker()  # the one shared counter: generations running now, for "adapt to load"
_SLOTS: dict[int, threading.Semaphore] = {}


def slots() -> threading.Semaphore:
    """The app-wide generation slots (CONFIG.concurrency of them). Handlers take one inside, rather than waiting
    in Gradio's queue, so a race exists from the moment it is submitted (see race.race)."""
    with _LOAD_LOCK:
        return _SLOTS.setdefault(CONFIG.concurrency, threading.Semaphore(CONFIG.concurrency))


WAITING = "Waiting for a free generation slot (others are decoding)…"


def in_a_slot(work: Iterator[T], waiting: Callable[[], T], stopped: Callable[[], bool] = lambda: False,
              gave_up: Callable[[], T] | None = None) -> Iterator[T]:
    """Run the generator `work` in one of the app-wide generation slots: every tab that runs the model does. Until
    one is free, yield waiting() every 0.25 s (the page says so, Stop still answers, and a page that leaves ends the
    wait: Gradio closes the generator); stopped while waiting, yield gave_up() and end."""
    slot = slots()
    while not slot.acquire(timeout=0.25):
        if stopped():
            if gave_up:
                yield gave_up()
            return
        yield waiting()
    try:
        yield from work
    finally:
        slot.release()


def preload() -> None:
    """Load the served models in the background so the first Run does not wait (failures show on Run)."""
    for name in {CONFIG.model, CONFIG.ar_model or CONFIG.model}:
        try:
            get_model(name)
        except ValueError as err:
            log.warning("%s", err)


def check_model_choice(name: str | None) -> None:
    """On a Space (SPACE_ID set) only the fixed SPACE_MODELS list may be served."""
    if os.environ.get("SPACE_ID") and (name or "default") not in SPACE_MODELS:
        raise ValueError(f"On a Space the model must be one of {', '.join(SPACE_MODELS)}; got {name!r}")


def get_model(name: str | None) -> tuple[Any, Any]:
    """The (model, tokenizer) for name, loaded on first use and cached; a ValueError says why loading failed."""
    key = name or "default"
    if key not in MODELS:
        with _LOAD_LOCK:
            if key not in MODELS:
                check_model_choice(name)
                try:
                    MODELS[key] = load(name, dtype=CONFIG.dtype) if CONFIG.dtype else load(name)
                except Exception as err:  # any failure becomes a message in the UI
                    log.exception("loading %s failed", key)
                    raise ValueError(f"Could not load model {key!r}: {err}") from err
                model = MODELS[key][0]
                log.info("loaded model %s from %s (%s)", key, getattr(model, "name_or_path", "?"), model.dtype)
    return MODELS[key]


_FORWARD: dict[str, float] = {}


def forward_seconds(name: str | None) -> float | None:
    """How long one cached one-token forward of a loaded model takes here (timed once, median of 5); None when the
    model is not loaded yet (an estimate must not load it)."""
    key = name or "default"
    if key not in MODELS:
        return None
    if key not in _FORWARD:
        import statistics
        import time

        import torch
        from transformers import DynamicCache

        model, tokenizer = MODELS[key]
        ids = torch.tensor([tokenizer("How long does one forward take?")["input_ids"]], device=model.device)
        times = []
        with torch.inference_mode():
            cache = DynamicCache(config=model.config)
            model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
            for _ in range(5):
                start = time.perf_counter()
                model(input_ids=ids[:, -1:], past_key_values=cache, use_cache=True, logits_to_keep=1)
                times.append(time.perf_counter() - start)
                cache.crop(-1)
        _FORWARD[key] = statistics.median(times)
    return _FORWARD[key]


def model_label(name: str | None) -> str:
    """How the UI names a model."""
    return f"`{name}`" if name else "the embedded default (SmolLM2-135M-Instruct)"
