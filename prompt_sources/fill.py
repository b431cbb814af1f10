"""The template filler, and the banks it fills from.

Every word list, phrase and template of the prompt sources lives in banks/<source>.json. Templates are str.format
strings: `{name}` is a value the generator passes; `{name!l}` lower-cases it, `{name!c}` capitalises its first
letter, `{items!j}` joins a list with commas and `{items!a}` as "a, b and c". A value passed as a function is drawn
when the template first names it (fields fill left to right), so a template draws only what it shows.
"""

from __future__ import annotations

import functools
import json
import random
import string
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

BANKS = Path(__file__).resolve().parent / "banks"


@functools.cache
def bank(name: str) -> dict[str, Any]:
    """banks/<name>.json: one source's word lists and templates."""
    return json.loads((BANKS / f"{name}.json").read_text(encoding="utf-8"))


def cap_first(s: str) -> str:
    return s[:1].upper() + s[1:] if s else s


class _Filler(string.Formatter):
    def get_value(self, key, args, values):
        if callable(values[key]):
            values[key] = values[key]()
        return values[key]

    def convert_field(self, value, conversion):
        if conversion == "l":
            return value.lower()
        if conversion == "c":
            return cap_first(value)
        if conversion == "j":
            return ", ".join(value)
        if conversion == "a":
            return ", ".join(value[:-1]) + " and " + value[-1]
        return super().convert_field(value, conversion)


_FILLER = _Filler()


def fill(template: str, **values: Any) -> str:
    """The template with its fields filled from the values."""
    return _FILLER.vformat(template, (), values)


def fill_each(templates: Mapping[str, str], **values: Any) -> dict[str, str]:
    """Several templates filled from the same values: a value passed as a function is drawn once, where first named."""
    return {key: _FILLER.vformat(template, (), values) for key, template in templates.items()}


def later(rng: random.Random, options: Sequence[Any]) -> Callable[[], Any]:
    """A value for fill: one of the options, drawn when the template first names it."""
    return lambda: rng.choice(options)


def draw(rng: random.Random, slots: Mapping[str, Sequence[Any]]) -> dict[str, Any]:
    """One option of every slot, in the slots' order: each template of a family costs the same draws."""
    return {name: rng.choice(options) for name, options in slots.items()}
