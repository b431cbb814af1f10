"""What every prompt source shares: the record, phrasing that varies like people do (asks, typos, casing), names."""

from __future__ import annotations

import random
import re
from typing import Any

Record = dict[str, Any]


def make_record(category: str, prompt: str, gold: str | None = None, kind: str | None = None) -> Record:
    rec: Record = {"prompt": prompt, "category": category}
    if gold is not None:
        rec["gold"] = str(gold)
    if kind is not None:
        rec["kind"] = kind
    return rec


# ----------------------------------------------------------------------------- phrasing helpers


def cap_first(s: str) -> str:
    return s[:1].upper() + s[1:] if s else s


def pick_weighted(rng: random.Random, weighted: list[tuple[Any, int]]) -> Any:
    items, weights = zip(*weighted)
    return rng.choices(items, weights=weights, k=1)[0]


def add_typo(rng: random.Random, text: str) -> str:
    """Swap two neighbouring letters of one longer word (a realistic slip), or drop a letter."""
    words = text.split(" ")
    idx = [i for i, w in enumerate(words) if len(w) >= 5 and w.isalpha() and w.islower()]
    if not idx:
        return text
    i = rng.choice(idx)
    w = words[i]
    j = rng.randrange(1, len(w) - 2)
    if rng.random() < 0.6:
        w = w[:j] + w[j + 1] + w[j] + w[j + 2 :]
    else:
        w = w[:j] + w[j + 1 :]
    words[i] = w
    return " ".join(words)


# Ways to wrap a lowercase imperative core ("write a haiku about rain"). {c} = core, {C} = capitalised core.
_ASK_FORMS: list[tuple[str, int]] = [
    ("{C}.", 14),
    ("{C}", 3),
    ("Please {c}.", 5),
    ("Can you {c}?", 6),
    ("Could you {c}, please?", 3),
    ("Could you please {c}?", 3),
    ("I need you to {c}.", 2),
    ("I'd like you to {c}.", 2),
    ("{c}", 5),
    ("hey, can you {c}?", 2),
    ("hi! could you {c}?", 1),
    ("{C}, thanks!", 2),
    ("{C}. Thank you!", 1),
    ("pls {c}", 1),
    ("Quick favour: {c}.", 1),
    ("Would you {c}?", 1),
    ("can u {c}", 1),
    ("{C} please.", 2),
    ("Hello! Please {c}.", 1),
    ("I was wondering if you could {c}.", 1),
]
_HELP_VERBS = (
    "write",
    "draft",
    "plan",
    "translate",
    "fix",
    "come up with",
    "make",
    "create",
    "put together",
    "figure out",
    "compose",
    "pick",
    "find",
    "prepare",
    "organize",
    "choose",
    "understand",
)


def phrase_ask(rng: random.Random, core: str, extras: list[str] | tuple[str, ...] = (), noisy: bool = True) -> str:
    """Wrap a lowercase imperative core in one of many user-like phrasings, then append constraint sentences."""
    forms = list(_ASK_FORMS)
    if core.startswith(_HELP_VERBS):
        forms += [("Help me {c}.", 3), ("can you help me {c}?", 2), ("I need help to {c}.", 1)]
    form = pick_weighted(rng, forms)
    text = form.format(c=core, C=cap_first(core))
    casual = text[:1].islower()
    if extras:
        ex = " ".join(extras)
        if casual and rng.random() < 0.6:
            ex = ex[:1].lower() + ex[1:]
        if text[-1:] not in ".?!":
            text += rng.choice([". ", ", ", " - "]) + (ex[:1].lower() + ex[1:] if rng.random() < 0.5 else ex)
        else:
            text += " " + ex
    if noisy:
        r = rng.random()
        if r < 0.06:
            text = text.lower()
        elif r < 0.12:
            text = add_typo(rng, text)
    return text


def attach_text(rng: random.Random, instruction: str, body: str, multiline: bool = False) -> str:
    """Instruction followed by a pasted body (code, paragraph...)."""
    if instruction[-1:] in ".?!":
        sep = rng.choice(["\n\n", "\n", "\n\n"] if multiline else ["\n\n", "\n", " "])
        return instruction + sep + body
    if rng.random() < 0.5:
        return instruction + ":\n" + ("\n" if multiline and rng.random() < 0.5 else "") + body
    return instruction + ("\n\n" if multiline else ": ") + body


def in_quotes(rng: random.Random, s: str, bare: bool = False) -> str:
    q = rng.choice(['"{}"', '"{}"', "'{}'", "“{}”"] + (["{}"] if bare else []))
    return q.format(s)


def tidy_end(p: str) -> str:
    """Drop doubled end punctuation after a quoted sentence: 'say "Where is it?"?' -> 'say "Where is it?"'."""
    return re.sub(r'([?!])(["\'”])([?.])', r"\1\2", p)


def number_word(n: int) -> str:
    words = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    return words[n] if 0 <= n < len(words) else str(n)


def some_count(rng: random.Random, n: int) -> str:
    return number_word(n) if rng.random() < 0.35 else str(n)


NAMES = [
    "Ana",
    "Ben",
    "Chloe",
    "Diego",
    "Elif",
    "Farah",
    "Gus",
    "Hana",
    "Ivan",
    "Jonas",
    "Keiko",
    "Lucas",
    "Maya",
    "Nadia",
    "Omar",
    "Priya",
    "Quinn",
    "Rosa",
    "Sam",
    "Tariq",
    "Uma",
    "Viktor",
    "Wen",
    "Yara",
    "Zoe",
]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
