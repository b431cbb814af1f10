"""The README is the front door and docs/ holds the rest: every relative link and picture resolves, every
`#anchor` names a heading that exists (GitHub's slug rules), every docs page is linked, the README stays short,
and its test command is the one `.ci/run` runs."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("**/*.md"))]
README_MAX_LINES = 200

FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?!`).+?(?<!`)\1", re.DOTALL)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:, ...


def unfenced(text: str) -> str:
    """The text with fenced code blocks blanked out (a `# comment` in a bash block is no heading)."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def prose(text: str) -> str:
    """The text with fenced blocks and code spans blanked out: links inside code are not links."""
    return CODE_SPAN.sub(lambda m: " " * len(m.group(0)), unfenced(text))


def targets(text: str) -> list[str]:
    """Where the links and pictures of a markdown text point (inline and reference-style)."""
    text = prose(text)
    return LINK.findall(text) + REFERENCE.findall(text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading (github-slugger): the rendered text lower-cased, every character that is not a
    letter, digit, mark, hyphen, underscore or space dropped, each space turned into a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading counts by its text
    text = re.sub(r"<[^>]+>", "", text).lower()
    kept = (c for c in text if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return "".join(kept).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(unfenced(page.read_text())):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def test_pages_exist():
    assert (ROOT / "docs").is_dir() and len(PAGES) > 1


def test_slugs_follow_github():
    assert slug("Speed (`mars-bench`)") == "speed-mars-bench"
    assert slug("Batch 1 against transformers' `generate`") == "batch-1-against-transformers-generate"
    assert slug("The HTTP API (`gradio_client`)") == "the-http-api-gradio_client"
    assert slug("τ = 1 costs nothing") == "τ--1-costs-nothing"


def test_links_inside_code_are_not_links():
    text = 'see [a](a.md#x) and `[b](b.md)`\n\n```\n[c](c.md)\n```\n![d](d.png "title")\n\n[e]: e.md\n'
    assert sorted(targets(text)) == ["a.md#x", "d.png", "e.md"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_pictures_resolve(page: Path):
    broken = []
    for target in targets(page.read_text()):
        if not target or EXTERNAL.match(target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}")
        elif not file.is_relative_to(ROOT):
            broken.append(f"{target}: outside the repository")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading with anchor #{anchor} in {file.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: broken links:\n" + "\n".join(broken)


def test_every_docs_page_is_reachable_from_the_readme():
    reached, todo = set(), [README.resolve()]
    while todo:
        page = todo.pop()
        if page in reached or not page.exists():
            continue
        reached.add(page)
        for target in targets(page.read_text()):
            path = target.partition("#")[0]
            if path.endswith(".md") and not EXTERNAL.match(path):
                todo.append((page.parent / path).resolve())
    orphans = [str(p.relative_to(ROOT)) for p in PAGES if p.resolve() not in reached]
    assert not orphans, f"docs pages no link leads to from README.md: {orphans}"


def test_the_readme_is_a_front_door():
    lines = README.read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines, at most {README_MAX_LINES}: move detail into docs/"


def test_the_readme_holds_the_ci_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    command = re.search(r"^TEST_CMD='(.+)'$", ci, re.MULTILINE).group(1)
    assert command in README.read_text().splitlines(), "README.md's test command differs from .ci/run's"


DOCS_MAX_LINES = 2200  # README and docs/ together: a reference a reader finishes
PAGE_MAX_LINES = {"docs/speed.md": 300}
CHANGELOG_MAX_LINES = 300


def test_the_docs_stay_a_reference():
    """History goes to git and CHANGELOG.md, not the pages: the docs' total, speed.md and the changelog stay short."""
    total = sum(page.read_text().count("\n") for page in PAGES)
    assert total <= DOCS_MAX_LINES, f"README and docs/ have {total} lines, at most {DOCS_MAX_LINES}"
    for name, most in PAGE_MAX_LINES.items():
        lines = (ROOT / name).read_text().count("\n")
        assert lines <= most, f"{name} has {lines} lines, at most {most}"
    lines = (ROOT / "CHANGELOG.md").read_text().count("\n")
    assert lines <= CHANGELOG_MAX_LINES, f"CHANGELOG.md has {lines} lines, at most {CHANGELOG_MAX_LINES}"


CODE_LINK = re.compile(r"\b(docs/[\w/.-]+\.md)#([\w%-]+)")


def test_docs_links_in_the_code_resolve():
    """The code cites the docs by page and section (docs/speed.md#the-rows-kernel): each cited heading exists."""
    files = [*ROOT.glob("mars_core/**/*.py"), *ROOT.glob("mars_core/**/*.cpp"), *ROOT.glob("studio/**/*.py"),
             ROOT / "app.py", *ROOT.glob("benchmarks/*"), *ROOT.glob("tests/**/*.py")]
    broken = []
    for file in (f for f in files if f.is_file() and f.name != "test_docs.py"):
        for page, anchor in CODE_LINK.findall(file.read_text(errors="ignore")):
            if not (ROOT / page).is_file() or anchor not in anchors(ROOT / page):
                broken.append(f"{file.relative_to(ROOT)}: {page}#{anchor}")
    assert not broken, "\n".join(broken)
