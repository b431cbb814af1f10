"""8-bit weights (runtime/grid.py): the model served rounded onto the int8 grid, packed as int8 where the rows
kernel's AVX2 path serves, and decoded as any model is: verified = one-token = alone, eager and compiled."""

from __future__ import annotations

import pytest
import torch

from mars_core.runtime import ATTENTION, grid, prepare
from mars_core.runtime.compiled import compile_runtime
from mars_core.runtime.linear import linear_groups, packed_bits

from guarantees import one_token_everywhere
from tiny import tiny_llama

PROMPTS = ["Count from 1 to 9:", "The capital of France", "Say hi"]


def test_auto_is_int8_exactly_where_the_int8_path_serves_a_bf16_model(monkeypatch):
    monkeypatch.setattr(grid, "int8_serves", lambda: None)
    assert grid.resolve_weights(None, torch.bfloat16) == "int8" == grid.resolve_weights("auto", torch.bfloat16)
    assert grid.resolve_weights("auto", torch.float32) == "bf16" == grid.resolve_weights("bf16", torch.bfloat16)
    with pytest.raises(ValueError, match="the model is not bf16"):
        grid.resolve_weights("int8", torch.float32)
    monkeypatch.setattr(grid, "int8_serves", lambda: "no rows kernel here")
    assert grid.resolve_weights("auto", torch.bfloat16) == "bf16"
    with pytest.raises(ValueError, match="cannot serve here: no rows kernel here"):
        grid.resolve_weights("int8", torch.bfloat16)
    with pytest.raises(ValueError, match="Unknown weights 'int4'"):
        grid.resolve_weights("int4", torch.bfloat16)


@pytest.mark.skipif(grid.int8_serves() is not None, reason=f"no int8 path here: {grid.int8_serves()}")
def test_a_model_on_the_grid_is_served_from_int8_copies_and_keeps_the_guarantees(tokenizer, tmp_path):
    """round_to_grid rounds every packed weight (the tied head too) once; prepare() then packs them as int8 (the
    record says 8 bits), the width check passes, and verified = one-token = each prompt alone, eager and compiled."""
    torch.manual_seed(0)
    model = tiny_llama(len(tokenizer), attn_implementation=ATTENTION).to(torch.bfloat16)
    assert grid.round_to_grid(model) == len({id(lin.weight) for g in linear_groups(model) for lin in g})
    assert all(grid.on_grid(lin.weight) for g in linear_groups(model) for lin in g)
    eager = prepare(model, cache_dir=tmp_path, measure_cost=False)
    assert packed_bits(eager.linears) == 8 and eager.record(model)["weight_bits"] == 8
    for runtime in (eager, compile_runtime(model, eager, tmp_path)):
        assert runtime.width_check.identical, runtime.width_check
        one_token_everywhere(model, tokenizer, PROMPTS, runtime)
