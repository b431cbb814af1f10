"""runtime/forward.py: a decoding forward under the runtime's kernels."""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch

from mars_core.runtime import ATTENTION, causal_seen, feed, new_cache, prepare, rows
from mars_core.runtime import forward as forward_module
from mars_core.runtime.grid import int8_serves, round_to_grid
from mars_core.runtime.slots import cache_slots

from tiny import tiny_llama


@pytest.mark.skipif(not rows.rows_kernel(), reason=rows.why_not() or "")
@pytest.mark.parametrize("int8", [False, True], ids=["bf16", "int8"])
def test_a_padded_column_is_not_computed_and_the_fed_ones_keep_their_bits(monkeypatch, int8):
    """A batch's samples are fed as wide as the widest (sample 1 here pads 2 of 6 columns); the forward tells the rows
    kernel which rows are fed (rows.feeding), so a padded row's linears are not computed (its hidden state is not the
    one computing it gives) while every fed row keeps the bits it has with every row computed; with bf16 weights and
    with 8-bit ones (the grid's, where this CPU's kernel has them)."""
    model = tiny_llama(300, attn_implementation=ATTENTION).to(torch.bfloat16)
    if int8:
        if int8_serves() is not None:
            pytest.skip(int8_serves())
        round_to_grid(model)
    runtime = prepare(model, check=False, measure_cost=False)
    assert runtime.rows and runtime.linears and runtime.fed_rows_only  # what verified decoding prices by (plan)
    ids = torch.randint(300, (2, 6), generator=torch.Generator().manual_seed(0))
    positions = torch.arange(6).expand(2, -1)
    fed = torch.ones(2, 6, dtype=torch.bool)
    fed[1, 4:] = False
    seen = causal_seen(fed)

    def hidden() -> torch.Tensor:
        with torch.inference_mode(), new_cache(model, 2, cache_slots(0, 6)) as cache:
            return feed(model, cache, ids, positions, seen, fed, runtime=runtime)

    fed_only = hidden()
    monkeypatch.setattr(forward_module, "feeding", lambda fed: nullcontext())  # every row computed
    every_row = hidden()
    assert torch.equal(fed_only[fed], every_row[fed])
    assert not torch.equal(fed_only[~fed], every_row[~fed])


def test_only_the_rows_kernel_computes_fed_rows_only():
    """Runtime.fed_rows_only: a forward on torch's or oneDNN's linear layers computes every row it is given (a
    finished sample's too), so verified decoding prices width at the batch it began with there."""
    from mars_core.runtime import Runtime

    assert not Runtime().fed_rows_only
    model = tiny_llama(300, attn_implementation=ATTENTION)  # fp32: the rows kernel serves bf16 only
    runtime = prepare(model, check=False, measure_cost=False)
    assert not runtime.rows_linears and not runtime.fed_rows_only

