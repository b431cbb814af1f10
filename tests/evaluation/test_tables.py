"""python -m mars_core.evaluation.tables: every table in README.md and docs/*.md is what the kept records render
(a table edited by hand, or a record changed without rendering, fails here), a marker naming no table fails, a
synthetic records folder renders as expected, and --check exits non-zero on a doctored page."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mars_core.evaluation import tables as T
from mars_core.evaluation.tables import _records as R
from mars_core.evaluation.tables import readme, speed

ROOT = T.ROOT


def copy_pages(to: Path) -> Path:
    """README.md and docs/*.md under `to`, as the checkout has them."""
    (to / "docs").mkdir(parents=True)
    shutil.copy(ROOT / "README.md", to / "README.md")
    for page in (ROOT / "docs").glob("*.md"):
        shutil.copy(page, to / "docs" / page.name)
    return to


@pytest.fixture(scope="module")
def rendered() -> dict[Path, str]:
    return T.render(ROOT)


@pytest.mark.parametrize("page", T.pages(ROOT), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_page_is_as_its_records_render_it(page, rendered):
    assert rendered[page] == page.read_text(), (
        f"{page.relative_to(ROOT)} differs from its records: run python -m mars_core.evaluation.tables")


def test_every_marker_names_a_table_and_every_table_is_on_a_page():
    assert T.check(ROOT) == []


def test_the_pages_hold_tables():
    names = {m.group(1) for page in T.pages(ROOT) for m in T.MARKER.finditer(page.read_text())}
    assert {"readme.headline", "speed.avx512_bf16", "speed.identity"} <= names
    assert set(T.tables()) == names


def test_a_marker_naming_no_table_fails(tmp_path):
    root = copy_pages(tmp_path)
    page = root / "docs" / "speed.md"
    page.write_text(page.read_text() + "\n<!-- table speed.nonesuch -->\n| a |\n|---|\n\n<!-- /table -->\n")
    assert T.check(root) == ["docs/speed.md: speed.nonesuch: no such table"]
    assert T.main(["--check", "--root", str(root)]) == 1
    assert T.main(["--root", str(root)]) == 1  # rendering keeps it as it is, and says so
    assert "speed.nonesuch" in page.read_text()


def test_check_exits_non_zero_on_a_doctored_page_and_render_mends_it(tmp_path, capsys):
    root = copy_pages(tmp_path)
    page = root / "docs" / "speed.md"
    text = page.read_text()
    start = text.index("<!-- table speed.avx512_bf16 -->")
    row = text.index("\n| batch 1", start) + 1
    page.write_text(text[:row] + text[row:].replace("**", "", 2))  # one verified figure no longer bold
    done = subprocess.run([sys.executable, "-m", "mars_core.evaluation.tables", "--check", "--root", str(root)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "docs/speed.md: speed.avx512_bf16 differs from its records" in done.stdout
    assert T.main(["--root", str(root)]) == 0
    assert page.read_text() == text and T.check(root) == []
    assert T.main(["--check", "--root", str(root)]) == 0
    assert "every table is as rendered" in capsys.readouterr().out


def bench_row(method, tps, tpf=1.0, batch=1, threshold=None, weights=None):
    return {"method": method, "category": "all", "batch_size": batch, "threshold": threshold, "weights": weights,
            "tokens_per_second": tps, "tokens_per_forward": tpf}


def bench_record(machine, rows, commit="abc1234", date="2026-01-02"):
    return {"provenance": {"commit": commit, "date": date, "source": "measured at"}, "machine": machine,
            "split": "heldout", "prompts": 2, "max_new_tokens": 8, "rows": rows}


AVX2 = {"cpu": "AMD EPYC", "isa": ["avx2"], "threads": 2, "device": "cpu", "dtype": "float32"}
AMX = {"cpu": "Intel(R) Xeon(R) Processor", "isa": ["amx_bf16", "avx512_bf16", "avx512f", "avx2"], "threads": 2,
       "device": "cpu", "dtype": "bfloat16"}


def write(path: Path, record: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def test_a_tiny_records_folder_renders_as_expected(tmp_path):
    """A kind's table holds every record of that machine kind and dtype, whatever its file is called, one row per
    batch and forward, each naming its machine, commit and date; the other kinds' records stay out."""
    write(tmp_path / "speed" / "mine.json", bench_record(AVX2, [
        bench_row("hf_generate", 10.0), bench_row("hf_prompt_lookup", 11.0), bench_row("ar", 12.0),
        bench_row("mars_verified", 20.0, 2.5, threshold=0.3), bench_row("llamacpp_ar", 25.0, weights="f32"),
        bench_row("hf_generate", 30.0, batch=4), bench_row("mars_verified", 33.0, 1.5, batch=4, threshold=0.3)]))
    write(tmp_path / "speed" / "other.json", bench_record(AMX, [
        bench_row("hf_generate", 1.0), bench_row("mars_verified", 2.0, 2.0, threshold=0.3)]))
    head = ("| run | `generate` tokens/s | one-token | verified | verified ÷ one-token | tokens per forward | prompt "
            "lookup | llama.cpp one-token (verified ÷ it) | machine | measured |\n" + "|---" * 10 + "|")
    assert speed.TABLES["avx2_fp32"](tmp_path) == head + (
        "\n| batch 1, 2 held-out × 8, eager | 10.0 | 12.0 (1.20×) | **20.0** (2.00×) | 1.67× | 2.50 | 11.0 (1.10×) | "
        "F32 25.0 (0.80×) | AMD EPYC, AVX2, fp32, 2 threads | measured at `abc1234`, 2026-01-02 |"
        "\n| batch 4, 2 held-out × 8, eager | 30.0 | – | **33.0** (1.10×) | – | 1.50 | – | – | "
        "AMD EPYC, AVX2, fp32, 2 threads | measured at `abc1234`, 2026-01-02 |")
    assert "Intel Xeon, AMX, bf16, 2 threads" in speed.TABLES["amx_bf16"](tmp_path)
    with pytest.raises(FileNotFoundError, match="avx512_bf16"):
        speed.TABLES["avx512_bf16"](tmp_path)

    # rendered into a page between its markers, from this folder alone
    root = tmp_path / "checkout"
    (root / "docs").mkdir(parents=True)
    (root / "README.md").write_text("# x\n\n<!-- table t.avx2 -->\nstale\n<!-- /table -->\n\nafter\n")
    registry = {"t.avx2": speed.TABLES["avx2_fp32"]}
    text = T.render(root, tmp_path, registry)[root / "README.md"]
    assert text == f"# x\n\n<!-- table t.avx2 -->\n{speed.TABLES['avx2_fp32'](tmp_path)}\n\n<!-- /table -->\n\nafter\n"
    assert T.check(root, tmp_path, registry) == ["README.md: t.avx2 differs from its records"]
    (root / "README.md").write_text(text)
    assert T.check(root, tmp_path, registry) == []


def test_a_record_without_provenance_is_named_not_rendered(tmp_path):
    record = bench_record(AVX2, [bench_row("hf_generate", 1.0), bench_row("mars_verified", 2.0, 2.0, threshold=0.3)])
    del record["provenance"]
    write(tmp_path / "speed" / "new.json", record)
    root = tmp_path / "checkout"
    (root / "docs").mkdir(parents=True)
    (root / "README.md").write_text("<!-- table t.avx2 -->\n<!-- /table -->\n")
    problems = T.check(root, tmp_path, {"t.avx2": speed.TABLES["avx2_fp32"]})
    assert len(problems) == 1 and "t.avx2" in problems[0] and "--stamp" in problems[0]


def test_stamp_writes_the_provenance_first_and_keeps_the_file_s_indent(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"machine": {"cpu": "x"}, "rows": []}, indent=1) + "\n")
    assert T.main(["--stamp", str(path), "--commit", "0123abc", "--date", "2026-02-03"]) == 0
    text = path.read_text()
    assert text.startswith('{\n "provenance": {\n  "commit": "0123abc",\n  "date": "2026-02-03",\n')
    assert json.loads(text) == {"provenance": {"commit": "0123abc", "date": "2026-02-03", "source": "measured at"},
                                "machine": {"cpu": "x"}, "rows": []}
    assert R.provenance(json.loads(text)) == "measured at `0123abc`, 2026-02-03"


@pytest.mark.parametrize("folder", ["speed", "identity", "gpu_h100", "watch", "load_test"])
def test_every_speed_record_names_its_provenance(folder):
    """The speed tables' rows name the commit and date of their record: each record holds them."""
    paths = sorted((T.RECORDS / folder).glob("*.json"))
    assert paths
    for path in paths:
        assert R.provenance(json.loads(path.read_text())), path


def test_numbers_are_written_alike():
    assert (R.num(2.345), R.num(None), R.times(2.749), R.of(18, 18)) == ("2.3", "–", "2.75×", "18/18")
    assert R.table(["a", "b"], [["1", "x|y"]]) == "| a | b |\n|---|---|\n| 1 | x\\|y |"
    assert R.kind({"device": "cpu", "isa": ["avx512_bf16", "avx512f", "avx2"]}) == "avx512_bf16"
    assert R.kind({"device": "cuda", "gpu": "H100"}) == "gpu"


def test_a_class_row_names_the_cpu_its_record_names_else_the_one_given():
    """docs/app.md's class table: a load test's machine as its record names it (load_test.py records the CPU and its
    instruction sets), the CPU given beside the record where an older record names none."""
    from mars_core.evaluation.tables.app import machine_of

    named = {"cpu": "AMD EPYC", "isa": ["avx512_bf16", "avx512f", "avx2"]}
    assert machine_of(named, "AMD EPYC, AVX2") == "AMD EPYC, AVX512-BF16"
    assert machine_of({"cpu": "Intel(R) Xeon(R) Platinum 8488C Processor", "isa": ["amx_bf16"]}, "?") == (
        "Intel Xeon Platinum 8488C, AMX")
    assert machine_of({"platform": "Linux", "cpu_count": 2}, "AMD EPYC, AVX2") == "AMD EPYC, AVX2"


def test_the_forward_row_shows_the_linear_layers_where_its_record_took_them():
    """speed.forward's linear layers cell: the compiled forward's time in the rows kernel's products, against the
    read; a dash for a record that did not take it."""
    assert speed.linear_cell({"linear_1_ms_compiled": 3.1, "linear_1_over_read_compiled": 1.42}) == "3.10 (1.42×)"
    assert speed.linear_cell({"forward_1_ms_compiled": 6.0}) == "–"


def test_a_record_is_filed_by_kind_core_and_dtype():
    assert R.machine_key({"isa": ["avx2"], "dtype": "bfloat16", "core": "Zen 1"}) == ("avx2", "Zen 1", "bf16")
    assert R.machine_key({"isa": ["avx512_bf16", "avx2"], "dtype": "float32"}) == ("avx512_bf16", "", "fp32")


def test_a_kind_s_cores_each_keep_their_row(tmp_path):
    """Records of one kind on two cores (machine.cpu_core: "AMD EPYC" in a VM reads alike) each keep their row in
    README's headline, the newest of each core, each beside its own core's identity record; a record naming no
    core is a core of its own."""
    bf16 = {**AVX2, "dtype": "bfloat16"}  # the dtype load() picks on AVX2 (README's row)
    rows = [bench_row("hf_generate", 10.0), bench_row("ar", 12.0), bench_row("mars_verified", 20.0, 2.0, threshold=0.3)]
    write(tmp_path / "speed" / "a.json", bench_record(bf16, rows))
    write(tmp_path / "speed" / "b.json", bench_record({**bf16, "core": "Zen 1"}, rows[:2] + [
        bench_row("mars_verified", 12.0, 1.0, threshold=0.3)], date="2026-01-03"))
    write(tmp_path / "speed" / "c.json", bench_record({**bf16, "core": "Zen 1"}, rows, date="2026-01-01"))
    run = {"machine": {**bf16, "core": "Zen 1"}, "splits": {"heldout": {"identical": 3, "prompts": 4}}}
    write(tmp_path / "identity" / "zen1.json", {"provenance": {"commit": "abc1234", "date": "2026-01-03",
                                                               "source": "measured at"}, "dtypes": {"auto": run}})
    table = readme.headline(tmp_path).splitlines()[2:]
    assert [line.split(" | ")[0] for line in table] == ["| AMD EPYC, AVX2, bf16, 2 threads",
                                                        "| AMD EPYC (Zen 1), AVX2, bf16, 2 threads"]
    assert "**2.00×**" in table[0] and "not measured" in table[0]  # no identity record names no core
    assert "**1.20×**" in table[1] and "3 of 4" in table[1]  # the newest Zen 1 record, its own identity record
