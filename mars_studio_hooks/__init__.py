"""Start-up hooks that MARS Studio installs into Python (run from `mars_studio_hooks.pth` in site-packages).

lm-evaluation-harness 0.4.x finds models only in its own registry, so `lm_eval --model mars_studio` would not know
ours. Upstream has merged entry-point plugins (group `lm_eval.models`, EleutherAI/lm-evaluation-harness#4013) but
not yet released them. Until then, this backports just that: once `lm_eval.models` is imported (which registers
the built-in models), every `lm_eval.models` entry point not registered already is registered lazily, by its
"module:Class" string, so nothing of ours is imported until a run asks for it. Built-in names keep precedence.

This module runs at every interpreter start in the environment, so it imports nothing at start-up but `sys` and
adds about a millisecond to it (41 ms here); a post-import hook library (wrapt) takes about 20 ms to import.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable
    from importlib.machinery import ModuleSpec
    from types import ModuleType

ENTRY_POINT_GROUP = "lm_eval.models"
TARGET_MODULE = "lm_eval.models"


def register_entry_points(registry=None, group: str = ENTRY_POINT_GROUP) -> list[str]:
    """Registers each entry point of `group` in lm-eval's model registry, lazily; returns the names added."""
    from importlib.metadata import entry_points

    if registry is None:
        from lm_eval.api.registry import model_registry as registry
    added = []
    for ep in entry_points(group=group):
        if ep.name not in registry:  # built-ins, earlier imports and a future native discovery win
            registry.register(ep.name, target=ep.value)  # "module:Class", upgraded by @register_model on import
            added.append(ep.name)
    return added


class AfterImport:
    """A `sys.meta_path` finder that runs `callback(module)` right after `name` is first imported, then steps out
    of `sys.meta_path`: it finds the module as the other finders would and wraps its loader's exec_module."""

    def __init__(self, name: str, callback: Callable[[ModuleType], object]):
        self.name, self.callback, self._finding = name, callback, False

    def find_spec(self, fullname: str, path=None, target=None) -> ModuleSpec | None:
        if fullname != self.name or self._finding:
            return None
        import importlib.util

        self._finding = True
        try:
            spec = importlib.util.find_spec(fullname)  # what the other finders would load
        finally:
            self._finding = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_call(module: ModuleType) -> None:
            exec_module(module)
            self.remove()
            try:
                self.callback(module)
            except Exception as exc:  # a broken plugin must never break lm-eval itself
                print(f"mars_studio_hooks: {exc!r}", file=sys.stderr)

        spec.loader.exec_module = exec_then_call  # this spec's own loader instance
        return spec

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)


def install() -> None:
    """Called from the .pth file at start-up: registers the entry points now if lm-eval's models are already
    imported, else right after they are."""
    if TARGET_MODULE in sys.modules:
        register_entry_points()
    elif not any(isinstance(f, AfterImport) and f.name == TARGET_MODULE for f in sys.meta_path):
        sys.meta_path.insert(0, AfterImport(TARGET_MODULE, lambda _: register_entry_points()))
