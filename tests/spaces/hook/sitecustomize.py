"""Put on PYTHONPATH by tests/spaces/test_space.py when it starts the Space: records which top-level modules the
Space's own files import (every `import` statement, at module level or inside a function, that succeeds), and where
each was imported from, in the JSON file $SPACE_IMPORTS (rewritten at each new module, so it survives the app being
terminated). Files outside $SPACE_ROOT (torch, transformers, gradio importing their own dependencies) are not
recorded: what they import is theirs to declare."""

from __future__ import annotations

import builtins
import json
import os

ROOT = os.path.realpath(os.environ["SPACE_ROOT"]) + os.sep
OUT = os.environ["SPACE_IMPORTS"]
SEEN: dict[str, dict[str, str]] = {}  # top-level module -> {"by": the Space file importing it, "file": its file}
_import = builtins.__import__


def _recording_import(name, globals=None, locals=None, fromlist=(), level=0):
    module = _import(name, globals, locals, fromlist, level)
    by = str((globals or {}).get("__file__") or "")
    by = os.path.realpath(by) if os.path.isabs(by) else ""  # not "<template>" and the like: code from no file
    top = name.partition(".")[0]
    if level == 0 and by.startswith(ROOT) and top not in SEEN:
        found = _import(top, globals, locals, (), 0)
        where = getattr(found, "__file__", None) or next(iter(getattr(found, "__path__", None) or []), "")
        SEEN[top] = {"by": by, "file": os.path.realpath(where) if where else ""}  # a namespace package: its folder
        with open(OUT + ".tmp", "w") as f:
            json.dump(SEEN, f)
        os.replace(OUT + ".tmp", OUT)
    return module


builtins.__import__ = _recording_import
