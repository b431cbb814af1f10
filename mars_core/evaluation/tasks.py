"""Prompt sources for self-distillation and evaluation, with gold answers and scorers where they exist.

Categories: predictable spans ("lists", "counting", "tables", "repeats", "reformatting", "arithmetic") and open
ones ("chat", "explanation", "reasoning", and the prompts that look like use from mars_core.evaluation.sources:
"code", "writing", "everyday", "translation"). Programmatic prompts are built here from a seeded RNG; "chat" comes
from the chatterbot-corpus YAML files when that package is installed, "reasoning" from reasoning-gym task
generators when it is installed (each falls back to built-in prompts otherwise, so nothing is downloaded).
"""

from __future__ import annotations

import glob
import os
import random
import re
from collections.abc import Callable
from typing import Any

from .sources import SOURCE_CATEGORIES, SOURCES

PREDICTABLE = ("lists", "counting", "tables", "repeats", "reformatting", "arithmetic")
OPEN = ("chat", "explanation", "reasoning") + SOURCE_CATEGORIES  # + code, writing, everyday, translation
CATEGORIES = PREDICTABLE + OPEN

# reasoning-gym tasks with short questions and gold answers a small model can at least attempt.
RG_TASKS = (
    "basic_arithmetic", "chain_sum", "letter_counting", "leg_counting", "simple_equations",
    "calendar_arithmetic", "spell_backward", "sentence_reordering", "time_intervals", "word_sorting",
)
RG_ARITHMETIC = ("basic_arithmetic", "chain_sum")

Record = dict[str, Any]

# ----------------------------------------------------------------------------- word banks

COLOURS = ["red", "blue", "green", "yellow", "orange", "purple", "pink", "brown", "black", "white", "grey"]
ANIMALS = ["cat", "dog", "horse", "cow", "sheep", "lion", "tiger", "rabbit", "mouse", "eagle", "shark", "whale",
           "frog", "snake", "bear", "wolf", "fox", "deer", "owl", "duck"]
FRUITS = ["apple", "banana", "orange", "grape", "mango", "pear", "peach", "cherry", "lemon", "plum", "kiwi",
          "melon", "strawberry", "pineapple"]
COUNTRIES = ["France", "Germany", "Italy", "Spain", "Japan", "China", "India", "Brazil", "Canada", "Mexico",
             "Egypt", "Kenya", "Australia", "Russia", "Peru", "Norway", "Greece", "Turkey"]
NAMES = ["Alice", "Bob", "Carol", "David", "Emma", "Frank", "Grace", "Henry", "Ivy", "Jack", "Kate", "Liam",
         "Mia", "Noah", "Olivia", "Paul"]
CITIES = ["Paris", "London", "Rome", "Tokyo", "Berlin", "Madrid", "Cairo", "Lima", "Oslo", "Delhi", "Sydney"]
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "I like to read books on rainy days.",
    "The sun rises in the east and sets in the west.",
    "Water boils at one hundred degrees Celsius.",
    "My favourite colour is blue.",
    "The cat sat on the mat.",
    "We went to the park after lunch.",
    "Practice makes perfect.",
    "The train leaves at nine o'clock.",
    "She planted tomatoes in the garden.",
    "Learning a new language takes time.",
    "The library is closed on Sundays.",
    "He drinks a cup of tea every morning.",
    "The children played football in the street.",
    "Please turn off the lights when you leave.",
    "The moon orbits the Earth.",
    "Birds fly south in the winter.",
    "A good breakfast gives you energy.",
    "The museum opens at ten in the morning.",
    "Music can change your mood.",
]
TOPICS = [
    "photosynthesis", "gravity", "the water cycle", "democracy", "inflation", "a computer", "the internet",
    "electricity", "a volcano", "climate change", "evolution", "the immune system", "a black hole", "vaccines",
    "the stock market", "recycling", "an atom", "the solar system", "DNA", "machine learning", "a rainbow",
    "earthquakes", "the heart", "friction", "a battery", "the moon's phases", "tides", "renewable energy",
    "a budget", "sleep", "exercise", "bacteria", "the printing press", "the Roman Empire", "a democracy vote",
    "supply and demand", "magnets", "sound", "light", "clouds", "a calendar", "music", "a library", "plants",
    "the brain", "taxes", "a bridge", "an airplane", "a refrigerator", "coffee",
]
EXPLAIN_TEMPLATES = [
    "Explain {t} in simple terms.",
    "What is {t}? Give a short explanation.",
    "Describe how {t} works.",
    "Why is {t} important?",
    "Explain {t} to a ten-year-old.",
    "Give a brief overview of {t}.",
]
CHAT_FALLBACK = [
    "Hello, how are you?", "What is your name?", "Can you tell me a joke?", "What do you like to do?",
    "What is your favourite book?", "Do you like music?", "How was your day?", "What should I cook tonight?",
    "Can you recommend a movie?", "What is the meaning of life?", "Are you a robot?", "Tell me something fun.",
    "What makes you happy?", "Do you have any hobbies?", "What is the weather like?", "Good morning!",
]
NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"]


def _rec(category: str, prompt: str, gold: str | None = None, task: str | None = None, **meta: Any) -> Record:
    rec: Record = {"prompt": prompt, "category": category}
    if gold is not None:
        rec["gold"] = str(gold)
    if task is not None:
        rec["task"] = task
    if meta:
        rec["meta"] = meta
    return rec


# ----------------------------------------------------------------------------- programmatic generators


def gen_lists(rng: random.Random) -> Record:
    k = rng.choice([3, 4, 5, 6, 7])
    choice = rng.randrange(10)
    if choice == 0:
        return _rec("lists", "List the days of the week, one per line.")
    if choice == 1:
        return _rec("lists", "List the twelve months of the year in order.")
    if choice == 2:
        n = rng.randint(5, 12)
        return _rec("lists", f"List the first {n} letters of the alphabet, separated by commas.",
                    gold=", ".join("ABCDEFGHIJKL"[:n]))
    if choice == 3:
        a = rng.randint(1, 40)
        b = a + rng.randint(4, 12)
        return _rec("lists", f"List all the even numbers between {a} and {b}.",
                    gold=", ".join(str(i) for i in range(a, b + 1) if i % 2 == 0))
    kinds = [("colours", COLOURS), ("animals", ANIMALS), ("fruits", FRUITS), ("countries", COUNTRIES),
             ("cities", CITIES)]
    name, bank = rng.choice(kinds)
    style = rng.choice(["as a numbered list", "as a bulleted list", "separated by commas", "one per line"])
    if choice in (4, 5, 6):
        return _rec("lists", f"Name {k} {name}, {style}.")
    items = rng.sample(bank, k)
    return _rec("lists", f"Write these {name} {style}: {' '.join(items)}", gold="|".join(items))


def gen_counting(rng: random.Random) -> Record:
    choice = rng.randrange(6)
    if choice == 0:
        a = rng.randint(1, 50)
        b = a + rng.randint(5, 15)
        return _rec("counting", f"Count from {a} to {b}.", gold=", ".join(map(str, range(a, b + 1))))
    if choice == 1:
        b = rng.randint(1, 30)
        a = b + rng.randint(5, 12)
        return _rec("counting", f"Count backwards from {a} to {b}.", gold=", ".join(map(str, range(a, b - 1, -1))))
    if choice == 2:
        step = rng.choice([2, 3, 5, 10])
        n = rng.randint(5, 10)
        seq = [step * i for i in range(1, n + 1)]
        return _rec("counting", f"Count by {step}s up to {seq[-1]}.", gold=", ".join(map(str, seq)))
    if choice == 3:
        n = rng.randint(5, 12)
        return _rec("counting", f"Write the numbers from one to {NUMBER_WORDS[n]} in words.",
                    gold=", ".join(NUMBER_WORDS[1:n + 1]))
    if choice == 4:
        word = rng.choice(["banana", "mississippi", "strawberry", "elephant", "committee", "bookkeeper", "apple"])
        letter = rng.choice(sorted(set(word)))
        return _rec("counting", f"How many times does the letter '{letter}' appear in the word '{word}'?",
                    gold=str(word.count(letter)))
    items = rng.sample(ANIMALS, rng.randint(3, 8))
    return _rec("counting", f"How many words are in this list: {', '.join(items)}?", gold=str(len(items)))


def gen_tables(rng: random.Random) -> Record:
    choice = rng.randrange(4)
    if choice == 0:
        n = rng.randint(2, 12)
        m = rng.choice([5, 10])
        return _rec("tables", f"Write the multiplication table of {n} from 1 to {m}.",
                    gold="|".join(str(n * i) for i in range(1, m + 1)))
    if choice == 1:
        people = rng.sample(NAMES, rng.randint(2, 4))
        rows = ", ".join(f"{p} is {rng.randint(18, 70)}" for p in people)
        return _rec("tables", f"Make a markdown table with columns Name and Age: {rows}.", gold="|".join(people))
    if choice == 2:
        items = rng.sample(FRUITS, rng.randint(2, 4))
        rows = ", ".join(f"{f} costs ${rng.randint(1, 9)}" for f in items)
        return _rec("tables", f"Put this in a table with columns Fruit and Price: {rows}.", gold="|".join(items))
    cs = rng.sample(COUNTRIES, 3)
    return _rec("tables", f"Create a table of these countries and their capitals: {', '.join(cs)}.")


def gen_repeats(rng: random.Random) -> Record:
    choice = rng.randrange(4)
    s = rng.choice(SENTENCES)
    if choice == 0:
        return _rec("repeats", f"Repeat this sentence exactly: {s}", gold=s)
    if choice == 1:
        w = rng.choice(ANIMALS + FRUITS + COLOURS)
        k = rng.randint(3, 8)
        return _rec("repeats", f"Write the word '{w}' {k} times, separated by spaces.", gold=" ".join([w] * k))
    if choice == 2:
        k = rng.randint(2, 4)
        return _rec("repeats", f"Write the following sentence {k} times: {s}", gold=s)
    return _rec("repeats", f"Copy this text word for word: \"{s}\"", gold=s)


def gen_reformatting(rng: random.Random) -> Record:
    s = rng.choice(SENTENCES)
    choice = rng.randrange(6)
    if choice == 0:
        return _rec("reformatting", f"Convert this sentence to uppercase: {s}", gold=s.upper())
    if choice == 1:
        return _rec("reformatting", f"Convert this sentence to lowercase: {s.upper()}", gold=s.lower())
    if choice == 2:
        items = rng.sample(FRUITS + ANIMALS, rng.randint(3, 6))
        return _rec("reformatting", f"Turn this comma-separated list into a bulleted list: {', '.join(items)}",
                    gold="|".join(items))
    if choice == 3:
        items = rng.sample(COLOURS + FRUITS, rng.randint(3, 6))
        return _rec("reformatting", "Join these items into one comma-separated line:\n" + "\n".join(items),
                    gold=", ".join(items))
    if choice == 4:
        name, age, city = rng.choice(NAMES), rng.randint(18, 70), rng.choice(CITIES)
        return _rec("reformatting", f"Write this as JSON with keys name, age and city: {name} is {age} years old "
                    f"and lives in {city}.", gold=f"{name}|{age}|{city}")
    words = s.rstrip(".").split()
    return _rec("reformatting", f"Write each word of this sentence on its own line: {s}", gold="|".join(words))


def gen_arithmetic(rng: random.Random) -> Record:
    choice = rng.randrange(5)
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    if choice == 0:
        return _rec("arithmetic", f"What is {a} + {b}? Show your work step by step.", gold=str(a + b))
    if choice == 1:
        return _rec("arithmetic", f"What is {a} - {b}? Explain step by step.", gold=str(a - b))
    if choice == 2:
        a, b = rng.randint(2, 20), rng.randint(2, 12)
        return _rec("arithmetic", f"Calculate {a} x {b} step by step.", gold=str(a * b))
    if choice == 3:
        price, qty = rng.randint(2, 15), rng.randint(2, 9)
        item = rng.choice(FRUITS)
        return _rec("arithmetic", f"One {item} costs ${price}. How much do {qty} {item}s cost? Solve it step by step.",
                    gold=str(price * qty))
    c = rng.randint(2, 30)
    return _rec("arithmetic", f"Compute {a} + {b} + {c}. Add the numbers one at a time.", gold=str(a + b + c))


def gen_explanation(rng: random.Random) -> Record:
    return _rec("explanation", rng.choice(EXPLAIN_TEMPLATES).format(t=rng.choice(TOPICS)))


GENERATORS: dict[str, Callable[[random.Random], Record]] = {
    "lists": gen_lists, "counting": gen_counting, "tables": gen_tables, "repeats": gen_repeats,
    "reformatting": gen_reformatting, "arithmetic": gen_arithmetic, "explanation": gen_explanation,
}


# ----------------------------------------------------------------------------- package sources


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
            out.append(_rec(category, entry["question"].strip(), gold=str(entry["answer"]), task=task))
    random.Random(seed).shuffle(out)
    return out[:n]


_RG_CACHE: dict[str, Any] = {}


def _rg_dataset(task: str):
    if task not in _RG_CACHE:
        import reasoning_gym

        _RG_CACHE[task] = reasoning_gym.create_dataset(task, size=1, seed=0)
    return _RG_CACHE[task]


# ----------------------------------------------------------------------------- building the prompt sets


def build_prompts(counts: dict[str, int], seed: int = 0) -> list[Record]:
    """Distinct prompt records per category (counts[category] each, fewer if a source runs out)."""
    rng = random.Random(seed)
    records: list[Record] = []
    for cat, n in counts.items():
        if n <= 0:
            continue
        if cat in GENERATORS or cat in SOURCES:
            gen = GENERATORS.get(cat) or SOURCES[cat]
            seen: dict[str, Record] = {}
            for _ in range(n * 50):
                rec = gen(rng)
                seen.setdefault(rec["prompt"], rec)
                if len(seen) >= n:
                    break
            records.extend(seen.values())
        elif cat == "chat":
            pool = chatterbot_prompts() or list(CHAT_FALLBACK)
            rng.shuffle(pool)
            records.extend(_rec("chat", p) for p in pool[:n])
        elif cat == "reasoning":
            if reasoning_gym_available():
                records.extend(reasoning_gym_records(RG_TASKS, n, seed, "reasoning"))
            else:
                records.extend(gen_arithmetic(rng) | {"category": "reasoning"} for _ in range(n))
        else:
            raise ValueError(f"unknown category {cat!r}; known: {CATEGORIES}")
    return records


# ----------------------------------------------------------------------------- scoring

_NUM = re.compile(r"-?\d+(?:[.,]\d+)*(?:/\d+)?")


def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", s.strip().lower())


def _numbers(text: str) -> list[str]:
    return [m.replace(",", "") for m in _NUM.findall(text)]


def _candidates(text: str) -> list[str]:
    """Answer strings a scorer may try: the whole answer, its last line, a boxed/"answer is" span, the last number."""
    text = text.strip()
    cands = [text]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if lines:
        cands.append(lines[-1])
    m = re.findall(r"(?:answer is|answer:|=)\s*\**\s*([^\n*]+)", text, re.IGNORECASE)
    if m:
        cands.append(m[-1].strip().rstrip("."))
    nums = _numbers(text)
    if nums:
        cands.append(nums[-1])
    return cands


def score(record: Record, answer: str) -> float | None:
    """Task accuracy of an answer in [0, 1], or None where the record has no gold answer.

    reasoning-gym records use the task's own scorer (best over a few extracted candidates); numeric golds
    need the number to be the last number of the answer (or the 'answer is' span); list-like golds ("a|b|c")
    need every item to appear; other golds need to appear (case- and whitespace-insensitive)."""
    gold = record.get("gold")
    if gold is None:
        return None
    task = record.get("task")
    if task:
        try:
            ds = _rg_dataset(task)
            entry = {"question": record.get("prompt", ""), "answer": gold, "metadata": record.get("rg_metadata", {})}
            best = 0.0
            for cand in _candidates(answer):
                try:
                    best = max(best, float(ds.score_answer(cand, entry) or 0.0))
                except Exception:  # some scorers need metadata we do not keep: fall back to matching below
                    pass
            if best > 0:
                return best
        except Exception:
            pass
    g = _norm(gold)
    a = _norm(answer)
    if _NUM.fullmatch(gold.strip()):
        nums = _numbers(answer)
        return float(bool(nums) and nums[-1] == gold.strip().replace(",", ""))
    if "|" in gold:
        return float(all(_norm(part) in a for part in gold.split("|")))
    if g in a:
        return 1.0
    # sequences: accept the same items with other separators (newlines, bullets)
    items = [x for x in re.split(r"[,\s]+", g) if x]
    return float(len(items) > 1 and all(x in a for x in items))
