"""The models the app serves: set once at launch, loaded once per name (preloaded in the background), the ZeroGPU
wrapper, the app-wide generation slots every tab that runs a model waits in (in_a_slot), and the count of running
work."""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mars_core.load import load
from mars_core.runtime import Runtime, prepare, rows
from mars_core.runtime.linear import packed_bits
from mars_core.scheduler import Scheduler
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
    engine: str = "torch"  # what the race decodes on: "torch" or "llama.cpp" (studio.engine; other tabs: torch)
    llamacpp_weights: str = "bf16"  # llama.cpp's GGUF weight type: "f32", "bf16" or "q8_0"
    llamacpp_threads: int | None = None  # llama.cpp's threads (None: every core)
    llamacpp_invariant: bool = False  # llama.cpp forwards at two rows or more: verified is AR bit for bit, AR slower
    trainings: int = 1  # Train tab runs at once, all visitors together (each takes both cores of a small CPU)
    static: bool | None = None  # fixed widths, a cache allocated once (Runtime.static); None: prepare()'s choice
    compile: bool = False  # compile the served forward in the background once a model is ready (runtime/compiled.py)
    batching: bool = True  # visitors' race lanes share forwards (mars_core.scheduler; torch, greedy), else each race
    # decodes alone in a generation slot


CONFIG = AppConfig()
PRELOADING = False  # main() sets it when the models are prepared at start (else on the first Run)
MODELS: dict[str, tuple[Any, Any]] = {}  # loaded (model, tokenizer) by name: read-only once loaded
RUNTIMES: dict[str, Runtime] = {}  # each loaded model's runtime on this machine (mars_core.prepare), by name
DEFAULT = "default"  # the embedded model's key in these tables (its name is None)


def key_of(name: str | None) -> str:
    """The tables' key of a served model: its name, or DEFAULT for the embedded one."""
    return name or DEFAULT


# one model prepared or compiled at a time (held for the minute either may take on a first start): two at once on 2
# cores each take twice as long, and a compile's trace guards torch's global state, which a model's loading changes
# (transformers sets the default dtype while it builds a model): traced across one, the compile failed and the app
# served that model uncompiled from then on
PREPARE_LOCK = threading.Lock()
# the app-wide tables (generation slots, schedulers) found or made: held for microseconds, never while a model loads,
# so a Run on a ready model starts while another loads (the Train tab's base model, prepared at start)
_TABLES_LOCK = threading.Lock()
# how long a thread may keep the interpreter while another waits for it (sys.setswitchinterval; Python's own: 5 ms),
# set by app.main. A forward lets it go in every torch op and waits for it back after: beside a thread that runs
# Python without pause (the compile's tracing, a model's preparation: the app's first minute) every op waited up to
# the interval, and a race crawled (what it measured: CHANGELOG, docs/app.md#launching)
SWITCH_SECONDS = 1e-4
T = TypeVar("T")  # a frame: what a handler yields to the page
TRACKER = LoadTracker()  # the one shared counter: generations running now, for "adapt to load"
_SLOTS: dict[int, threading.Semaphore] = {}


def slots() -> threading.Semaphore:
    """The app-wide generation slots (CONFIG.concurrency of them). Handlers take one inside, rather than waiting
    in Gradio's queue, so a race exists from the moment it is submitted (see race.race)."""
    with _TABLES_LOCK:
        return _SLOTS.setdefault(CONFIG.concurrency, threading.Semaphore(CONFIG.concurrency))


WAITING = "Waiting for a free generation slot (others are decoding)…"


SLOT_POLL = 0.25  # seconds between looks for a free generation slot (Stop answers within it)
SLOT_AGAIN = 2.0  # seconds after which the waiting notice is sent again: each frame costs the app's one event loop
# (its gr.skip() outputs each build a component there), and Gradio closes a left page's generator only when it yields


def in_a_slot(work: Iterator[T], waiting: Callable[[], T], stopped: Callable[[], bool] = lambda: False,
              gave_up: Callable[[], T] | None = None) -> Iterator[T]:
    """Run the generator `work` in one of the app-wide generation slots: every tab that runs the model does. Until
    one is free, yield waiting() at once and then every SLOT_AGAIN s (the page says so, and a page that leaves ends
    the wait: Gradio closes the generator), and once more when the slot is had, before the work (a page that left
    meanwhile gives the slot back there); stopped while waiting (looked at every SLOT_POLL s), yield gave_up() and
    end."""
    slot = slots()
    waited = not slot.acquire(blocking=False)
    if waited:
        said = time.monotonic()
        yield waiting()
        while not slot.acquire(timeout=SLOT_POLL):
            if stopped():
                if gave_up:
                    yield gave_up()
                return
            if time.monotonic() - said >= SLOT_AGAIN:
                said = time.monotonic()
                yield waiting()
    try:
        if waited:
            yield waiting()
        yield from work
    finally:
        slot.release()


def preload() -> None:
    """Prepare the served models in the background so the first Run does not wait (failures show on Run); the page
    shows each one's stage meanwhile (status_markdown)."""
    for name in served():
        try:
            get_model(name)
        except ValueError as err:
            log.warning("%s", err)


def served() -> list[str | None]:
    """The names of the models the app serves: the MARS model, and the AR baseline when it is another."""
    return list(dict.fromkeys([CONFIG.model, CONFIG.ar_model or CONFIG.model]))


@dataclass
class Preparation:
    """Where one model's preparation stands: its stages (converting the GGUF file, merging the adapter, loading and
    timing this machine's kernels), the one running, when each began; the error, if it failed."""

    stages: list[str] = field(default_factory=list)
    stage: int = -1  # index of the running stage; len(stages) once ready
    started: float = field(default_factory=time.monotonic)
    stage_started: float = field(default_factory=time.monotonic)
    error: str | None = None

    def enter(self, key: str, stage: int) -> None:
        """Stage `stage` begins: said in the log and, through status_markdown, on the page."""
        self.stage, self.stage_started = stage, time.monotonic()
        if stage < len(self.stages):
            log.info("preparing model %s: step %d of %d: %s", key, stage + 1, len(self.stages), self.stages[stage])
        else:
            log.info("model %s ready, prepared in %.0f s", key, time.monotonic() - self.started)


PREPARING: dict[str, Preparation] = {}  # by name, from the first request to load it
CONVERT = "converting the GGUF file into a model folder (once: cached under MARS_CACHE)"
MERGE = "merging the MARS adapter into the weights (once: cached)"
LOAD = "loading the weights"
BUILD = "building our rows kernel for this CPU (once: cached under MARS_CACHE)"
PREPARE = ("packing this machine's kernels, checking width invariance and timing forwards by width "
           "(once per machine: cached)")
# Stages a module above this one adds before a model loads: name -> [(what it does, the call)] (studio.engine adds
# the race's llama.cpp engines): models imports nothing of the app's, the hook keeps it so.
EXTRA_STAGES: list[Callable[[str | None], list[tuple[str, Callable[[], Any]]]]] = []


def stages(name: str | None) -> list[tuple[str, Callable[[], Any]]]:
    """The stages that prepare `name`, as (what it does, the call that does it), skipping what the cache already
    holds: the embedded default converts its GGUF file and merges the shipped adapter before it loads; a .gguf file
    converts first; anything else only loads; then the runtime is prepared. The last stage returns (model, tokenizer,
    runtime)."""
    loading = importlib.import_module("mars_core.load")  # the module (mars_core.load is also the function)
    loaded: list[tuple[Any, Any]] = []

    def final() -> tuple[Any, Any]:
        loaded.append(load(name, dtype=CONFIG.dtype) if CONFIG.dtype else load(name))
        return loaded[0]

    def runtime() -> tuple[Any, Any, Runtime]:
        model, tokenizer = loaded[0]
        return model, tokenizer, prepare(model, static=CONFIG.static)

    done = lambda folder: (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))  # noqa: E731
    steps: list[tuple[str, Callable[[], Any]]] = []
    try:
        if name is None:
            gguf = loading.smollm2_gguf_path()
            if not done(loading.gguf_cache_dir(gguf)):
                steps.append((CONVERT, lambda: loading.convert_gguf(gguf)))
            adapter = (None if os.environ.get("MARS_DEFAULT_ADAPTER", None) in ("", "none")
                       else loading.default_adapter_dir())
            if adapter is not None and not done(loading.merged_default_dir(adapter)):
                steps.append((MERGE, lambda: loading.build_merged_default(adapter)))
        elif str(name).lower().endswith(".gguf") and os.path.isfile(name):
            if not done(loading.gguf_cache_dir(name)):
                steps.append((CONVERT, lambda: loading.convert_gguf(name)))
    except Exception:  # noqa: BLE001 - whatever is missing, load() says it as the failure's message
        steps = []
    for extra in EXTRA_STAGES:  # the race's llama.cpp engines (studio.engine)
        steps += extra(name)
    if rows.must_build():
        if steps:  # the kernel's compiler process runs beside them on the other core; BUILD waits for what is left
            steps[0] = (steps[0][0], _beside_the_build(steps[0][1], loading))
        steps.append((BUILD, rows.why_not))
    return [*steps, (LOAD, final), (PREPARE, runtime)]


def _beside_the_build(call: Callable[[], Any], loading: Any) -> Callable[[], Any]:
    """`call`, once our rows kernel's build has started in the background (load.build_rows_kernel_meanwhile)."""
    def both() -> Any:
        loading.build_rows_kernel_meanwhile(loading.resolve_device())
        return call()
    return both


def status_markdown() -> tuple[str, bool]:
    """The page's line on the served models (and whether every one is ready): each one's preparation stage, step k
    of n and its seconds so far, or its failure."""
    lines, ready = [], True
    for name in served():
        key = key_of(name)
        if key in MODELS:
            continue
        ready = False
        prep = PREPARING.get(key)
        label = model_label(name)
        if prep is None:
            lines.append(f"{label} is prepared on the first Run (the app was started with --no-preload).")
        elif prep.error:
            lines.append(f"⚠ {label} could not be prepared: {prep.error}")
        elif 0 <= prep.stage < len(prep.stages):
            now = time.monotonic()
            lines.append(f"**Preparing {label}: step {prep.stage + 1} of {len(prep.stages)}, "
                         f"{prep.stages[prep.stage]}** · {now - prep.stage_started:.0f} s in this step, "
                         f"{now - prep.started:.0f} s in all (a first start takes 1–3 min on a 2-core CPU, a warm one "
                         "seconds) · Run waits until it is ready")
        else:
            lines.append(f"**Preparing {label}…**")
    for what, began in list(BACKGROUND.items()):
        lines.append(f"{what}: {time.monotonic() - began:.0f} s so far")
    for key, (stage, began, stage_began) in list(COMPILING.items()):
        now = time.monotonic()
        lines.append(f"Compiling {model_label(None if key == DEFAULT else key)}'s forward in the background: "
                     f"{stage}, {now - stage_began:.0f} s in this step, {now - began:.0f} s in all (minutes on a "
                     "2-core CPU, less once its artifacts are kept) · Runs are served uncompiled meanwhile")
    return "  \n".join(lines), ready


def ready(name: str | None) -> bool:
    """Whether the model `name` is loaded."""
    return key_of(name) in MODELS


def check_model_choice(name: str | None) -> None:
    """On a Space (SPACE_ID set) only the fixed SPACE_MODELS list may be served."""
    if os.environ.get("SPACE_ID") and key_of(name) not in SPACE_MODELS:
        raise ValueError(f"On a Space the model must be one of {', '.join(SPACE_MODELS)}; got {name!r}")


def get_model(name: str | None) -> tuple[Any, Any]:
    """The (model, tokenizer) for name, prepared on first use stage by stage (PREPARING says which, for the page and
    the log) and cached; a ValueError says why loading failed."""
    key = key_of(name)
    if key not in MODELS:
        with PREPARE_LOCK:
            if key not in MODELS:
                check_model_choice(name)
                steps = stages(name)
                prep = PREPARING[key] = Preparation([what for what, _ in steps])
                try:
                    for k, (_, step) in enumerate(steps):
                        prep.enter(key, k)
                        result = step()
                    model, tokenizer, RUNTIMES[key] = result
                    MODELS[key] = model, tokenizer
                except Exception as err:  # any failure becomes a message in the UI
                    log.exception("loading %s failed", key)
                    prep.error = f"{type(err).__name__}: {err}" if not isinstance(err, ValueError) else str(err)
                    raise ValueError(f"Could not load model {key!r}: {err}") from err
                prep.enter(key, len(steps))
                model = MODELS[key][0]
                log.info("loaded model %s from %s (%s)", key, getattr(model, "name_or_path", "?"), model.dtype)
                if CONFIG.compile:
                    compile_in_background(key)
    return MODELS[key]


BACKGROUND: dict[str, float] = {}  # work the page waits on besides the models (its line on the status, when it began)
COMPILING: dict[str, tuple[str, float, float]] = {}  # by name while its forward compiles: (stage, began, stage began)
COMPILE_WAITING = "waiting for another model's preparation or compile to end (one at a time)"


def compile_in_background(key: str) -> None:
    """Compile a ready model's forward in a thread (runtime/compiled.py: artifacts kept under MARS_CACHE, the width
    check run on the compiled forward); it serves once it passes, and until then, or where it cannot compile, the
    uncompiled forward serves and the runtime's forward_note says why."""
    model, runtime = MODELS[key][0], RUNTIMES[key]
    began = time.monotonic()
    COMPILING[key] = (COMPILE_WAITING, began, began)

    def work() -> None:
        from dataclasses import replace

        from mars_core.runtime.compiled import compile_runtime

        try:  # COMPILING forgets the key whatever happens: wait_compiled and the page's status wait on it
            with PREPARE_LOCK:
                COMPILING[key] = ("compiling", began, time.monotonic())
                try:
                    done = compile_runtime(model, runtime, progress=lambda stage: COMPILING.__setitem__(
                        key, (stage, began, time.monotonic())))
                except Exception as err:  # noqa: BLE001 - whatever fails, the uncompiled forward serves and says why
                    done = replace(runtime, forward_note=f"uncompiled: {type(err).__name__}: {err}"[:300])
                RUNTIMES[key] = done
        finally:
            COMPILING.pop(key, None)
        log.info("model %s forward: %s (%.0f s)", key, done.forward_note, time.monotonic() - began)

    threading.Thread(target=work, name=f"compile-{key}", daemon=True).start()


def wait_compiled(name: str | None, poll: float = 0.5) -> None:
    """Return once `name`'s forward is no longer compiling (compiled, or left uncompiled and said why): a recording
    times the forward visitors get once the page is ready, not the uncompiled one serving meanwhile."""
    while key_of(name) in COMPILING:
        time.sleep(poll)


def forward_note(name: str | None) -> str:
    """What runs a served model's forward, for the small print: "compiled …", "compiling (…)" or "uncompiled…", and
    where its linear layers run on our rows kernel (machine.NAMES' builds; 8-bit weights where so served), that."""
    key = key_of(name)
    runtime = RUNTIMES.get(key)
    ours = runtime is not None and runtime.rows_linears
    bits = " (8-bit weights)" if ours and packed_bits(runtime.linears) == 8 else ""
    kernel = f"; linear layers on our {rows.NAMES.get(rows.flavor(), '')} kernel{bits}" if ours else ""
    if key in COMPILING:
        stage, began, _ = COMPILING[key]
        return f"uncompiled while its compiled forward is {stage}, {time.monotonic() - began:.0f} s in{kernel}"
    return (runtime.forward_note if runtime is not None else "uncompiled") + kernel


def get_runtime(name: str | None) -> Runtime:
    """The runtime get_model prepared for `name` (prepared with it on first use); a plain one (torch's kernels,
    nothing promised) for a model registered without one."""
    get_model(name)
    return RUNTIMES.get(key_of(name), Runtime())


# by model name: (the model and the runtime it was made for, the scheduler: the one thread that decodes its race
# lanes, CONFIG.batching)
SCHEDULERS: dict[str, tuple[Any, Runtime | None, Scheduler]] = {}


def scheduler(name: str | None) -> Scheduler:
    """The scheduler of `name`'s race lanes, over its runtime now (a runtime compiled since gets a new one: the
    old one ends with its requests)."""
    model, tokenizer = get_model(name)
    key = key_of(name)
    with _TABLES_LOCK:
        runtime = RUNTIMES.get(key)
        found = SCHEDULERS.get(key)
        if found is None or found[0] is not model or found[1] is not runtime:
            found = SCHEDULERS[key] = (model, runtime, Scheduler(model, tokenizer, runtime or Runtime()))
        return found[2]


def prepare_in_background(name: str | None) -> None:
    """Start preparing `name` in a thread unless it is loaded or being prepared (a Run polls PREPARING meanwhile)."""
    key = key_of(name)
    prep = PREPARING.get(key)
    if key in MODELS or (prep is not None and prep.error is None):
        return
    PREPARING[key] = Preparation(["starting"], stage=0)

    def work() -> None:
        try:
            get_model(name)
        except ValueError:
            pass  # PREPARING[key].error holds it

    threading.Thread(target=work, name=f"prepare-{key}", daemon=True).start()


def preparing(names: list[str | None], stopped: Callable[[], bool] = lambda: False) -> Iterator[str]:
    """Until every model in `names` is loaded: start preparing it (unless the preload already does) and yield, about
    twice a second, what the page should say (the stage, step k of n, seconds so far). A failed preparation raises
    its ValueError (get_model says why)."""
    for name in names:
        if not ready(name):
            prepare_in_background(name)
        while not ready(name) and not stopped():
            prep = PREPARING.get(key_of(name))
            if prep is not None and prep.error:
                get_model(name)  # tries once more, in this thread: its ValueError is the message
            yield status_markdown()[0]
            time.sleep(0.5)


_FORWARD: dict[str, float] = {}


def forward_seconds(name: str | None) -> float | None:
    """How long one cached one-token forward of a loaded model takes here (timed once: the median of 5 after a
    warm-up); None when the model is not loaded yet (an estimate must not load it)."""
    key = key_of(name)
    if key not in MODELS:
        return None
    if key not in _FORWARD:
        import torch
        from transformers import DynamicCache

        from mars_core.runtime.forward import with_cache
        from mars_core.runtime.timing import median_seconds

        model, tokenizer = MODELS[key]
        ids = torch.tensor([tokenizer("How long does one forward take?")["input_ids"]], device=model.device)
        with torch.inference_mode(), RUNTIMES[key].active():
            cache = DynamicCache(config=model.config)
            model(input_ids=ids, logits_to_keep=1, **with_cache(model, cache))
            step = lambda: model(input_ids=ids[:, -1:], logits_to_keep=1, **with_cache(model, cache))  # noqa: E731
            _FORWARD[key] = median_seconds(step, 5, model.device, after=lambda: cache.crop(-1))
    return _FORWARD[key]


def model_label(name: str | None) -> str:
    """How the UI names a model."""
    return f"`{name}`" if name else "the embedded default (SmolLM2-135M-Instruct)"
