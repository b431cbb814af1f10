"""The one forward every decoder, the width check and the cost curve run: a model's decoder over the tokens a step
feeds, written into the slot cache (slots.py) under the runtime's kernels. An Engine (llama.cpp) answers the same
calls itself.

    cache = new_cache(model, batch, slots)
    hidden = feed(model, cache, ids, positions, seen, fed, runtime=runtime)   # [b, W, H]
    logits = head(model, hidden[:, rows], runtime)
    keep(cache, advance)                                             # the first advance[i] fed columns stay

seen [b, W, W] says which fed columns each column sees (itself included); every column also sees its sample's kept
tokens. fed [b, W] says which columns are real for a sample.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager, nullcontext
from functools import cache as once
from typing import TYPE_CHECKING, Any

import torch
import torch._dynamo.config as dynamo_config
import torch.fx.experimental._config as fx_config

from ..attention import as_model_mask
from .attention import keys_by_rows
from .engine import Engine
from .graphs import capturable, replayed
from .rows import feeding
from .slots import SlotCache, borrowed
from .watch import make_key, make_of

if TYPE_CHECKING:
    from .runtime import Runtime


def new_cache(model: torch.nn.Module | Engine, batch: int, slots: int):
    """A cache for one decode of `batch` samples and `slots` positions, borrowed until the decode ends (an Engine
    keeps its own): use as a context manager."""
    if isinstance(model, Engine):
        return nullcontext(model.new_cache())
    return borrowed(model, batch, slots, replays_of(model) if capturable(model.device) else None)


def replays_of(model: torch.nn.Module) -> tuple:
    """What a CUDA graph captured over the model reads beyond its inputs: its make (watch.make_of: its modules, their
    attributes, its parameters' shapes) and where each parameter and buffer lies (a graph reads them at the addresses
    it was captured at: a weight given new storage, `p.data = ...`, a model moved away and back, is another model
    to it). Values written in place are read where they lie: the same graph serves them."""
    where = tuple(t.data_ptr() for t in (*model.parameters(), *model.buffers()))
    return make_key(make_of(model)), where


@once
def _cache_keyword(cls: type) -> str:
    """The KV cache's keyword in cls.forward: `cache` in newer transformers (`past_key_values` warns there and is
    removed in 5.40), `past_key_values` before."""
    return "cache" if "cache" in inspect.signature(cls.forward).parameters else "past_key_values"


def with_cache(model: torch.nn.Module, cache: Any) -> dict[str, Any]:
    """The keyword arguments that pass `cache` to model's forward and keep it growing, whatever its version."""
    return {_cache_keyword(type(model)): cache, "use_cache": True}


@contextmanager
def symbolic_sizes() -> Iterator[None]:
    """Inside, a compiled graph traced now specialises no size, 1 included: one graph for every width and batch, so a
    row runs the same code in each (runtime/compiled.py). Python floats (eps, scaling, norm_type) stay constants: as
    symbols, inductor's pass that turns them into tensors gave up on them and the trace began again, which doubled
    the time to a compiled forward, warm or cold."""
    with fx_config.patch(backed_size_oblivious=True, use_duck_shape=False), dynamo_config.patch(specialize_float=True):
        yield


def visible(template: torch.Tensor, fed: torch.Tensor) -> torch.Tensor:
    """seen [b, W, W]: column q sees column k where the template [W, W] allows it and k is fed; always itself."""
    width = template.shape[0]
    eye = torch.eye(width, dtype=torch.bool, device=fed.device)
    return (template.to(fed.device)[None] & fed[:, None, :]) | eye


def causal_seen(fed: torch.Tensor) -> torch.Tensor:
    """seen [b, W, W] of a causal run (a prompt, a measured forward): each column sees the fed columns up to itself."""
    width = fed.shape[1]
    return visible(torch.ones(width, width, dtype=torch.bool, device=fed.device).tril(), fed)


def feed(model: torch.nn.Module | Engine, cache: SlotCache | Any, ids: torch.Tensor, positions: torch.Tensor,
         seen: torch.Tensor, fed: torch.Tensor, *, runtime: Runtime, capture: bool = True) -> torch.Tensor:
    """One forward through the decoder: the last hidden states [b, W, H] (logits are read later, where needed, with
    head()). On a GPU a static runtime replays each width fed as one CUDA graph, captured on first use (capture=False:
    a one-off width, the prompt's, runs eagerly)."""
    return fed_then(model, cache, ids, positions, seen, fed, runtime=runtime, capture=capture)


def fed_then(model: torch.nn.Module | Engine, cache: SlotCache | Any, ids: torch.Tensor, positions: torch.Tensor,
             seen: torch.Tensor, fed: torch.Tensor, *inputs: torch.Tensor, runtime: Runtime, capture: bool = True,
             then: Callable[..., Any] | None = None, then_key: Hashable = None) -> Any:
    """feed(), then then(hidden, *inputs) in the same CUDA graph where the forward is captured (a decoder's step after
    its forward: the head, the argmax, acceptance), so a step is one replay; then_key names what `then` computes
    (the graph's key with the width, the cache's length and the runtime's forward_key). Elsewhere the same calls,
    eagerly."""
    if isinstance(model, Engine):
        hidden = model.hidden_states(ids, positions, seen, cache)
        return hidden if then is None else then(hidden, *inputs)
    positions = positions.clamp_min(0)

    def step(ids: torch.Tensor, positions: torch.Tensor, seen: torch.Tensor, fed: torch.Tensor, *rest: torch.Tensor
             ) -> Any:
        """The forward and what follows it, over these tensors (a CUDA graph's input buffers where captured)."""
        hidden = _forward(model, cache, ids, positions, seen, fed, runtime=runtime)
        return hidden if then is None else then(hidden, *rest)

    if capture and runtime.static and capturable(ids.device):
        key = (ids.shape[1], cache.slots, runtime.forward_key(), then_key)
        return replayed(cache.graphs, key, step, ids, positions, seen, fed, *inputs)
    return step(ids, positions, seen, fed, *inputs)


def _forward(model: torch.nn.Module, cache: SlotCache, ids: torch.Tensor, positions: torch.Tensor, seen: torch.Tensor,
             fed: torch.Tensor, *, runtime: Runtime) -> torch.Tensor:
    index = cache.place(fed)
    mask = cache.mask(seen, index)
    plan = cache.key_plan(index, full=runtime.static, alone=runtime.units_alone) if runtime.rows else None
    decoder, mask = model.get_decoder(), as_model_mask(mask, model)
    fed = fed if runtime.fed_rows_only else None  # rows kernel's linears compute fed rows only (rows.feeding)
    if runtime.compiled is None or not runtime.compiled.serves:  # not compiled, or for another make (watch.py)
        with runtime.active(), keys_by_rows(plan), feeding(fed):
            return decoder(input_ids=ids, position_ids=positions, attention_mask=mask,
                           **with_cache(decoder, cache.kv)).last_hidden_state
    with torch.inference_mode():  # fresh inference tensors, no views: what the one compiled graph was traced on
        ids, positions, mask = (t.clone(memory_format=torch.contiguous_format) for t in (ids, positions, mask))
    with runtime.active(), keys_by_rows(plan), feeding(fed), torch.inference_mode():
        return runtime.compiled(decoder, input_ids=ids, position_ids=positions, attention_mask=mask,
                                **with_cache(decoder, cache.kv))


def keep(cache: SlotCache | Any, advance: torch.Tensor) -> None:
    """After a forward: its first advance[i] fed columns stay in sample i's cache (their slots are their positions);
    the rest is scratch."""
    cache.keep(advance)


def head(model: torch.nn.Module | Engine, hidden: torch.Tensor, runtime: Runtime) -> torch.Tensor:
    """Logits of hidden rows [..., H] through the model's output head, under the runtime's kernels."""
    if isinstance(model, Engine):
        return model.head(hidden)
    with runtime.active():
        return model.get_output_embeddings()(hidden)
