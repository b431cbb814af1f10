"""The machine record's words: every rows-kernel build is named from one table (machine.NAMES) in the caption line,
the records' tables and the flavor check alike."""

import pytest

from mars_core.evaluation.tables import _records
from mars_core.machine import ISA_FLAGS, NAMES, machine_line
from mars_core.runtime import rows

INFO = {"cpu": "AMD EPYC", "isa": ["avx512_bf16", "avx512f", "avx2"], "threads": 2, "torch": "2.13.0",
        "dtype": "bfloat16"}


@pytest.mark.parametrize("kind", list(NAMES))
def test_each_rows_build_is_named_in_the_caption_and_the_tables(kind):
    line = machine_line({**INFO, "linear": f"{kind}_rows", "weight_bits": 8})
    assert line.endswith(f", {NAMES[kind]} rows linear (8-bit weights)")
    assert _records.linear({"linear": f"{kind}_rows"}) == f"{NAMES[kind]} rows kernel"


def test_other_linears_and_unknown_ones():
    assert machine_line({**INFO, "linear": "onednn_packed"}).endswith(", oneDNN-packed linear")
    assert machine_line({**INFO, "linear": "mystery_rows"}).endswith("bfloat16")  # an unknown build: not named
    assert machine_line(INFO).endswith("bfloat16")
    assert _records.linear({"linear": "torch"}) == "torch's own"


def test_one_table_of_kinds():
    assert rows.NAMES is NAMES  # the flavor check's words are these
    assert set(rows.FLAVORS) == set(NAMES)
    assert len(ISA_FLAGS) == len(NAMES)  # a kind's flag, then its name, fastest first
    assert _records.isa({"isa": ["avx512f", "avx2"]}) == "AVX-512"
    assert _records.isa({"isa": ["amx_bf16", "avx512_bf16", "avx512f", "avx2"]}) == "AMX"
