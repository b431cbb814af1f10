"""Writing prompts: emails, messages, letters, invitations, thank-you notes, product texts, summaries of given
paragraphs, outlines, slogans, bios, short creative pieces and rewrites, in many tones and lengths. Words,
paragraphs and templates: banks/writing.json.
"""

from __future__ import annotations

import random

from .fill import bank, draw, fill, later
from .phrasing import (
    DAYS,
    MONTHS,
    NAMES,
    Record,
    attach_text,
    compose,
    in_quotes,
    make_record,
    one_of,
    phrase_ask,
    some_count,
)

W = bank("writing")
S = W["slots"]


def _writing_email(rng: random.Random) -> Record:
    who = rng.choice(list(W["email_tasks"]))
    slots = {**S, "day": DAYS, "month": MONTHS, "n": range(2, 6), "name": NAMES}
    purpose = fill(rng.choice(W["email_tasks"][who]), **draw(rng, slots))
    tone = rng.choice(W["tones"])
    extras = []
    if rng.random() < 0.45:
        extras.append(rng.choice(W["lengths"]))
    if rng.random() < 0.2:
        name = rng.choice(NAMES)
        extras.append(fill(rng.choice(W["email_notes"]), name=name))
    p = compose(rng, rng.choice(W["email"]), extras, who=who, purpose=purpose, tone=tone)
    return make_record("writing", p, kind="email")


def _writing_message(rng: random.Random) -> Record:
    slots = {"rel": W["relations"], "lost": W["losses"], "won": W["wins"], "forgot": W["forgotten"],
             "event": W["events_small"], "day": DAYS, "test": W["tests"], "skill": S["skill"]}
    kind = fill(rng.choice(W["message_kinds"]), **draw(rng, slots))
    extras = []
    if rng.random() < 0.4:
        tone = rng.choice(W["tones"])
        extras.append(fill(rng.choice(W["message_notes"]), tone=tone))
    return make_record("writing", compose(rng, W["message"], extras, k=kind), kind="message")


def _writing_letter(rng: random.Random) -> Record:
    slots = {"job": S["job"], "issue": W["provider_issues"], "n": [5, 10, 20], "issue2": W["council_issues"],
             "news": W["news"], "fixture": S["fixture"], "rel": W["patients"], "country": W["countries"],
             "program": W["programs"]}
    kind = fill(rng.choice(W["letter_kinds"]), **draw(rng, slots))
    extras = [rng.choice(W["lengths"])] if rng.random() < 0.35 else []
    if rng.random() < 0.3:
        extras.append(fill(W["tone_note"], tone=rng.choice(W["tones"])))
    return make_record("writing", phrase_ask(rng, fill(W["letter"], kind=kind), extras), kind="letter")


def _writing_invitation(rng: random.Random) -> Record:
    ev = fill(rng.choice(W["events"]), **draw(rng, {"age": [18, 21, 25, 30, 40, 50, 60], "name": NAMES}))
    hours = [11, 12, 1, 2, 3, 4, 5, 6, 7, 8]
    when = fill(W["when"], **draw(rng, {"day": DAYS, "hour": hours, "minutes": W["minutes"]}))
    where = rng.choice(W["places"])
    entry = rng.choice(W["invitation"])
    extras = [rng.choice(W["invitation_notes"])] if rng.random() < 0.4 else []
    p = compose(rng, entry, extras, ev=ev, when=when, where=where, style=later(rng, W["invitation_styles"]))
    return make_record("writing", p, kind="invitation")


def _writing_thanks(rng: random.Random) -> Record:
    what = rng.choice(W["thanks_for"])
    who = rng.choice(W["relations"] + W["thanks_also"])
    entry = rng.choice(W["thanks"])
    extras = [rng.choice(W["lengths"] + W["thanks_notes"])] if rng.random() < 0.4 else []
    p = compose(rng, entry, extras, what=what, who=who, tone=later(rng, W["tones"]))
    return make_record("writing", p, kind="thanks")


def _writing_product(rng: random.Random) -> Record:
    prod, plat = rng.choice(W["products"]), rng.choice(W["platforms"])
    extras = [rng.choice(W["product_notes"])] if rng.random() < 0.5 else []
    return make_record("writing", compose(rng, W["product"], extras, prod=prod, plat=plat), kind="product")


def _writing_summary(rng: random.Random) -> Record:
    para = rng.choice(W["paragraphs"])
    core = fill(rng.choice(W["summary"]), n=later(rng, [2, 3]), w=later(rng, [20, 25, 30, 40]))
    if rng.random() < 0.2:
        instr = rng.choice(W["summary_asks"])
    else:
        instr = phrase_ask(rng, core, noisy=False)
    if rng.random() < 0.25:
        para = in_quotes(rng, para, bare=True)
    return make_record("writing", attach_text(rng, instr, para), kind="summary")


def _writing_outline(rng: random.Random) -> Record:
    topic, kind = rng.choice(W["outline_topics"]), rng.choice(W["outline_kinds"])
    extras = []
    if rng.random() < 0.4:
        audience = rng.choice(W["audiences"])
        extras.append(fill(rng.choice(W["outline_notes"]), audience=audience))
    return make_record("writing", compose(rng, W["outline"], extras, topic=topic, kind=kind), kind="outline")


def _writing_slogan(rng: random.Random) -> Record:
    biz, k, style = rng.choice(W["businesses"]), rng.choice([3, 5, 5, 8, 10]), rng.choice(W["slogan_styles"])
    p = compose(rng, rng.choice(W["slogan"]), biz=biz, style=style, count=lambda: some_count(rng, k))
    return make_record("writing", p, kind="slogan")


def _writing_bio(rng: random.Random) -> Record:
    prof, years = rng.choice(W["professions"]), rng.randint(1, 25)
    h1, h2 = rng.sample(W["hobbies"], 2)
    place, person = rng.choice(W["bio_places"]), rng.choice(W["persons"])
    extras = [rng.choice(W["bio_notes"])] if rng.random() < 0.5 else []
    p = compose(rng, rng.choice(W["bio"]), extras, noisy=False, prof=prof, years=years, h1=h1, h2=h2, place=place,
                person=person, their_place=place.replace("my ", "their "), name=later(rng, NAMES))
    return make_record("writing", p, kind="bio")


def _writing_creative(rng: random.Random) -> Record:
    subj, kind = rng.choice(W["creative_subjects"]), rng.choice(W["creative_kinds"])
    extras = [rng.choice(W["creative_notes"])] if rng.random() < 0.35 else []
    return make_record("writing", phrase_ask(rng, fill(W["creative"], kind=kind, subj=subj), extras), kind="creative")


def _writing_rewrite(rng: random.Random) -> Record:
    text, core = rng.choice(W["casual_texts"]), rng.choice(W["rewrite"])
    p = attach_text(rng, phrase_ask(rng, core, noisy=False), in_quotes(rng, text, bare=True))
    return make_record("writing", p, kind="rewrite")


gen_writing = one_of({
    _writing_email: 16, _writing_message: 10, _writing_letter: 6, _writing_invitation: 6, _writing_thanks: 5,
    _writing_product: 7, _writing_summary: 16, _writing_outline: 6, _writing_slogan: 5, _writing_bio: 6,
    _writing_creative: 6, _writing_rewrite: 6,
})
