"""The machine record's words: every rows-kernel build is named from one table (machine.NAMES) in the caption line,
the records' tables and the flavor check alike."""

import pytest

from mars_core.evaluation.tables import _records
from mars_core.machine import ISA_FLAGS, NAMES, cpu_core, machine_line
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


def _cpuinfo(vendor: str, family: int, model: int) -> str:
    return f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\nmodel name\t: x\n"


@pytest.mark.parametrize("family,model,core", [(23, 1, "Zen 1"), (23, 8, "Zen 1"), (23, 0x50, "Zen 1"),
                                                (23, 49, "Zen 2"), (23, 0x71, "Zen 2"), (25, 1, "Zen 3"),
                                                (25, 33, "Zen 3"), (25, 17, "Zen 4"), (25, 97, "Zen 4"),
                                                (25, 160, "Zen 4"), (26, 2, "Zen 5"), (26, 0x44, "Zen 5")])
def test_an_amd_cores_generation_is_named_in_the_caption_and_the_tables(family, model, core):
    assert cpu_core(_cpuinfo("AuthenticAMD", family, model)) == core
    machine = {**INFO, "core": core}
    assert machine_line(machine).startswith(f"AMD EPYC {core} (avx512_bf16")
    assert _records.cpu_cell(machine) == f"AMD EPYC ({core}), AVX512-BF16"


def test_a_core_not_told_is_not_named():
    assert cpu_core(_cpuinfo("GenuineIntel", 6, 143)) is None  # Intel's families: not named
    assert cpu_core(_cpuinfo("AuthenticAMD", 21, 2)) is None  # older than Zen
    assert cpu_core(_cpuinfo("AuthenticAMD", 25, 0xB0)) is None  # a model Linux does not name
    assert cpu_core(_cpuinfo("AuthenticAMD", 26, 0x50)) is None  # nor a newer core than Zen 5
    assert cpu_core("model name\t: x\n") is None
    assert cpu_core("vendor_id\t: AuthenticAMD\ncpu family\t: 2x\nmodel\t\t: 1\n") is None
    assert _records.cpu_cell(INFO) == "AMD EPYC, AVX512-BF16"  # a record without one reads as before
