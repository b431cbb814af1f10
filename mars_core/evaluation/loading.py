"""What every measuring command runs on (mars-eval, mars-bench, mars-lm-eval): a model loaded, an adapter merged
into it when one is given, and its runtime prepared on this machine."""

from __future__ import annotations

from typing import Any

from ..load import load, merge_adapter
from ..runtime import Runtime, prepare


def load_prepared(name: str | None, adapter: str | None = None, *, dtype: str | None = None, device: str | None = None,
                  trust_remote_code: bool = False, **prepare_options: Any) -> tuple[Any, Any, Runtime]:
    """(model, tokenizer, runtime): mars_core.load(name), with a peft LoRA adapter merged in when one is given, and
    prepare(model, **prepare_options) after the merge (a runtime packs the weights it will serve)."""
    model, tokenizer = load(name, dtype=dtype, device=device, trust_remote_code=trust_remote_code)
    if adapter:
        model = merge_adapter(model, adapter)
    return model, tokenizer, prepare(model, **prepare_options)
