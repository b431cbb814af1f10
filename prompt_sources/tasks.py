"""The programmatic prompt sources (lists, counting, tables, repeats, reformatting, arithmetic, explanation), each
with a gold answer where one is certain; "chat" from the chatterbot-corpus YAML files when that package is installed,
"reasoning" from reasoning-gym task generators when it is installed (each falls back to built-in prompts otherwise,
so nothing is downloaded); and `build_prompts`, which draws distinct prompts per category from one seeded RNG, the
prompts that look like use (prompt_sources.sources) included. Words: banks/tasks.json.
"""

from __future__ import annotations

import glob
import os
import random
from collections.abc import Callable

from mars_core.evaluation.tasks import CATEGORIES

from .fill import bank
from .phrasing import NUMBER_WORDS, Record, make_record
from .sources import SOURCES, distinct

T = bank("tasks")
# reasoning-gym tasks with short questions and gold answers a small model can at least attempt.
RG_TASKS = tuple(T["reasoning_gym_tasks"])


def gen_lists(rng: random.Random) -> Record:
    k = rng.choice([3, 4, 5, 6, 7])
    choice = rng.randrange(10)
    if choice == 0:
        return make_record("lists", "List the days of the week, one per line.")
    if choice == 1:
        return make_record("lists", "List the twelve months of the year in order.")
    if choice == 2:
        n = rng.randint(5, 12)
        return make_record("lists", f"List the first {n} letters of the alphabet, separated by commas.",
                           gold=", ".join("ABCDEFGHIJKL"[:n]))
    if choice == 3:
        a = rng.randint(1, 40)
        b = a + rng.randint(4, 12)
        return make_record("lists", f"List all the even numbers between {a} and {b}.",
                           gold=", ".join(str(i) for i in range(a, b + 1) if i % 2 == 0))
    name = rng.choice(["colours", "animals", "fruits", "countries", "cities"])
    style = rng.choice(T["list_styles"])
    if choice in (4, 5, 6):
        return make_record("lists", f"Name {k} {name}, {style}.")
    items = rng.sample(T[name], k)
    return make_record("lists", f"Write these {name} {style}: {' '.join(items)}", gold="|".join(items))


def gen_counting(rng: random.Random) -> Record:
    choice = rng.randrange(6)
    if choice == 0:
        a = rng.randint(1, 50)
        b = a + rng.randint(5, 15)
        return make_record("counting", f"Count from {a} to {b}.", gold=", ".join(map(str, range(a, b + 1))))
    if choice == 1:
        b = rng.randint(1, 30)
        a = b + rng.randint(5, 12)
        return make_record("counting", f"Count backwards from {a} to {b}.",
                           gold=", ".join(map(str, range(a, b - 1, -1))))
    if choice == 2:
        step = rng.choice([2, 3, 5, 10])
        n = rng.randint(5, 10)
        seq = [step * i for i in range(1, n + 1)]
        return make_record("counting", f"Count by {step}s up to {seq[-1]}.", gold=", ".join(map(str, seq)))
    if choice == 3:
        n = rng.randint(5, 12)
        return make_record("counting", f"Write the numbers from one to {NUMBER_WORDS[n]} in words.",
                           gold=", ".join(NUMBER_WORDS[1:n + 1]))
    if choice == 4:
        word = rng.choice(T["letter_words"])
        letter = rng.choice(sorted(set(word)))
        return make_record("counting", f"How many times does the letter '{letter}' appear in the word '{word}'?",
                           gold=str(word.count(letter)))
    items = rng.sample(T["animals"], rng.randint(3, 8))
    return make_record("counting", f"How many words are in this list: {', '.join(items)}?", gold=str(len(items)))


def gen_tables(rng: random.Random) -> Record:
    choice = rng.randrange(4)
    if choice == 0:
        n = rng.randint(2, 12)
        m = rng.choice([5, 10])
        return make_record("tables", f"Write the multiplication table of {n} from 1 to {m}.",
                           gold="|".join(str(n * i) for i in range(1, m + 1)))
    if choice == 1:
        people = rng.sample(T["names"], rng.randint(2, 4))
        rows = ", ".join(f"{p} is {rng.randint(18, 70)}" for p in people)
        return make_record("tables", f"Make a markdown table with columns Name and Age: {rows}.", gold="|".join(people))
    if choice == 2:
        items = rng.sample(T["fruits"], rng.randint(2, 4))
        rows = ", ".join(f"{f} costs ${rng.randint(1, 9)}" for f in items)
        return make_record("tables", f"Put this in a table with columns Fruit and Price: {rows}.", gold="|".join(items))
    cs = rng.sample(T["countries"], 3)
    return make_record("tables", f"Create a table of these countries and their capitals: {', '.join(cs)}.")


def gen_repeats(rng: random.Random) -> Record:
    choice = rng.randrange(4)
    s = rng.choice(T["sentences"])
    if choice == 0:
        return make_record("repeats", f"Repeat this sentence exactly: {s}", gold=s)
    if choice == 1:
        w = rng.choice(T["animals"] + T["fruits"] + T["colours"])
        k = rng.randint(3, 8)
        return make_record("repeats", f"Write the word '{w}' {k} times, separated by spaces.", gold=" ".join([w] * k))
    if choice == 2:
        k = rng.randint(2, 4)
        return make_record("repeats", f"Write the following sentence {k} times: {s}", gold=s)
    return make_record("repeats", f"Copy this text word for word: \"{s}\"", gold=s)


def gen_reformatting(rng: random.Random) -> Record:
    s = rng.choice(T["sentences"])
    choice = rng.randrange(6)
    if choice == 0:
        return make_record("reformatting", f"Convert this sentence to uppercase: {s}", gold=s.upper())
    if choice == 1:
        return make_record("reformatting", f"Convert this sentence to lowercase: {s.upper()}", gold=s.lower())
    if choice == 2:
        items = rng.sample(T["fruits"] + T["animals"], rng.randint(3, 6))
        return make_record("reformatting", f"Turn this comma-separated list into a bulleted list: {', '.join(items)}",
                           gold="|".join(items))
    if choice == 3:
        items = rng.sample(T["colours"] + T["fruits"], rng.randint(3, 6))
        return make_record("reformatting", "Join these items into one comma-separated line:\n" + "\n".join(items),
                           gold=", ".join(items))
    if choice == 4:
        name, age, city = rng.choice(T["names"]), rng.randint(18, 70), rng.choice(T["cities"])
        return make_record("reformatting", f"Write this as JSON with keys name, age and city: {name} is {age} years "
                           f"old and lives in {city}.", gold=f"{name}|{age}|{city}")
    words = s.rstrip(".").split()
    return make_record("reformatting", f"Write each word of this sentence on its own line: {s}", gold="|".join(words))


def gen_arithmetic(rng: random.Random) -> Record:
    choice = rng.randrange(5)
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    if choice == 0:
        return make_record("arithmetic", f"What is {a} + {b}? Show your work step by step.", gold=str(a + b))
    if choice == 1:
        return make_record("arithmetic", f"What is {a} - {b}? Explain step by step.", gold=str(a - b))
    if choice == 2:
        a, b = rng.randint(2, 20), rng.randint(2, 12)
        return make_record("arithmetic", f"Calculate {a} x {b} step by step.", gold=str(a * b))
    if choice == 3:
        price, qty = rng.randint(2, 15), rng.randint(2, 9)
        item = rng.choice(T["fruits"])
        return make_record("arithmetic",
                           f"One {item} costs ${price}. How much do {qty} {item}s cost? Solve it step by step.",
                           gold=str(price * qty))
    c = rng.randint(2, 30)
    return make_record("arithmetic", f"Compute {a} + {b} + {c}. Add the numbers one at a time.", gold=str(a + b + c))


def gen_explanation(rng: random.Random) -> Record:
    return make_record("explanation", rng.choice(T["explain_templates"]).format(t=rng.choice(T["topics"])))


GENERATORS: dict[str, Callable[[random.Random], Record]] = {
    "lists": gen_lists, "counting": gen_counting, "tables": gen_tables, "repeats": gen_repeats,
    "reformatting": gen_reformatting, "arithmetic": gen_arithmetic, "explanation": gen_explanation,
}


def chatterbot_prompts() -> list[str]:
    """The first line (the user's turn) of every chatterbot-corpus English conversation; [] if not installed."""
    try:
        import chatterbot_corpus
        import yaml
    except ImportError:
        return []
    root = os.path.join(os.path.dirname(chatterbot_corpus.__file__), "data", "english", "*.yml")
    prompts = []
    for path in sorted(glob.glob(root)):
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
        for conv in data.get("conversations", []):
            if conv and isinstance(conv[0], str) and 3 <= len(conv[0].strip()) <= 200:
                prompts.append(conv[0].strip())
    return sorted(set(prompts))


def reasoning_gym_available() -> bool:
    try:
        import reasoning_gym  # noqa: F401
    except ImportError:
        return False
    return True


def reasoning_gym_records(tasks: tuple[str, ...], n: int, seed: int, category: str) -> list[Record]:
    """n records spread over reasoning-gym tasks (question, gold answer, task name)."""
    import reasoning_gym

    per = -(-n // len(tasks))
    out = []
    for k, task in enumerate(tasks):
        ds = reasoning_gym.create_dataset(task, size=per, seed=seed + 1000 * k)
        for entry in ds:
            out.append(make_record(category, entry["question"].strip(), gold=str(entry["answer"]), task=task))
    random.Random(seed).shuffle(out)
    return out[:n]


def build_prompts(counts: dict[str, int], seed: int = 0) -> list[Record]:
    """Distinct prompt records per category (counts[category] each, fewer if a source runs out)."""
    rng = random.Random(seed)
    records: list[Record] = []
    for cat, n in counts.items():
        if n <= 0:
            continue
        if cat in GENERATORS or cat in SOURCES:
            records.extend(distinct(GENERATORS.get(cat) or SOURCES[cat], rng, n))
        elif cat == "chat":
            pool = chatterbot_prompts() or list(T["chat_fallback"])
            rng.shuffle(pool)
            records.extend(make_record("chat", p) for p in pool[:n])
        elif cat == "reasoning":
            if reasoning_gym_available():
                records.extend(reasoning_gym_records(RG_TASKS, n, seed, "reasoning"))
            else:
                records.extend(gen_arithmetic(rng) | {"category": "reasoning"} for _ in range(n))
        else:
            raise ValueError(f"unknown category {cat!r}; known: {CATEGORIES}")
    return records
