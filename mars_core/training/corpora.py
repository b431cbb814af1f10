"""Small built-in chat corpora whose answers are predictable several tokens ahead (counting, numbered lists, a table,
a templated weather report), and pasted text turned into chat examples: what a short live MARS run learns from.

Each corpus is a generator of one chat example from a random.Random; corpus_split draws the training items and a
held-out set whose prompts never occur in training (the measure of what was learned, not of what was memorised).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass

Example = dict[str, list[dict[str, str]]]  # {"messages": [{"role": "user", ...}, {"role": "assistant", ...}]}

FRUITS = ("apples", "pears", "plums", "grapes", "lemons", "limes", "figs", "dates", "kiwis", "melons", "cherries",
          "peaches", "mangoes", "oranges", "apricots", "bananas")
CITIES = ("Paris", "Oslo", "Lima", "Cairo", "Tokyo", "Rome", "Quito", "Dakar", "Perth", "Lyon", "Porto", "Kyoto")
SKIES = ("sunny", "cloudy", "rainy", "windy", "foggy", "snowy")
MAX_PASTED_CHARS = 20_000  # pasted text: enough for a page or two, small enough to tokenize in a blink
MIN_PASTED_WORDS = 60  # fewer words make too few examples to hold some out


def chat(prompt: str, answer: str) -> Example:
    """One single-turn chat example."""
    return {"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]}


def counting(rng: random.Random) -> Example:
    """Count from a to b (in steps of 1 or 10): every number after the first two is fixed by them."""
    step = rng.choice((1, 1, 1, 10))
    start, count = rng.randint(1, 90), rng.randint(6, 14)
    numbers = [start + step * i for i in range(count)]
    how = f" in steps of {step}" if step > 1 else ""
    return chat(f"Count from {numbers[0]} to {numbers[-1]}{how}.", ", ".join(map(str, numbers)) + ".")


def numbered_list(rng: random.Random) -> Example:
    """A numbered list of the fruits named in the prompt: the numbers and punctuation are given, the names copied."""
    fruits = rng.sample(FRUITS, rng.randint(3, 7))
    return chat(f"Make a numbered list of: {', '.join(fruits)}.",
                "\n".join(f"{i}. {fruit.capitalize()}" for i, fruit in enumerate(fruits, 1)))


def table(rng: random.Random) -> Example:
    """A markdown table of fruits and prices: the separators and the row layout repeat."""
    rows = [(fruit, rng.randint(1, 9)) for fruit in rng.sample(FRUITS, rng.randint(2, 5))]
    facts = ", ".join(f"{fruit} cost ${price}" for fruit, price in rows)
    lines = ["| Fruit | Price |", "|---|---|", *(f"| {fruit.capitalize()} | ${price} |" for fruit, price in rows)]
    return chat(f"Put this in a table with columns Fruit and Price: {facts}.", "\n".join(lines))


def weather(rng: random.Random) -> Example:
    """A weather report in one fixed template: only the city, the sky and two numbers change."""
    city, sky = rng.choice(CITIES), rng.choice(SKIES)
    low = rng.randint(-5, 20)
    high = low + rng.randint(2, 12)
    return chat(f"Weather report for {city}: {sky}, {low} to {high} degrees.",
                f"Weather in {city} today: {sky}. The low is {low} degrees and the high is {high} degrees. "
                f"Have a good day in {city}!")


@dataclass(frozen=True)
class Corpus:
    """A built-in corpus: how the page names it, one line on what is predictable in it, and its example generator."""

    title: str
    about: str
    make: Callable[[random.Random], Example]


CORPORA = {c.title: c for c in (
    Corpus("counting", "count from a to b: after two numbers the rest is fixed", counting),
    Corpus("numbered list", "the fruits of the prompt as a numbered list", numbered_list),
    Corpus("table", "fruits and prices as a markdown table", table),
    Corpus("weather report", "one templated report: city, sky and two numbers change", weather),
)}
DEFAULT_CORPUS = "counting"
PASTED = "pasted text"  # the corpus made of what the visitor pastes (pasted_examples)


def corpus_split(name: str, train: int = 600, held_out: int = 8, seed: int = 0) -> tuple[list[Example], list[Example]]:
    """`train` training examples of a built-in corpus and `held_out` more whose prompts no training example has
    (drawn from another random stream, skipping any prompt seen in training); a ValueError names the corpora."""
    if name not in CORPORA:
        raise ValueError(f"Unknown corpus {name!r}: pick one of {', '.join(CORPORA)} (or paste text).")
    make, rng = CORPORA[name].make, random.Random(seed)
    examples = [make(rng) for _ in range(train)]
    seen = {e["messages"][0]["content"] for e in examples}
    rng, kept = random.Random(seed + 1_000_003), []
    for _ in range(100 * held_out):
        if len(kept) == held_out:
            break
        example = make(rng)
        prompt = example["messages"][0]["content"]
        if prompt not in seen:
            seen.add(prompt)
            kept.append(example)
    return examples, kept


def pasted_examples(text: str, held_out: int = 4, words: int = 24, cue: int = 6) -> tuple[list[Example], list[Example]]:
    """Pasted text as chat examples: cut into passages of about `words` words; each prompt asks to continue a passage
    from its first `cue` words, the answer is the rest. The last `held_out` passages are kept out of training (the
    text's end is what the model has not seen). A ValueError says what is wrong with the text."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("Paste some text to train on (or pick a built-in corpus).")
    if len(text) > MAX_PASTED_CHARS:
        raise ValueError(f"Pasted text too long: {len(text):,} characters, the limit is {MAX_PASTED_CHARS:,}.")
    tokens = re.findall(r"\S+", text)
    if len(tokens) < MIN_PASTED_WORDS:
        raise ValueError(f"Pasted text too short: {len(tokens)} words, at least {MIN_PASTED_WORDS} are needed "
                         "(some passages are held out to measure what was learned).")
    passages = [tokens[i:i + words] for i in range(0, len(tokens) - cue, words)]
    passages = [p for p in passages if len(p) > cue]
    examples = [chat(f"Continue: {' '.join(p[:cue])}", " ".join(p[cue:])) for p in passages]
    keep = min(held_out, max(1, len(examples) // 4))
    return examples[:-keep], examples[-keep:]
