"""What every prompt source shares: the record, phrasing that varies like people do (asks, typos, casing), and
`compose`, which turns a template entry of a bank into a prompt."""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from typing import Any

from .fill import bank, cap_first, fill

Record = dict[str, Any]
_P = bank("phrasing")
NAMES, DAYS, MONTHS, NUMBER_WORDS = _P["names"], _P["days"], _P["months"], _P["number_words"]
_HELP_VERBS = tuple(_P["help_verbs"])


def make_record(category: str, prompt: str, gold: str | None = None, kind: str | None = None,
                task: str | None = None) -> Record:
    """A prompt record: "kind" is a source's sub-kind, "task" a reasoning-gym task (mars_core's scorer asks it)."""
    rec: Record = {"prompt": prompt, "category": category}
    for key, value in (("gold", gold), ("kind", kind), ("task", task)):
        if value is not None:
            rec[key] = str(value)
    return rec


def pick_weighted(rng: random.Random, weighted: Sequence[Sequence[Any]]) -> Any:
    """One item of [(item, weight), ...], drawn in proportion to the weights."""
    items, weights = zip(*weighted)
    return rng.choices(items, weights=weights, k=1)[0]


def one_of(weighted: dict[Callable[[random.Random], Record], int]) -> Callable[[random.Random], Record]:
    """A source drawing from several prompt kinds in proportion to their weights."""
    kinds = list(weighted.items())

    def generate(rng: random.Random) -> Record:
        return pick_weighted(rng, kinds)(rng)

    return generate


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


def phrase_ask(rng: random.Random, core: str, extras: Sequence[str] = (), noisy: bool = True) -> str:
    """Wrap a lowercase imperative core ("write a haiku about rain") in one of many user-like phrasings
    (banks/phrasing.json: {c} = core, {C} = capitalised core), then append constraint sentences."""
    forms = _P["ask_forms"] + (_P["help_forms"] if core.startswith(_HELP_VERBS) else [])
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


def compose(rng: random.Random, entry: str | dict, extras: Sequence[str] | Callable[[], list[str]] = (),
            noisy: bool = True, **values: Any) -> str:
    """A prompt from a template entry of a bank and the values of its fields (see fill).

    A string is the prompt itself. A dict holds "say" (the prompt) or "ask" (an imperative core, its spaces tidied,
    that phrase_ask wraps with the extras: a function giving them is called after the core is filled), and may add:
    "draw", values to draw before the rest; "join", the separator after which a "say" takes the extras; "extra", one
    more extra for an "ask" (at the odds "odds" where given); "noisy": false, no typos or lower-casing; "then", text
    that follows; "attach", the value pasted below as a multi-line body. A list in place of a template is a choice."""
    if isinstance(entry, str):
        return fill(entry, **values)
    for name in entry.get("draw", ()):
        values[name] = values[name]()
    if "say" in entry:
        text = fill(pick(rng, entry["say"]), **values)
        if "join" in entry:
            extras = extras() if callable(extras) else extras
            text += entry["join"] + " ".join(extras) if extras else ""
    else:
        core = " ".join(fill(pick(rng, entry["ask"]), **values).split())
        extras = list(extras() if callable(extras) else extras)
        if "extra" in entry and ("odds" not in entry or rng.random() < entry["odds"]):
            extras.append(fill(pick(rng, entry["extra"]), **values))
        text = phrase_ask(rng, core, extras, entry.get("noisy", noisy))
    text += fill(entry.get("then", ""), **values)
    return attach_text(rng, text, values[entry["attach"]], multiline=True) if "attach" in entry else text


def pick(rng: random.Random, options: str | Sequence[str]) -> str:
    """A template, or one of a list of them."""
    return options if isinstance(options, str) else rng.choice(options)


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
    return NUMBER_WORDS[n] if 0 <= n <= 10 else str(n)


def some_count(rng: random.Random, n: int) -> str:
    return number_word(n) if rng.random() < 0.35 else str(n)
