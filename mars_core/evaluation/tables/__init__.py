"""Every table in README.md and docs/*.md, rendered from the kept records (assets/records) by one command.

    python -m mars_core.evaluation.tables            # render every table in place
    python -m mars_core.evaluation.tables --check    # exit 1 listing every table that differs; nothing written
    python -m mars_core.evaluation.tables --stamp assets/records/speed/x.json [--commit C --date D]

A page holds a table between markers; the marker names it `<page module>.<table key>`:

    <!-- table speed.avx2_fp32 -->
    | ... rendered ... |

    <!-- /table -->

(the blank line before the closing marker ends the table: GitHub would read a line right after a table's rows,
even a comment, as one more row). Each module of this package whose name does not start with `_` is a page module:
`TABLES`, a dict of key -> function(records_dir) returning the table's markdown (no trailing newline), which reads
records with `_records.read(records_dir, "name.json")` and writes numbers with `_records`' helpers. Rendering reads
the records folder alone (and the recorded race beside it: readme.race; no git, no clock), so the same records give
the same pages; tests/evaluation/test_tables.py fails when a page differs from what this renders.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import pkgutil
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[3]
RECORDS = ROOT / "assets" / "records"
MARKER = re.compile(r"^<!-- table (\S+) -->\n(.*?)^<!-- /table -->[ \t]*$", re.MULTILINE | re.DOTALL)

Table = Callable[[Path], str]


def tables() -> dict[str, Table]:
    """Every page module's tables, by marker name (`module.key`)."""
    found: dict[str, Table] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for key, function in module.TABLES.items():
            found[f"{info.name}.{key}"] = function
    return found


def pages(root: Path) -> list[Path]:
    """The pages tables live in: README.md and docs/*.md."""
    return [p for p in [Path(root) / "README.md", *sorted((Path(root) / "docs").glob("*.md"))] if p.is_file()]


def block(text: str) -> str:
    """What stands between the markers for a table's text."""
    return text.rstrip("\n") + "\n\n"


def _rendered(name: str, function: Table, records: Path, cache: dict[str, str]) -> str:
    if name not in cache:
        try:
            cache[name] = block(function(records))
        except Exception as error:  # noqa: BLE001 - the table's name goes with whatever failed
            raise RuntimeError(f"table {name}: {type(error).__name__}: {error}") from error
    return cache[name]


def render(root: Path = ROOT, records: Path | None = None,
           registry: dict[str, Table] | None = None) -> dict[Path, str]:
    """Each page's text with every table it marks rendered from the records (default: RECORDS). A marker that names
    no table keeps what it holds (check() lists it); a table that cannot be rendered raises, naming it."""
    records = Path(records) if records is not None else RECORDS
    registry = tables() if registry is None else registry
    cache: dict[str, str] = {}
    out = {}
    for page in pages(root):
        def fill(match: re.Match) -> str:
            name = match.group(1)
            if name not in registry:
                return match.group(0)
            return f"<!-- table {name} -->\n{_rendered(name, registry[name], records, cache)}<!-- /table -->"
        out[page] = MARKER.sub(fill, page.read_text())
    return out


def check(root: Path = ROOT, records: Path | None = None, registry: dict[str, Table] | None = None) -> list[str]:
    """What is not as rendered: each table that differs from its records ('page: name differs'), each marker that
    names no table, each table no page uses, each table that cannot be rendered. Empty when all is well."""
    records = Path(records) if records is not None else RECORDS
    registry = tables() if registry is None else registry
    cache: dict[str, str] = {}
    problems, used = [], set()
    for page in pages(root):
        where = page.relative_to(root).as_posix() if page.is_relative_to(root) else str(page)
        for match in MARKER.finditer(page.read_text()):
            name = match.group(1)
            used.add(name)
            if name not in registry:
                problems.append(f"{where}: {name}: no such table")
                continue
            try:
                if _rendered(name, registry[name], records, cache) != match.group(2):
                    problems.append(f"{where}: {name} differs from its records")
            except RuntimeError as error:
                problems.append(f"{where}: {error}")
    problems += [f"{name}: no page uses it" for name in sorted(set(registry) - used)]
    return problems


def stamp(path: Path, commit: str | None = None, date: str | None = None, source: str = "measured at") -> dict:
    """Write a record's provenance (default: this checkout's HEAD, today): the commit its numbers were measured at.
    Stamp a record right after the run, from the tree it measured."""
    path = Path(path)
    if commit is None:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=path.resolve().parent, check=True,
                                capture_output=True, text=True).stdout.strip()
    text = path.read_text()
    record = json.loads(text)
    prov = {"commit": commit, "date": date or datetime.date.today().isoformat(), "source": source}
    record = {"provenance": prov, **{k: v for k, v in record.items() if k != "provenance"}}
    indent = re.match(r"\{\n( +)", text)  # the file's own indent (the writers differ), so only the stamp is new
    path.write_text(json.dumps(record, indent=len(indent.group(1)) if indent else 2) + "\n")
    return prov


def main(argv: list[str] | None = None) -> int:
    """The command: render (default), --check, or --stamp FILE ...; returns (and exits with) 1 where something is
    not as rendered (--check) or a marker names no table."""
    p = argparse.ArgumentParser(prog="python -m mars_core.evaluation.tables", description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 listing every table that differs")
    p.add_argument("--root", type=Path, default=ROOT, help="the checkout whose pages to render (default: this one)")
    p.add_argument("--records", type=Path, default=None, help=f"the records folder (default: {RECORDS})")
    p.add_argument("--stamp", type=Path, nargs="+", metavar="FILE",
                   help="write each record's provenance (the commit measured, its date) instead of rendering")
    p.add_argument("--commit", default=None, help="with --stamp: the commit (default: HEAD)")
    p.add_argument("--date", default=None, help="with --stamp: the date, YYYY-MM-DD (default: today)")
    p.add_argument("--source", default="measured at", choices=("measured at", "added in"), help="with --stamp")
    args = p.parse_args(argv)
    if args.stamp:
        for path in args.stamp:
            print(f"{path}: {stamp(path, args.commit, args.date, args.source)}")
        return 0
    problems = check(args.root, args.records)
    if args.check:
        for problem in problems:
            print(problem)
        print(f"{len(problems)} table(s) not as rendered" if problems else "every table is as rendered")
        return 1 if problems else 0
    left = [p for p in problems if not p.endswith("differs from its records")]
    try:
        texts = render(args.root, args.records)
    except RuntimeError as error:
        print(error, file=sys.stderr)
        return 1
    for page, text in texts.items():
        if page.read_text() != text:
            page.write_text(text)
            print(f"rendered {page}")
    for problem in left:
        print(problem, file=sys.stderr)
    return 1 if left else 0
