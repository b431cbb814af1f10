"""The package's and the app's shape: no import circles, and each concern imports only what lies below it (the
engine, mars_core, never imports the app: studio/ and app.py)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mars_core"
ROOT = PACKAGE.parent
OURS = ("mars_core", "studio", "app")  # the engine, the app's tabs, the app


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Our modules (mars_core, studio, app) a file imports, at module level or inside functions (lazy imports count
    too)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith(OURS))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith(OURS):
                found.add(target)
                found.update(f"{target}.{a.name}" for a in node.names)  # `from . import x` names a module
    return found


def graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports, over mars_core, studio and app.py."""
    files = [*PACKAGE.rglob("*.py"), *(ROOT / "studio").rglob("*.py"), ROOT / "app.py"]
    modules = {module_name(p): p for p in files}
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
    ("mars_core.runtime", ("mars_core.decoding", "mars_core.training", "mars_core.evaluation", "mars_core.generate",
                           "mars_core.load")),
    ("mars_core.decoding", ("mars_core.training", "mars_core.evaluation", "mars_core.generate")),
    ("mars_core.training", ("mars_core.decoding", "mars_core.evaluation", "mars_core.generate")),
])
def test_rooms_do_not_reach_sideways(room, forbidden):
    """Decoding and training are independent; measuring sits above both."""
    for name, targets in graph().items():
        if name.startswith(room):
            bad = sorted(t for t in targets if t.startswith(forbidden))
            assert not bad, f"{name} imports {bad}"


def reach(edges: dict[str, set[str]], start: str) -> set[str]:
    """Every module of ours `start` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for nxt in edges[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


VERIFIED = "mars_core.decoding.verified"


def test_the_plan_never_imports_the_tree():
    """Verified decoding's plan is a pure function of confidences and the cost curve: it never reaches the rooms that
    build, verify or feed the tree (it can be read, tested and replaced without them)."""
    edges = graph()
    bad = sorted(m for m in reach(edges, f"{VERIFIED}.plan") if m.startswith(VERIFIED))
    assert not bad, f"{VERIFIED}.plan imports {bad}"


# What the app may use of the decoders: the public names (mars_core, mars_core.generate), the live settings, the
# strategy table, and verified decoding's Forward record (the package exports it; record.py defines it). Never a
# decoder's internals: what it draws, it reads from the record.
STUDIO_MAY_IMPORT = ("mars_core.decoding.control", "mars_core.decoding.strategies", VERIFIED, f"{VERIFIED}.record")


def test_studio_never_imports_a_decoders_internals():
    for name, targets in graph().items():
        if not name.startswith("mars_core"):
            bad = sorted(t for t in targets if t.startswith("mars_core.decoding") and t not in STUDIO_MAY_IMPORT)
            assert not bad, f"{name} imports {bad}: only {STUDIO_MAY_IMPORT} of mars_core.decoding"


def test_no_decoding_module_is_long():
    """A decoder is a room of small modules: none is longer than about 300 lines."""
    for path in (PACKAGE / "decoding").rglob("*.py"):
        assert len(path.read_text().splitlines()) <= 320, f"{path.relative_to(ROOT)} is too long"


def test_the_engine_never_imports_the_app():
    """mars_core is what users install: it stands alone; studio/ and app.py use it, never the other way."""
    for name, targets in graph().items():
        if name.startswith("mars_core"):
            bad = sorted(t for t in targets if not t.startswith("mars_core"))
            assert not bad, f"{name} imports {bad}"


# The app's floors, bottom first: a module imports only from the floors below its own (the tabs never import each
# other; what two tabs share lives in studio.lanes, below them). A new studio module takes its place here.
STUDIO_FLOORS = (
    ("studio", "studio.inputs", "studio.charts", "studio.models",  # limits and checks, chart basics, the models;
     "studio.race", "studio.batch", "studio.walkthrough", "studio.train"),  # each tab's folder (a docstring)
    ("studio.lanes", "studio.engine"),  # what the tabs share: recorder, frame policy, colours, Run/Stop, error
    # guard; what the race decodes on (torch or llama.cpp engines)
    ("studio.race.state", "studio.batch.state", "studio.walkthrough.walk", "studio.train.state"),  # the tabs' rooms,
    # under them: what a race keeps (session, lanes' records, facts), what a batch run keeps, what the two
    # walkthroughs share (the stepped decode), what the Train tab keeps (sessions, trained models, the cap, the
    # broadcast)
    ("studio.race.html", "studio.race.figures", "studio.batch.html", "studio.walkthrough.verified",
     "studio.train.figures"),  # the race's panes, counters, notes, stats and charts; the batch's cells, slots chart
    # and stats; the verified walkthrough; the training's charts and status
    ("studio.race.loop", "studio.train.loop"),  # the race itself and the frames it sends the page; the live training,
    # its broadcast, its replay and the race of what it trained
    ("studio.race.tab", "studio.batch.tab", "studio.walkthrough.tab", "studio.explorer", "studio.train.tab"),  # a
    # tab each: its layout and events
    ("studio.page", "studio.cli", "studio.train.record"),  # the page's frame (CSS, tagline, introduction), the
    # command line, the command that records a training for the Train tab's Replay
    ("app",),  # the header, the tabs, theme and launch
)


def test_every_studio_module_has_a_floor():
    placed = {name for floor in STUDIO_FLOORS for name in floor}
    assert {name for name in graph() if not name.startswith("mars_core")} == placed


@pytest.mark.parametrize("level", range(len(STUDIO_FLOORS)))
def test_studio_imports_point_down(level):
    """Every studio module (and app.py) imports mars_core and the floors below its own only."""
    below = {name for floor in STUDIO_FLOORS[:level] for name in floor}
    edges = graph()
    for name in STUDIO_FLOORS[level]:
        bad = sorted(t for t in edges[name] if not t.startswith("mars_core") and t not in below)
        assert not bad, f"{name} imports {bad}: only mars_core and {sorted(below) or 'nothing of the app'}"


def test_ruff_is_clean():
    """The linter (pyflakes rules, import order, line length from pyproject.toml) finds nothing in the tree."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr


# Gradio event handlers: Gradio passes a handler's inputs one by one, positionally
GRADIO_HANDLERS = {"studio/explorer.py": {"sweep", "run_sweep"}, "studio/race/loop.py": {"race", "run_race"}}


def test_python_functions_take_at_most_six_positional_parameters():
    """A call site must read as what it passes: beyond six, parameters are keywords (self and cls not counted), in
    mars_core and in the app, Gradio's event handlers excepted."""
    crowded = []
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "studio").rglob("*.py"), ROOT / "app.py"]:
        name = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                names = [a.arg for a in node.args.posonlyargs + node.args.args if a.arg not in ("self", "cls")]
                handler = getattr(node, "name", None) in GRADIO_HANDLERS.get(name, ())
                if len(names) > 6 and not handler:
                    crowded.append(f"{name}: {getattr(node, 'name', 'lambda')}({', '.join(names)})")
    assert not crowded, crowded


CPP_FUNCTION = re.compile(r"^[ \t]*(?:template\s*<[^>]*>\s*)?(?:(?:static|inline|constexpr)\s+)*[\w:<>,*& ]+?[\s*&]"
                          r"(\w+)\(([^;{}()]*(?:\([^()]*\)[^;{}()]*)*)\)\s*(?:const\s*)?\{", re.MULTILINE)


CPP_LAMBDA = re.compile(r"\[[&=\w, ]*\]\s*\(([^()]*)\)\s*(?:mutable\s*)?(?:->\s*[\w:<>]+\s*)?\{")


def cpp_parameters(text: str) -> dict[str, int]:
    """Each C++ function and lambda defined in text (name, or "lambda@<line>" -> the most parameters of any
    definition of that name)."""
    counts: dict[str, int] = {}
    found = [(m.group(1), m.group(2)) for m in CPP_FUNCTION.finditer(text)] + [
        (f"lambda@{text.count(chr(10), 0, m.start()) + 1}", m.group(1)) for m in CPP_LAMBDA.finditer(text)]
    for name, params in found:
        params = params.strip()
        if name in ("if", "for", "while", "switch", "catch", "return", "sizeof"):
            continue
        depth, n = 0, 1 if params and params != "void" else 0
        for c in params:
            depth += c in "<(" and 1 or (c in ">)" and -1 or 0)
            n += c == "," and depth == 0
        counts[name] = max(counts.get(name, 0), n)
    return counts


def test_cpp_functions_take_at_most_six_parameters():
    """The kernels' C++ functions take a small struct for shapes and strides rather than long parameter lists."""
    assert cpp_parameters("inline void f(const float* a, std::pair<int, int> b) {\n}\n"
                          "template <typename T>\nvoid g(int a, int b, int c, int d, int e, int f, int g) {\n}\n"
                          "auto h = [&](int64_t p, const float* s) { return 0; };\n") == {"f": 2, "g": 7, "lambda@6": 2}
    for path in (PACKAGE / "runtime" / "kernels").glob("*.cpp"):
        found = cpp_parameters(path.read_text())
        assert found and "linear" in found, f"{path.name}: no function found (the pattern no longer reads it)"
        crowded = {name: n for name, n in found.items() if n > 6}
        assert not crowded, f"{path.name}: {crowded}"


def test_app_py_is_the_page_s_table_of_contents():
    """app.py stays short: the tabs in order, the model status and the launch; the page's frame lives in studio/page.py
    and the command line in studio/cli.py."""
    lines = (ROOT / "app.py").read_text().count("\n")
    assert lines <= 150, f"app.py has {lines} lines: move what is not the page's outline into studio/"
