"""Everyday requests: recipes, lists, plans, schedules, tips, gifts, names, how-to steps, comparisons,
recommendations and quick questions. Words and templates: banks/everyday.json.
"""

from __future__ import annotations

import random

from .fill import bank, draw, fill, later
from .phrasing import MONTHS, Record, compose, make_record, one_of, some_count

E = bank("everyday")


def _everyday_recipe(rng: random.Random) -> Record:
    entry = rng.choice(E["recipe"])
    dish, cons, serv = rng.choice(E["dishes"]), rng.choice(E["recipe_constraints"]), rng.choice([1, 2, 4, 6, 8, 12])
    p = compose(rng, entry, dish=dish, cons=cons, serv=serv,
                ing=lambda: rng.sample(E["ingredients"], rng.randint(2, 4)), meal=later(rng, E["meals"]),
                count=lambda: some_count(rng, rng.choice([3, 5, 7])), swap=later(rng, E["swaps"]))
    return make_record("everyday", p, kind="recipe")


def _trip(rng: random.Random) -> str:
    slots = {"place": E["trip_places"], "city": E["trip_cities"], "n": range(2, 11), "month": MONTHS}
    return fill(rng.choice(E["trips"]), **draw(rng, slots))


def _groceries(rng: random.Random) -> str:
    people, budget, diet = rng.choice(E["people"]), rng.choice([30, 50, 75, 100, 150]), rng.choice(E["diets"])
    core = fill(E["groceries"], diet=diet, people=people)
    return core + fill(E["on_budget"], budget=budget) if rng.random() < 0.5 else core


def _everyday_lists(rng: random.Random) -> Record:
    entry = rng.choice(E["lists"])
    fmt = rng.choice(E["list_formats"])
    p = compose(rng, entry, [fmt] if fmt else [], trip=lambda: _trip(rng), groceries=lambda: _groceries(rng),
                party=later(rng, E["parties"]), bag=later(rng, E["bags"]), chores=later(rng, E["chores"]))
    return make_record("everyday", p, kind=entry["kind"])


def _everyday_plan(rng: random.Random) -> Record:
    entry = rng.choice(E["plan"])
    weeks = rng.choice(E["weeks"])
    extras = [rng.choice(E["plan_notes"])] if rng.random() < 0.45 else []
    p = compose(rng, entry, extras, weeks=weeks, subject=later(rng, E["subjects_study"]), d=later(rng, range(2, 7)),
                eq=later(rng, E["equipment"]), goal=later(rng, E["fitness_goals"]), days=later(rng, range(1, 8)),
                city=later(rng, E["trip_cities"]), diet_goal=later(rng, E["diet_goals"]),
                span=later(rng, E["meal_spans"]), amount=later(rng, [500, 1000, 2000, 3000, 5000, 10000]),
                m=later(rng, range(3, 25)), months=later(rng, E["months"]), skill=later(rng, E["skills"]),
                family=later(rng, range(3, 7)), books=later(rng, range(6, 31)),
                todo=lambda: rng.sample(E["todo"], rng.randint(3, 6)), start=later(rng, E["day_starts"]))
    return make_record("everyday", p, kind=entry["kind"])


def _everyday_tips(rng: random.Random) -> Record:
    topic, k = rng.choice(E["tip_topics"]), rng.choice([3, 5, 5, 7, 10])
    p = compose(rng, rng.choice(E["tips"]), lambda: [rng.choice(E["tip_notes"])] if rng.random() < 0.35 else [],
                topic=topic, count=lambda: some_count(rng, k))
    return make_record("everyday", p, kind="tips")


def _everyday_gifts(rng: random.Random) -> Record:
    who, occ = rng.choice(E["gift_for"]), rng.choice(E["occasions"])
    budget = rng.choice([10, 20, 25, 30, 50, 75, 100, 200])
    p = compose(rng, rng.choice(E["gifts"]), who=who, occ=occ, budget=budget,
                count=lambda: some_count(rng, rng.choice([3, 5, 10])))
    return make_record("everyday", p, kind="gifts")


def _everyday_names(rng: random.Random) -> Record:
    slots = {"look": E["pet_looks"], "pet": E["pets"], "topic": E["name_topics"], "craft": E["crafts"]}
    thing = fill(rng.choice(E["name_things"]), **draw(rng, slots))
    k, style = rng.choice([5, 10, 10, 15, 20]), rng.choice(E["name_styles"])
    p = compose(rng, rng.choice(E["names"]), thing=thing, style=style, count=lambda: some_count(rng, k))
    return make_record("everyday", p, kind="names")


def _everyday_howto(rng: random.Random) -> Record:
    task = rng.choice(E["howto_tasks"])
    p = compose(rng, rng.choice(E["howto"]), task=task, count=lambda: some_count(rng, rng.randint(3, 8)))
    return make_record("everyday", p, kind="howto")


def _everyday_compare(rng: random.Random) -> Record:
    a, b = rng.choice(E["pairs"])
    if rng.random() < 0.5:
        a, b = b, a
    p = compose(rng, rng.choice(E["compare"]), a=a, b=b, who=later(rng, E["deciders"]))
    return make_record("everyday", p, kind="compare")


def _everyday_recommend(rng: random.Random) -> Record:
    entry = rng.choice(E["recommend"])
    k, media, like = rng.choice([3, 5, 5, 10]), rng.choice(E["media"]), rng.choice(E["likes"])
    p = compose(rng, entry, media=media, like=like, count=lambda: some_count(rng, k),
                who=later(rng, E["audiences"]), city=later(rng, E["trip_cities"]),
                trait=later(rng, E["traits"]), room=later(rng, E["plant_spots"]))
    return make_record("everyday", p, kind="recommend")


def _everyday_quick(rng: random.Random) -> Record:
    return make_record("everyday", rng.choice(E["quick_questions"]) + rng.choice(E["quick_ends"]), kind="quick")


gen_everyday = one_of({
    _everyday_recipe: 14, _everyday_lists: 12, _everyday_plan: 14, _everyday_tips: 12, _everyday_gifts: 8,
    _everyday_names: 8, _everyday_howto: 10, _everyday_compare: 9, _everyday_recommend: 10, _everyday_quick: 3,
})
