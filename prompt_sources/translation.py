"""Translation prompts: short sentences and phrases between English and French, Spanish, German, Italian and
Portuguese, both ways (no gold: the base model's translations are its own). Words and templates:
banks/translation.json.
"""

from __future__ import annotations

import random

from .fill import bank, later
from .phrasing import Record, compose, in_quotes, make_record, one_of, pick_weighted, tidy_end

T = bank("translation")


def _tr_to_foreign(rng: random.Random) -> Record:
    lang = rng.choice(T["languages"])
    L = pick_weighted(rng, [(lang, 6), (lang.lower(), 2)])
    src = rng.choice(T["en_sentences"]) if rng.random() < 0.82 else rng.choice(T["en_short"])
    if rng.random() < 0.1:
        src = src.lower().rstrip(".")
    q = in_quotes(rng, src)
    p = compose(rng, rng.choice(T["to_foreign"]), L=L, q=q, src=src, note=later(rng, T["notes"]))
    return make_record("translation", tidy_end(p.strip()), kind="en_to_x")


def _tr_from_foreign(rng: random.Random) -> Record:
    lang = rng.choice(T["languages"])
    src = rng.choice(T["foreign"][lang])
    q = in_quotes(rng, src)
    return make_record("translation", tidy_end(compose(rng, rng.choice(T["from_foreign"]), lang=lang, q=q, src=src)),
                       kind="x_to_en")


def _tr_between(rng: random.Random) -> Record:
    a, b = rng.sample(T["languages"], 2)
    src = rng.choice(T["foreign"][a])
    q = in_quotes(rng, src)
    return make_record("translation", tidy_end(compose(rng, rng.choice(T["between"]), a=a, b=b, q=q, src=src)),
                       kind="x_to_y")


def _tr_vocab(rng: random.Random) -> Record:
    lang = rng.choice(T["languages"])
    words = rng.sample(T["vocab"], rng.randint(1, 6))
    template = rng.choice(T["vocab_words"])
    if len(words) == 1:
        template = rng.choice(T["vocab_word"])
    return make_record("translation", compose(rng, template, lang=lang, words=words), kind="vocab")


gen_translation = one_of({_tr_to_foreign: 10, _tr_from_foreign: 7, _tr_between: 2, _tr_vocab: 3})
