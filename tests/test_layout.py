"""The package's shape: no import circles, and each concern imports only what lies below it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mars_core"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """mars_core modules a file imports, at module level or inside functions (lazy imports count too)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("mars_core"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("mars_core"):
                found.add(target)
                found.update(f"{target}.{a.name}" for a in node.names)  # `from . import x` names a module
    return found


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {m for m in imports_of(path) if m in modules and m != name} for name, path in modules.items()}


def test_the_import_graph_has_no_cycles():
    edges = graph()
    assert len(edges) > 20
    state: dict[str, int] = {}  # 1 = on the current path, 2 = finished

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                pytest.fail("import circle: " + " -> ".join(path[path.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])


@pytest.mark.parametrize("room,forbidden", [
    ("mars_core.decoding", ("mars_core.training", "mars_core.evaluation", "mars_core.generate")),
    ("mars_core.training", ("mars_core.decoding", "mars_core.evaluation", "mars_core.generate")),
])
def test_rooms_do_not_reach_sideways(room, forbidden):
    """Decoding and training are independent; measuring sits above both."""
    for name, targets in graph().items():
        if name.startswith(room):
            bad = sorted(t for t in targets if t.startswith(forbidden))
            assert not bad, f"{name} imports {bad}"


def test_ruff_is_clean():
    """The linter (pyflakes rules, import order, line length from pyproject.toml) finds nothing in the tree."""
    import subprocess
    import sys

    root = PACKAGE.parent
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=root, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr
