"""Puts `mars_studio_hooks.pth` in site-packages, for regular and editable installs alike (metadata: pyproject.toml).

A .pth file runs its `import` line at every interpreter start: ours installs mars_studio_hooks, which lets the plain
`lm_eval` command find the `mars_studio` model (see mars_studio_hooks). setuptools has no option for a file at the
top of the wheel, so build_py writes it beside the packages and editable_wheel adds it to the editable wheel.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH_NAME = "mars_studio_hooks.pth"
# Runs at every start: where the package has gone (a moved or deleted editable checkout), start-up stays quiet.
PTH_LINE = (
    'import sys; exec("try: import mars_studio_hooks\\nexcept ModuleNotFoundError: pass\\n'
    'else: mars_studio_hooks.install()")\n'
)


class BuildPyWithPth(build_py):
    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            Path(self.build_lib, PTH_NAME).write_text(PTH_LINE)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib, PTH_NAME))]


class EditableWheelWithPth(editable_wheel):
    def _select_strategy(self, *args, **kwargs):
        return _AddPth(super()._select_strategy(*args, **kwargs))


class _AddPth:
    """Wraps setuptools' editable strategy (it writes the wheel's path hooks): the .pth goes in beside them."""

    def __init__(self, strategy):
        self.strategy = strategy

    def __enter__(self):
        self.strategy.__enter__()
        return self

    def __exit__(self, *exc):
        return self.strategy.__exit__(*exc)

    def __call__(self, wheel, files, mapping) -> None:
        self.strategy(wheel, files, mapping)
        wheel.writestr(PTH_NAME, PTH_LINE.encode())


setup(cmdclass={"build_py": BuildPyWithPth, "editable_wheel": EditableWheelWithPth})
