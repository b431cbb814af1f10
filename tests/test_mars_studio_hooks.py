"""mars_studio_hooks: the post-import finder on a module of our own, the entry points into a fresh lm-eval
registry, and the installed .pth file that makes a fresh interpreter know `mars_studio`."""

from __future__ import annotations

import ast
import site
import subprocess
import sys
from pathlib import Path

import pytest

import mars_studio_hooks
from mars_studio_hooks import AfterImport, register_entry_points

PTH = "mars_studio_hooks.pth"


def hooks_installed() -> bool:
    """Whether this environment has the project installed with its .pth file (pip install -e . puts it there)."""
    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    return any(Path(d, PTH).is_file() for d in dirs)


def test_after_import_runs_once_the_module_has_run_then_leaves(tmp_path, monkeypatch):
    (tmp_path / "hooked_mod.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    finder = AfterImport("hooked_mod", lambda module: seen.append(module.VALUE))
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    import hooked_mod  # noqa: F401

    assert seen == [42]  # after the module's body ran, exactly once
    assert finder not in sys.meta_path
    monkeypatch.delitem(sys.modules, "hooked_mod")


def test_a_failing_callback_does_not_fail_the_import(tmp_path, monkeypatch, capsys):
    (tmp_path / "hooked_bad.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", [AfterImport("hooked_bad", lambda m: 1 / 0), *sys.meta_path])
    import hooked_bad

    assert hooked_bad.VALUE == 1
    assert "ZeroDivisionError" in capsys.readouterr().err
    monkeypatch.delitem(sys.modules, "hooked_bad")


@pytest.mark.skipif(not hooks_installed(), reason="needs the project installed: pip install -e .")
def test_entry_points_go_into_a_registry_lazily_and_never_over_a_name_taken():
    pytest.importorskip("lm_eval", reason="lm-eval is not installed: pip install -e '.[eval]'")
    from lm_eval.api.model import LM
    from lm_eval.api.registry import Registry

    fresh = Registry("model", base_cls=LM)
    assert "mars_studio" in register_entry_points(fresh)
    assert fresh._objs["mars_studio"] == "mars_core.evaluation.harness:MarsStudioLM"  # a string: nothing imported
    from mars_core.evaluation.harness import MarsStudioLM

    assert fresh.get("mars_studio") is MarsStudioLM

    taken = Registry("model", base_cls=LM)
    taken.register("mars_studio", target="elsewhere:Model")
    assert register_entry_points(taken) == [] and taken._objs["mars_studio"] == "elsewhere:Model"


@pytest.mark.skipif(not hooks_installed(), reason="needs the project installed: pip install -e .")
def test_a_fresh_interpreter_knows_mars_studio_and_the_built_ins():
    pytest.importorskip("lm_eval", reason="lm-eval is not installed: pip install -e '.[eval]'")
    code = (
        "import sys\n"
        "from lm_eval.api.registry import get_model\n"
        "hf = get_model('hf').__name__\n"
        "imported_before = 'mars_core' in sys.modules\n"
        "print(hf, imported_before, get_model('mars_studio').__module__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["HFLM", "False", "mars_core.evaluation.harness"]


def test_install_is_idempotent(monkeypatch):
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if not isinstance(f, AfterImport)])
    monkeypatch.delitem(sys.modules, mars_studio_hooks.TARGET_MODULE, raising=False)
    mars_studio_hooks.install()
    mars_studio_hooks.install()
    assert sum(isinstance(f, AfterImport) for f in sys.meta_path) == 1


def test_start_up_imports_only_what_python_has_loaded_anyway():
    """The .pth runs this module at every interpreter start: at module level it may import sys and typing only
    (the rest waits inside functions until lm-eval is imported), and nothing of mars_core, which imports torch."""
    tree = ast.parse(Path(mars_studio_hooks.__file__).read_text())
    top = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            top.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            top.add(node.module)
    assert top == {"__future__", "sys", "typing"}
    everywhere = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    everywhere |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any(name.startswith("mars_core") for name in everywhere)


def pth_line() -> str:
    """setup.py's PTH_LINE, read without running setup()."""
    tree = ast.parse(Path(__file__).parents[1].joinpath("setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "PTH_LINE":
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no PTH_LINE")


@pytest.mark.parametrize("reachable", [True, False])
def test_the_pth_line_installs_the_hook_and_is_quiet_when_the_package_is_gone(tmp_path, reachable):
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / PTH).write_text(pth_line())
    path = str(Path(mars_studio_hooks.__file__).parents[1]) if reachable else ""  # a moved checkout: not on the path
    probe = f"import site; site.addsitedir({str(site_dir)!r}); import sys; "
    probe += "print(any(type(f).__name__ == 'AfterImport' for f in sys.meta_path))"
    # -S: no site-packages, so the package is reachable only through PYTHONPATH, as the case says
    out = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": path}, check=True)
    assert out.stderr == ""
    assert out.stdout.strip() == str(reachable)
