"""Writing prompts: emails, messages, letters, invitations, thank-you notes, product texts, summaries of given
paragraphs, outlines, slogans, bios, short creative pieces and rewrites, in many tones and lengths.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from .phrasing import (
    DAYS,
    MONTHS,
    NAMES,
    Record,
    attach_text,
    in_quotes,
    make_record,
    phrase_ask,
    pick_weighted,
    some_count,
)

# Short paragraphs written for this module (fictional or general facts) to summarise, shorten, retitle...
PARAGRAPHS = [
    "Our neighbourhood café started a reusable cup scheme last spring. Anyone who brings their own mug gets "
    "twenty cents off a drink, and the owners say they now throw away about three hundred fewer paper cups a "
    "week. Two other cafés on the same street are planning to copy the idea.",
    "The town library has stopped charging late fees. Staff found that the fines brought in very little money "
    "but kept many families away, especially children who had lost a book. Since the change, the number of "
    "active library cards has gone up by almost a fifth.",
    "After a year of complaints about dangerous junctions, the city council voted to build protected bike lanes "
    "on three main roads. Shop owners worry about losing parking spaces, while cycling groups say the new lanes "
    "will bring more customers on foot and by bike.",
    "A survey of four hundred office workers found that most of them get more done at home on days with no "
    "meetings, but feel lonelier and find it harder to ask quick questions. Many said two office days a week "
    "felt like the right balance.",
    "Honeybee colonies have been struggling in many regions. Researchers point to a mix of causes: parasites, "
    "the loss of wild flowers, certain pesticides and unusual weather. Planting native flowers in gardens and "
    "parks is one simple way people can help.",
    "Teenagers' body clocks naturally shift later during puberty, which makes early school start times hard on "
    "them. Some schools that moved the first lesson to nine o'clock reported better attendance and fewer "
    "students falling asleep in class.",
    "In its latest quarter the company sold eight percent more than a year earlier, mostly thanks to its new "
    "line of kitchen appliances. Profit still fell, however, because shipping costs rose sharply and the firm "
    "chose not to pass them on to customers.",
    "This year's city marathon had a record nine thousand runners. The race was won in just over two hours and "
    "ten minutes, but organisers were most proud of the eighty-year-old who finished for the twentieth time in "
    "a row.",
    "A small volcano on the peninsula erupted overnight, sending lava down an empty valley. Scientists say the "
    "eruption is not a threat to nearby towns, and the airport is operating normally, although a hiking trail "
    "has been closed.",
    "The new phone has a bigger battery that the maker says lasts two full days, a brighter screen and a camera "
    "that works better in low light. It costs about the same as last year's model, but it no longer comes with "
    "a charger in the box.",
    "Baking sourdough takes patience. You need a starter, which is a mix of flour and water full of wild yeast, "
    "and it has to be fed every day. The dough then rises slowly for many hours, which gives the bread its "
    "sour taste and chewy crust.",
    "The ancient library of Alexandria is often remembered as the greatest collection of knowledge in the old "
    "world. Historians now think it did not vanish in one dramatic fire but declined slowly over centuries as "
    "funding and scholars moved elsewhere.",
    "Octopuses are surprisingly clever. They can open jars, find their way through mazes and even recognise "
    "individual people. Most of their neurons are in their arms, which means each arm can react to what it "
    "touches almost on its own.",
    "Electric scooters have become common in the city centre, but so have complaints about scooters left on "
    "pavements. Starting next month, riders will have to park in marked zones or keep paying for the ride "
    "until they do.",
    "Pupils at the primary school have turned an unused corner of the playground into a vegetable garden. "
    "Each class looks after one bed, and the carrots and beans they grow are used in school lunches once a "
    "month.",
    "A community fridge has opened outside the sports centre. Shops, bakeries and neighbours leave food that "
    "would otherwise be thrown away, and anyone can take what they need. Volunteers check the fridge twice a "
    "day to keep it clean.",
    "Bacteria can become resistant to antibiotics when the drugs are used too often or stopped too early. "
    "Doctors are asking patients to finish their courses of treatment and not to ask for antibiotics for colds, "
    "which are caused by viruses.",
    "Sixty companies took part in a six-month trial of a four-day working week with no loss of pay. Most of "
    "them reported similar or better results, and staff said they slept better and felt less stressed. Almost "
    "all the firms decided to keep the new schedule.",
    "An expedition using a remote-controlled submarine found dozens of animals in a deep ocean trench that "
    "scientists had never seen before, including a see-through sea cucumber and a tiny pink crab. Describing "
    "them all could take years.",
    "Much of the plastic in the ocean comes from a small number of rivers that carry rubbish from land to sea. "
    "Some projects now place floating barriers at river mouths to catch bottles and bags before they reach "
    "open water.",
    "In the novel, a retired lighthouse keeper finds a message in a bottle written by a girl who lived on the "
    "island fifty years earlier. He decides to track her down, and the search slowly forces him to face his "
    "own past.",
    "At today's meeting the team agreed to push the app launch back by two weeks so that the payment bug can be "
    "fixed properly. Marketing will move the campaign dates, and the next check-in is on Thursday at ten.",
    "I bought this blender three months ago. It crushes ice well and is easy to clean, but it is very loud and "
    "the lid is hard to lock into place. For the price it is decent, though I would not call it great.",
    "The hotel was in a perfect spot, just five minutes from the old town, and the staff were very friendly. "
    "The rooms, however, were small and the walls thin, so we heard our neighbours every night. Breakfast was "
    "excellent.",
    "Version 4.2 of the app adds a dark mode, lets you pin your favourite notes to the top of the list and "
    "fixes a bug that sometimes logged users out. The update is free and will roll out over the next week.",
    "The museum's new exhibition shows fabrics that are more than two thousand years old. Some pieces still "
    "have bright colours, which were made from plants, insects and shells. Visitors can also try weaving on a "
    "copy of an ancient loom.",
    "After the driest summer in decades, the town has banned watering gardens with hoses and filling private "
    "swimming pools. Water levels in the reservoir are at a third of their usual height, and the rules will stay "
    "until autumn rains arrive.",
    "A new study followed two thousand adults for ten years and found that people who walked about seven "
    "thousand steps a day had a lower risk of heart disease than those who walked less. Walking more than that "
    "brought only small extra benefits.",
    "Many migrating birds seem to use the Earth's magnetic field to find their way, sensing it perhaps through "
    "special proteins in their eyes. They also use the sun, the stars and landmarks such as coastlines and "
    "mountains.",
    "The school district will put solar panels on the roofs of twelve schools over the summer holidays. The "
    "panels should cover about half of the schools' electricity needs, and the savings will be spent on new "
    "books and computers.",
    "Rents in the city have risen by more than a quarter in three years. More students now share flats with "
    "four or five others, and some commute for over an hour from cheaper towns to get to their classes.",
    "Video games now make more money each year than films and music combined. Most of that growth comes from "
    "mobile games, which are often free to download but earn money from small purchases inside the game.",
    "Adults can learn a new language well, even if they rarely lose their accent completely. Regular practice, "
    "real conversations and not being afraid of mistakes matter more than age, according to teachers who work "
    "with adult learners.",
    "Streets lined with trees can be several degrees cooler on hot days than streets without them. The city "
    "plans to plant ten thousand trees over five years, starting in the neighbourhoods with the least shade.",
    "From January, all employees will receive two extra days of annual leave, and unused days can be carried "
    "over to the next year, up to a maximum of five. Please book holidays through the HR portal at least two "
    "weeks in advance.",
    "After forty years in business, the family restaurant on Mill Street will close at the end of the month. "
    "The owners say they are ready to retire and that none of their children want to take over the kitchen.",
    "The local football team finally won a match after eleven defeats in a row. The only goal came in the last "
    "minute, and the coach said the players had never stopped believing, even when the fans had.",
    "A strong storm is expected to reach the coast on Saturday with heavy rain and winds of up to one hundred "
    "kilometres an hour. People are advised to secure garden furniture and avoid travelling unless it is "
    "necessary.",
    "More than two hundred volunteers spent Sunday morning cleaning the riverbanks. They collected over a tonne "
    "of rubbish, including a shopping trolley, three bicycles and a surprising number of single shoes.",
    "A start-up that delivers medicine by drone to remote villages has raised new funding to expand into three "
    "more countries. Its drones can fly about eighty kilometres and drop a small parcel by parachute.",
    "Online chess has exploded in popularity. Millions of new players joined in the last few years, inspired "
    "by streamers and a popular TV series, and many clubs now have waiting lists for their beginner classes.",
    "Putting off tasks is not always a sign of laziness. Psychologists say people often procrastinate to avoid "
    "unpleasant feelings such as boredom or fear of failure, so making a task feel smaller can help people "
    "get started.",
    "Tiny houses, usually smaller than thirty square metres, appeal to people who want lower costs and fewer "
    "belongings. Critics point out that finding land to put them on is difficult and that they are hard to live "
    "in with children.",
    "Composting at home turns fruit peels, coffee grounds and garden waste into rich soil. A good compost pile "
    "needs a mix of green and brown material, some air and a little water, and it is ready in a few months.",
    "People who work night shifts for many years have a higher risk of several health problems, probably "
    "because their sleep and body clocks are disrupted. Experts recommend dark bedrooms, fixed sleep times and "
    "avoiding heavy meals at night.",
    "The rover drilled into a rock at the bottom of an old crater and sealed the powder in a tube. Scientists "
    "hope that when such samples are brought back to Earth, they will show whether tiny life ever existed "
    "there.",
    "Paediatricians suggest that children under two should spend very little time in front of screens, apart "
    "from video calls with family. For older children, they recommend agreeing on clear limits and keeping "
    "screens out of bedrooms at night.",
    "The ferry to the island has been cancelled for the rest of the week because of engine problems. A smaller "
    "boat will carry passengers twice a day, but cars will not be able to cross until the repairs are finished.",
    "The Saturday farmers' market is moving to the larger square next to the station. It will have room for "
    "forty stalls instead of twenty-five, and a new section for local crafts will open in June.",
    "As an experiment, buses and trams will be free for everyone under eighteen for one year. The city hopes "
    "that fewer parents will drive their children to school and that young people will get used to public "
    "transport.",
    "Rising sea levels are making floods more common in low-lying coastal towns. Some are building higher sea "
    "walls, while others are paying homeowners to move further inland, which is often cheaper in the long run.",
    "In a small experiment, people who were asked to do something kind for a stranger felt happier afterwards "
    "than people who were asked to treat themselves. The effect was strongest when they could see how their "
    "kindness helped.",
    "The first bicycles, built in the early nineteenth century, had no pedals; riders pushed themselves along "
    "with their feet. Pedals, chains and air-filled tyres came later and made cycling fast and comfortable "
    "enough to become popular.",
    "Many people use the same password for lots of websites. If one of those sites is hacked, criminals can "
    "try the password everywhere else. A password manager and two-step verification make this much less "
    "dangerous.",
    "Mara found the key under the loose floorboard on her tenth birthday. It was heavy and old, with a tiny "
    "anchor carved into the handle, and it did not fit any door in the house. That night she decided to find "
    "the lock it belonged to.",
    "We are looking for a part-time bookkeeper to join our small team. You will handle invoices, payroll and "
    "monthly reports. Experience with accounting software is required, and you can work from home three days "
    "a week.",
    "I am writing to complain about the potholes on Elm Road. They have been there since winter, two of my "
    "neighbours have damaged their tyres, and cyclists have to swerve into traffic to avoid them. Please repair "
    "them before someone is hurt.",
    "Green tea and black tea come from the same plant. The difference lies in how the leaves are processed: "
    "green tea leaves are heated soon after picking, while black tea leaves are left to oxidise, which darkens "
    "them and changes the flavour.",
    "The gym on the high street is changing its opening hours. From next month it will open at six in the "
    "morning instead of seven on weekdays, but it will close an hour earlier on Sundays because fewer people "
    "train then.",
    "Our book club read a mystery this month. Most of us guessed the culprit halfway through, but everyone "
    "agreed the characters were well written. Next month we are reading a travel memoir, chosen by Ruth.",
]

EMAIL_TASKS: dict[str, list[str]] = {
    "my landlord": [
        "asking them to fix a leaking {fixture}",
        "asking if I can get a cat",
        "giving notice that I'm moving out at the end of {month}",
        "reporting that the heating stopped working",
        "asking for a few extra days to pay rent",
        "asking for permission to paint the {room}",
        "asking when the deposit will be returned",
    ],
    "a colleague": [
        "asking them to cover my shift on {day}",
        "following up on the report they promised",
        "thanking them for their help with the {project}",
        "asking for feedback on my draft",
        "suggesting a meeting on {day} to plan the {project}",
        "handing over my tasks before my holiday",
    ],
    "my manager": [
        "asking for {n} days off in {month}",
        "saying I'll be late tomorrow because of a doctor's appointment",
        "asking for a raise",
        "resigning and giving two weeks' notice",
        "asking to work from home on {day}s",
        "asking for more training in {skill}",
        "explaining why the {project} is delayed",
    ],
    "my son's teacher": [
        "explaining that he was ill and missed {day}'s class",
        "asking how he is doing in {subject}",
        "asking for a meeting about the amount of homework",
        "thanking her for a great year",
    ],
    "my professor": [
        "asking for an extension on my {subject} essay",
        "asking to join their research project",
        "asking for a recommendation letter",
        "asking a question about the {subject} exam",
        "apologising for missing the {day} lecture",
    ],
    "a client": [
        "apologising for a delayed delivery",
        "reminding them about an unpaid invoice",
        "following up on our call on {day}",
        "announcing new prices from {month}",
        "asking for feedback on the {project}",
    ],
    "a hiring manager": [
        "following up on my application for the {job} job",
        "thanking them after my interview",
        "accepting the {job} offer",
        "politely turning down the {job} offer",
        "asking about the status of my application",
    ],
    "customer support": [
        "asking for a refund for a {product} that arrived broken",
        "complaining that my order hasn't arrived after {n} weeks",
        "cancelling my subscription",
        "asking why I was charged twice",
        "asking to change my delivery address",
    ],
    "my neighbour": [
        "asking them to keep the noise down after 11pm",
        "inviting them to a barbecue on {day}",
        "warning them about building work next week",
        "asking if they can water my plants while I'm away",
    ],
    "the HR department": [
        "asking how many holiday days I have left",
        "reporting a problem with my payslip",
        "asking about parental leave",
        "updating my bank details",
    ],
    "my team": [
        "announcing that I'm leaving the company",
        "sharing the agenda for {day}'s meeting",
        "congratulating everyone on finishing the {project}",
        "introducing a new team member called {name}",
    ],
    "a supplier": [
        "asking for a quote for {n} hundred {product}s",
        "complaining about a late shipment",
        "asking to change our order",
    ],
    "my gym": ["asking to freeze my membership for {n} months", "cancelling my membership"],
    "a potential mentor": [
        "asking if they'd have coffee with me to talk about {skill}",
        "asking for advice on getting into {job} work",
    ],
    "my child's school": [
        "saying my daughter will be absent on {day}",
        "asking about the school trip",
        "volunteering to help at the summer fair",
    ],
}
_SLOTS = {
    "fixture": ["tap", "shower", "toilet", "kitchen sink", "radiator", "window"],
    "room": ["bedroom", "living room", "kitchen", "hallway"],
    "project": [
        "website redesign",
        "budget report",
        "client presentation",
        "product launch",
        "office move",
        "quarterly review",
        "training workshop",
        "new app",
    ],
    "skill": ["data analysis", "project management", "public speaking", "Excel", "design", "leadership"],
    "subject": ["history", "biology", "maths", "economics", "philosophy", "chemistry", "statistics", "French"],
    "job": [
        "marketing assistant",
        "junior developer",
        "nurse",
        "sales manager",
        "graphic designer",
        "data analyst",
        "teaching assistant",
        "receptionist",
    ],
    "product": [
        "coffee machine",
        "lamp",
        "pair of headphones",
        "blender",
        "backpack",
        "kettle",
        "desk chair",
        "printer",
    ],
}


def _fill(rng: random.Random, template: str) -> str:
    return template.format(
        fixture=rng.choice(_SLOTS["fixture"]),
        room=rng.choice(_SLOTS["room"]),
        project=rng.choice(_SLOTS["project"]),
        skill=rng.choice(_SLOTS["skill"]),
        subject=rng.choice(_SLOTS["subject"]),
        job=rng.choice(_SLOTS["job"]),
        product=rng.choice(_SLOTS["product"]),
        day=rng.choice(DAYS),
        month=rng.choice(MONTHS),
        n=rng.randint(2, 5),
        name=rng.choice(NAMES),
    )


TONES = [
    "formal",
    "friendly",
    "polite but firm",
    "casual",
    "professional",
    "warm",
    "apologetic",
    "short and direct",
    "cheerful",
    "respectful",
]
LENGTHS = [
    "Keep it short.",
    "Under 100 words.",
    "About 150 words.",
    "3-4 sentences max.",
    "Keep it brief.",
    "No more than 5 sentences.",
    "One short paragraph.",
    "Make it concise.",
]


def _writing_email(rng: random.Random) -> Record:
    who = rng.choice(list(EMAIL_TASKS))
    purpose = _fill(rng, rng.choice(EMAIL_TASKS[who]))
    tone = rng.choice(TONES)
    extras = []
    if rng.random() < 0.45:
        extras.append(rng.choice(LENGTHS))
    if rng.random() < 0.2:
        extras.append(
            rng.choice(
                [
                    "Include a subject line.",
                    "Sign it from " + rng.choice(NAMES) + ".",
                    "Don't make it sound desperate.",
                    "I'm not a native speaker, so keep it simple.",
                    "Make it sound natural, not like a template.",
                ]
            )
        )
    s = rng.randrange(7)
    if s == 0:
        core = f"write an email to {who} {purpose}"
    elif s == 1:
        core = f"draft a {tone} email to {who} {purpose}"
    elif s == 2:
        core = f"write a {tone} message to {who} {purpose}"
    elif s == 3:
        p = f"I need to email {who}. I'm {purpose}. Can you write it for me?"
        return make_record("writing", p + (" " + " ".join(extras) if extras else ""), kind="email")
    elif s == 4:
        core = f"help me write an email to {who} {purpose}"
    elif s == 5:
        core = f"compose a {tone} email to {who} {purpose}"
    else:
        p = f"email to {who}, {purpose}, {tone} tone"
        return make_record("writing", p + (". " + " ".join(extras) if extras else ""), kind="email")
    return make_record("writing", phrase_ask(rng, core, extras), kind="email")


RELATIONS = [
    "mom",
    "dad",
    "sister",
    "brother",
    "best friend",
    "grandma",
    "grandpa",
    "boss",
    "coworker",
    "aunt",
    "uncle",
    "cousin",
    "neighbour",
    "roommate",
    "girlfriend",
    "boyfriend",
    "wife",
    "husband",
    "son",
    "daughter",
    "teacher",
    "old friend from school",
]
MESSAGE_KINDS = [
    "a text to my {rel} cancelling our dinner tonight",
    "a birthday message for my {rel}",
    "a short condolence message for my {rel} who lost their {lost}",
    "a congratulations message for my {rel} who {won}",
    "a get well soon message for my {rel}",
    "an apology text to my {rel} for forgetting {forgot}",
    "a Slack message to my team saying I'm off sick today",
    "a WhatsApp message to the parents' group about the {event}",
    "a message to my {rel} asking to borrow their car on {day}",
    "a reply to my {rel} turning down their invitation politely",
    "a good luck message for my {rel}'s {test}",
    "a message to my {rel} saying I'm proud of them",
    "a LinkedIn message asking a stranger for a quick chat about {skill}",
    "a note to leave for my {rel} on the fridge",
    "a message to a group chat to organise a {event}",
    "a text reminding my {rel} about {forgot}",
]


def _writing_message(rng: random.Random) -> Record:
    kind = rng.choice(MESSAGE_KINDS).format(
        rel=rng.choice(RELATIONS),
        lost=rng.choice(["father", "mother", "dog", "grandmother", "job"]),
        won=rng.choice(
            [
                "got a new job",
                "passed the driving test",
                "got engaged",
                "had a baby",
                "graduated",
                "finished a marathon",
                "bought a house",
                "got into university",
            ]
        ),
        forgot=rng.choice(
            [
                "our anniversary",
                "their birthday",
                "the dentist appointment",
                "lunch on Friday",
                "to call back",
                "the rent",
            ]
        ),
        event=rng.choice(["school trip", "bake sale", "weekend hike", "picnic", "game night", "class reunion"]),
        day=rng.choice(DAYS),
        test=rng.choice(["exam", "job interview", "first day at work", "surgery", "race"]),
        skill=rng.choice(_SLOTS["skill"]),
    )
    extras = []
    if rng.random() < 0.4:
        extras.append(
            rng.choice(
                [
                    "Keep it short.",
                    "Make it funny.",
                    "Make it heartfelt.",
                    "No emojis.",
                    "Add a couple of emojis.",
                    "Two or three sentences.",
                    "Not too cheesy.",
                    f"Make it {rng.choice(TONES)}.",
                ]
            )
        )
    core = rng.choice(["write {k}", "write me {k}", "draft {k}", "come up with {k}", "help me write {k}"]).format(
        k=kind
    )
    return make_record("writing", phrase_ask(rng, core, extras), kind="message")


LETTER_KINDS = [
    "a cover letter for a {job} position",
    "a letter of complaint to my internet provider about {issue}",
    "a letter to my future self to open in {n} years",
    "a reference letter for a former employee who worked as a {job}",
    "a letter to the city council about {issue2}",
    "a letter to my grandmother telling her about my new {news}",
    "a resignation letter",
    "a letter to my landlord asking for repairs to the {fixture}",
    "a formal letter requesting a meeting with the school principal",
    "a thank-you letter to a nurse who cared for my {rel}",
    "a letter to a pen pal in {country} introducing myself",
    "a letter to an author saying how much I loved their book",
    "a motivation letter for a {program} program",
    "a letter to my younger self",
]


def _writing_letter(rng: random.Random) -> Record:
    kind = rng.choice(LETTER_KINDS).format(
        job=rng.choice(_SLOTS["job"]),
        issue=rng.choice(["constant outages", "slow speeds", "a wrong bill"]),
        n=rng.choice([5, 10, 20]),
        issue2=rng.choice(
            [
                "potholes",
                "the lack of bike lanes",
                "noise from a bar",
                "streetlights not working",
                "closing the public pool",
            ]
        ),
        news=rng.choice(["job", "flat", "puppy", "school", "hobby"]),
        fixture=rng.choice(_SLOTS["fixture"]),
        rel=rng.choice(["father", "mother", "son", "grandfather"]),
        country=rng.choice(["Japan", "Brazil", "Norway", "Kenya", "Canada", "Italy"]),
        program=rng.choice(["master's", "exchange", "volunteering", "scholarship", "internship"]),
    )
    extras = [rng.choice(LENGTHS)] if rng.random() < 0.35 else []
    if rng.random() < 0.3:
        extras.append(f"Tone: {rng.choice(TONES)}.")
    return make_record("writing", phrase_ask(rng, f"write {kind}", extras), kind="letter")


EVENTS = [
    "my {age}th birthday party",
    "a baby shower",
    "a housewarming party",
    "a team lunch",
    "our wedding",
    "a book club meeting",
    "a board game night",
    "my graduation party",
    "a retirement party for {name}",
    "a kids' pool party",
    "a neighbourhood clean-up",
    "a charity bake sale",
    "a surprise party for {name}",
    "a Christmas dinner",
    "a summer barbecue",
    "a farewell drinks for {name}",
    "an office open day",
    "a karaoke night",
    "a family reunion",
    "a Halloween costume party",
]
PLACES = [
    "at our place",
    "at the community hall",
    "in the park by the lake",
    "at Luigi's restaurant",
    "on Zoom",
    "in the office kitchen",
    "at the beach",
    "in our garden",
    "at the bowling alley",
    "at the library",
]


def _writing_invitation(rng: random.Random) -> Record:
    ev = rng.choice(EVENTS).format(age=rng.choice([18, 21, 25, 30, 40, 50, 60]), name=rng.choice(NAMES))
    when = (
        f"{rng.choice(DAYS)} at {rng.choice([11, 12, 1, 2, 3, 4, 5, 6, 7, 8])}{rng.choice(['pm', ':30pm', 'pm', ''])}"
    )
    where = rng.choice(PLACES)
    s = rng.randrange(4)
    extras = []
    if rng.random() < 0.4:
        extras.append(
            rng.choice(
                [
                    "Ask people to RSVP by Friday.",
                    "Mention that it's potluck.",
                    "Make it fun.",
                    "Keep it elegant.",
                    "Say kids are welcome.",
                    "Mention the dress code is casual.",
                    "Add a line about parking.",
                ]
            )
        )
    if s == 0:
        core = f"write an invitation for {ev} on {when} {where}"
    elif s == 1:
        core = f"write a short invite message for {ev}"
    elif s == 2:
        style = rng.choice(["fun", "formal", "cute", "simple", "friendly"])
        core = f"create a {style} invitation to {ev}, {when}, {where}"
    else:
        return make_record(
            "writing",
            f"invitation text for {ev} - {when}, {where}" + (". " + " ".join(extras) if extras else ""),
            kind="invitation",
        )
    return make_record("writing", phrase_ask(rng, core, extras), kind="invitation")


THANKS_FOR = [
    "the wedding gift",
    "hosting us for the weekend",
    "writing me a reference",
    "the birthday present",
    "helping me move house",
    "the job interview",
    "being a great teacher to my daughter this year",
    "taking care of my dad in hospital",
    "donating to our charity run",
    "the flowers",
    "covering for me while I was away",
    "the lovely dinner",
    "mentoring me this year",
    "coming to my graduation",
    "looking after our cat",
    "the baby gift",
    "the advice on my CV",
]


def _writing_thanks(rng: random.Random) -> Record:
    what = rng.choice(THANKS_FOR)
    who = rng.choice(RELATIONS + ["neighbours", "colleagues", "host family", "team", "doctor", "interviewer"])
    s = rng.randrange(4)
    extras = [rng.choice(LENGTHS + ["Make it sincere.", "Keep it light."])] if rng.random() < 0.4 else []
    if s == 0:
        core = f"write a thank-you note to my {who} for {what}"
    elif s == 1:
        core = f"write a short thank you card message for {what}"
    elif s == 2:
        core = f"draft a {rng.choice(TONES)} thank-you email to my {who} for {what}"
    else:
        return make_record("writing", f"thank you note for {what}, it's for my {who}", kind="thanks")
    return make_record("writing", phrase_ask(rng, core, extras), kind="thanks")


PRODUCTS = [
    "a bamboo toothbrush",
    "a stainless steel water bottle that keeps drinks cold for 24 hours",
    "noise-cancelling headphones",
    "a handmade ceramic mug",
    "a smart plant pot that tells you when to water",
    "a foldable electric bike",
    "organic lavender soap",
    "a waterproof hiking backpack",
    "a kids' dinosaur lamp",
    "a standing desk",
    "a cast iron skillet",
    "a yoga mat made from recycled rubber",
    "a weekly planner notebook",
    "wireless earbuds",
    "a dog raincoat",
    "a cold brew coffee maker",
    "a scented soy candle",
    "a solar phone charger",
    "a wooden puzzle for toddlers",
    "a leather wallet with RFID protection",
    "a compact air purifier",
    "a reusable beeswax food wrap",
    "a mechanical keyboard",
    "a knitted wool scarf",
    "a travel pillow",
    "homemade strawberry jam",
    "a vintage-style record player",
    "running shoes for beginners",
    "a robot vacuum",
    "a board game for family nights",
    "a digital kitchen scale",
    "a sunrise alarm clock",
    "a herb-growing kit",
]
PLATFORMS = [
    "for an online shop",
    "for Etsy",
    "for an Amazon listing",
    "for our website",
    "for an Instagram post",
    "for a flyer",
    "for a Facebook ad",
    "",
]


def _writing_product(rng: random.Random) -> Record:
    prod = rng.choice(PRODUCTS)
    plat = rng.choice(PLATFORMS)
    extras = []
    if rng.random() < 0.5:
        extras.append(
            rng.choice(
                [
                    "Under 50 words.",
                    "About 100 words.",
                    "In 3 bullet points.",
                    "Make it punchy.",
                    "Target busy parents.",
                    "Target students.",
                    "Mention it's eco-friendly.",
                    "Sound premium but not snobby.",
                    "Include a catchy headline.",
                    "Two sentences.",
                ]
            )
        )
    s = rng.randrange(4)
    if s == 0:
        core = f"write a product description {plat} for {prod}".replace("  ", " ")
    elif s == 1:
        core = f"write a short description of {prod} {plat}".strip()
    elif s == 2:
        core = f"write marketing copy for {prod}"
    else:
        core = f"describe {prod} so people want to buy it"
    return make_record("writing", phrase_ask(rng, core, extras), kind="product")


SUMMARY_CORES = [
    ("summarize this", None),
    ("summarize this in one sentence", None),
    ("give me a TL;DR of this", None),
    ("summarize this paragraph in {n} bullet points", "n"),
    ("shorten this to under {w} words", "w"),
    ("what is the main point of this text", None),
    ("summarize this for a ten-year-old", None),
    ("rewrite this in a more formal tone", None),
    ("rewrite this to sound more casual", None),
    ("write a headline for this", None),
    ("turn this into a tweet", None),
    ("make this more concise", None),
    ("give this paragraph a title", None),
    ("list the key facts in this text", None),
    ("paraphrase this paragraph", None),
    ("explain this paragraph in simpler words", None),
    ("write two questions a teacher could ask about this text", None),
    ("what's the tone of this paragraph", None),
]


def _writing_summary(rng: random.Random) -> Record:
    para = rng.choice(PARAGRAPHS)
    core, slot = rng.choice(SUMMARY_CORES)
    if slot == "n":
        core = core.format(n=rng.choice([2, 3]))
    elif slot == "w":
        core = core.format(w=rng.choice([20, 25, 30, 40]))
    if rng.random() < 0.2:
        instr = rng.choice(
            ["TL;DR?", "Summary please:", "Can you sum this up?", "tldr", "Summarize:", "Short version of this?"]
        )
    else:
        instr = phrase_ask(rng, core, noisy=False)
    if rng.random() < 0.25:
        para = in_quotes(rng, para, bare=True)
    return make_record("writing", attach_text(rng, instr, para), kind="summary")


OUTLINE_TOPICS = [
    "the benefits of learning a second language",
    "why cities should have more green spaces",
    "the history of the internet",
    "how social media affects teenagers",
    "remote work",
    "electric cars",
    "the importance of sleep",
    "plastic pollution",
    "space exploration",
    "fast fashion",
    "video games and learning",
    "the four-day work week",
    "homeschooling",
    "renewable energy",
    "artificial intelligence in schools",
    "the role of museums today",
    "volunteering",
    "mental health at work",
    "the future of libraries",
    "online privacy",
    "urban gardening",
    "tourism and local communities",
    "the benefits of reading fiction",
    "whether homework should be banned",
    "saving money as a student",
    "the life of Marie Curie",
    "the causes of the First World War",
    "healthy eating on a budget",
    "the pros and cons of nuclear power",
    "my favourite city",
    "climate change and farming",
    "why pets are good for us",
]
OUTLINE_KINDS = [
    "an essay",
    "a five-paragraph essay",
    "a presentation",
    "a blog post",
    "a 5-minute speech",
    "a YouTube video",
    "a podcast episode",
    "a school report",
    "a debate argument",
    "a workshop",
    "a research paper",
    "a newsletter article",
]


def _writing_outline(rng: random.Random) -> Record:
    topic = rng.choice(OUTLINE_TOPICS)
    kind = rng.choice(OUTLINE_KINDS)
    extras = []
    if rng.random() < 0.4:
        extras.append(
            rng.choice(
                [
                    "Audience: "
                    + rng.choice(["high school students", "my coworkers", "parents", "beginners", "a general audience"])
                    + ".",
                    "Use headings and bullet points.",
                    "Keep it to 5 main points.",
                    "Include a hook for the introduction.",
                    "Add a suggested title.",
                ]
            )
        )
    s = rng.randrange(3)
    if s == 0:
        core = f"make an outline for {kind} on {topic}"
    elif s == 1:
        core = f"give me an outline for {kind} about {topic}"
    else:
        core = f"plan the structure of {kind} about {topic}"
    return make_record("writing", phrase_ask(rng, core, extras), kind="outline")


BUSINESSES = [
    "a bakery that only uses organic flour",
    "a dog walking service",
    "a bike repair shop",
    "an app that reminds you to drink water",
    "a vegan food truck",
    "a small bookshop with a café",
    "a cleaning company",
    "a kids' coding school",
    "a second-hand clothing store",
    "a local gym for older adults",
    "a plant nursery",
    "a language exchange meetup",
    "a mobile car wash",
    "a tea shop",
    "a wedding photographer",
    "a recycling campaign",
    "a charity run for the hospital",
    "a neighbourhood library box",
    "an online tutoring service",
    "a pizza place that delivers late at night",
    "a furniture repair workshop",
    "a school science fair",
    "an ice cream parlour",
    "a meal prep service",
    "a budgeting app for students",
    "a hiking club",
    "a pet hotel",
    "a handmade jewellery brand",
]


def _writing_slogan(rng: random.Random) -> Record:
    biz = rng.choice(BUSINESSES)
    k = rng.choice([3, 5, 5, 8, 10])
    style = rng.choice(["catchy", "funny", "short", "elegant", "clever", "memorable", "punny", "simple"])
    s = rng.randrange(4)
    if s == 0:
        core = f"come up with {some_count(rng, k)} {style} slogans for {biz}"
    elif s == 1:
        core = f"write a slogan for {biz}"
    elif s == 2:
        core = f"suggest {some_count(rng, k)} taglines for {biz}"
    else:
        return make_record("writing", f"need a {style} slogan for {biz}, any ideas?", kind="slogan")
    return make_record("writing", phrase_ask(rng, core), kind="slogan")


PROFESSIONS = [
    "software engineer",
    "primary school teacher",
    "nurse",
    "freelance photographer",
    "chef",
    "accountant",
    "graphic designer",
    "physiotherapist",
    "student of biology",
    "marketing manager",
    "architect",
    "yoga instructor",
    "data scientist",
    "carpenter",
    "musician",
    "retired engineer",
    "small business owner",
    "journalist",
    "veterinarian",
    "UX researcher",
]
HOBBIES = [
    "hiking",
    "baking",
    "chess",
    "running marathons",
    "painting",
    "gardening",
    "playing the guitar",
    "travelling",
    "reading crime novels",
    "rock climbing",
    "cooking",
    "photography",
    "board games",
    "surfing",
]
BIO_PLACES = [
    "my LinkedIn profile",
    "a conference speaker page",
    "my Instagram",
    "our company website",
    "a dating app",
    "my personal website",
    "a podcast guest introduction",
    "the school newsletter",
    "my Twitter profile",
    "a freelance profile",
]


def _writing_bio(rng: random.Random) -> Record:
    prof = rng.choice(PROFESSIONS)
    years = rng.randint(1, 25)
    h1, h2 = rng.sample(HOBBIES, 2)
    place = rng.choice(BIO_PLACES)
    person = rng.choice(["", " in the first person", " in the third person"])
    extras = (
        [
            rng.choice(
                [
                    "Keep it under 50 words.",
                    "Two sentences.",
                    "Make it sound friendly.",
                    "Professional but not boring.",
                    "Add a bit of humour.",
                ]
            )
        ]
        if rng.random() < 0.5
        else []
    )
    s = rng.randrange(3)
    if s == 0:
        core = (
            f"write a short bio for {place}{person}. I'm a {prof} with {years} years of experience "
            f"and I love {h1} and {h2}"
        )
    elif s == 1:
        name = rng.choice(NAMES)
        core = f"write a bio{person} for {name}, a {prof} who enjoys {h1}, for {place.replace('my ', 'their ')}"
    else:
        return make_record(
            "writing",
            f"bio for {place}: {prof}, {years} yrs experience, into {h1} and {h2}"
            + (". " + extras[0] if extras else ""),
            kind="bio",
        )
    return make_record("writing", phrase_ask(rng, core, extras, noisy=False), kind="bio")


CREATIVE_SUBJECTS = [
    "the first snow of winter",
    "a cat who hates Mondays",
    "the ocean at night",
    "my grandmother's kitchen",
    "a robot learning to paint",
    "coffee",
    "autumn leaves",
    "a lost umbrella",
    "moving to a new city",
    "friendship",
    "a rainy Sunday",
    "the moon",
    "a lighthouse",
    "a dragon who is afraid of fire",
    "the last day of school",
    "a busy train station",
    "a tiny mouse in a big library",
    "homesickness",
    "a garden in spring",
    "running late",
    "a penguin who wants to fly",
    "an old bicycle",
]


def _writing_creative(rng: random.Random) -> Record:
    subj = rng.choice(CREATIVE_SUBJECTS)
    kind = rng.choice(
        [
            "a short poem",
            "a haiku",
            "a limerick",
            "a four-line poem",
            "a bedtime story",
            "a very short story",
            "a story opening",
            "a rhyming poem for kids",
            "a sonnet",
            "a 100-word story",
            "song lyrics",
            "a diary entry",
        ]
    )
    extras = (
        [
            rng.choice(
                [
                    "Make it rhyme.",
                    "Make it sad.",
                    "Keep it funny.",
                    "For a 6-year-old.",
                    "End with a twist.",
                    "Use simple words.",
                ]
            )
        ]
        if rng.random() < 0.35
        else []
    )
    return make_record("writing", phrase_ask(rng, f"write {kind} about {subj}", extras), kind="creative")


CASUAL_TEXTS = [
    "hey can u send me the file asap, need it for the meeting",
    "sorry cant make it tmrw, something came up",
    "the report is late because john didnt send his part",
    "we need more money for the project or its not gonna happen",
    "pls stop parking in my spot",
    "i think your idea is bad and wont work",
    "the wifi in the office is terrible, fix it",
    "thx for the help yesterday, u saved me",
    "can we move the call to later, im stuck in traffic",
    "your invoice is wrong, you charged us twice",
    "I don't want to do this task, give it to someone else",
    "the food was cold and the waiter was rude",
    "send me the numbers by friday or we miss the deadline",
    "im quitting, this job is not for me",
    "I forgot about the meeting, my bad",
    "the new design looks kinda boring tbh",
    "we're out of coffee again, who's buying",
    "can u explain this again, i didn't get it",
    "Your package is delayed. We don't know when it will arrive.",
    "We regret to inform you that your application was unsuccessful.",
    "meeting moved to 3, dont be late",
    "I need the day off on Friday, family stuff",
    "the printer is broken AGAIN",
    "please keep the kitchen clean, its disgusting",
]


def _writing_rewrite(rng: random.Random) -> Record:
    text = rng.choice(CASUAL_TEXTS)
    core = rng.choice(
        [
            "make this sound more professional",
            "rewrite this politely",
            "make this message friendlier",
            "rewrite this for an email to my boss",
            "fix the grammar and spelling",
            "make this sound less rude",
            "rewrite this so it's clear and kind",
            "turn this into a formal message",
            "make this more diplomatic",
            "soften this message",
        ]
    )
    return make_record(
        "writing", attach_text(rng, phrase_ask(rng, core, noisy=False), in_quotes(rng, text, bare=True)), kind="rewrite"
    )


_WRITING_KINDS: list[tuple[Callable[[random.Random], Record], int]] = [
    (_writing_email, 16),
    (_writing_message, 10),
    (_writing_letter, 6),
    (_writing_invitation, 6),
    (_writing_thanks, 5),
    (_writing_product, 7),
    (_writing_summary, 16),
    (_writing_outline, 6),
    (_writing_slogan, 5),
    (_writing_bio, 6),
    (_writing_creative, 6),
    (_writing_rewrite, 6),
]


def gen_writing(rng: random.Random) -> Record:
    return pick_weighted(rng, _WRITING_KINDS)(rng)
