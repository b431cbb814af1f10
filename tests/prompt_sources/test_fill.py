"""The template filler and the entries of the banks: what each field and key does, and what it draws."""

from __future__ import annotations

import random

from prompt_sources.fill import draw, fill, fill_each
from prompt_sources.phrasing import compose


def test_fields_conversions_and_values_drawn_where_named():
    drawn = []

    def lazy():
        drawn.append(1)
        return "tea"

    assert fill("{x!l}, {x!c}: {xs!j}; {xs!a}", x="hOT", xs=["a", "b", "c"]) == "hot, HOT: a, b, c; a, b and c"
    assert fill("{d} or {d}", d=lazy) == "tea or tea" and drawn == [1]  # drawn once, where first named
    assert fill("none", d=lazy) == "none" and drawn == [1]  # not named: not drawn
    both = fill_each({"a": "{n}", "b": "{n}!"}, n=lambda: random.Random(0).randint(1, 10**9))
    assert both["b"] == both["a"] + "!"  # one draw shared by the templates


def test_draw_takes_one_of_every_slot_in_order():
    rng, again = random.Random(3), random.Random(3)
    got = draw(rng, {"a": ["x", "y", "z"], "n": range(2, 6)})
    assert got == {"a": again.choice(["x", "y", "z"]), "n": again.randint(2, 5)}
    assert rng.getstate() == again.getstate()


def test_entries():
    rng = random.Random(0)
    assert compose(rng, "Say {w}.", w="hi") == "Say hi."
    assert compose(rng, {"say": "Say {w}", "join": ". "}, ["Now."], w="hi") == "Say hi. Now."
    assert compose(rng, {"say": "Say {w}"}, ["Now."], w="hi") == "Say hi"  # no "join": the extras are left out
    asked = compose(random.Random(1), {"ask": "write  a {w} ", "extra": "Be brief."}, noisy=False, w="poem")
    assert "write a poem" in asked.lower() and asked.endswith(("Be brief.", "be brief."))
    order = []
    entry = {"draw": ["b"], "say": ["{a}{b}", "{a}{b}!"]}
    compose(random.Random(2), entry, a=lambda: order.append("a") or "A", b=lambda: order.append("b") or "B")
    assert order == ["b", "a"]  # "draw" first, then the template's fields left to right
