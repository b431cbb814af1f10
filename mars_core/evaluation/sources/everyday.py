"""Everyday requests: recipes, lists, plans, schedules, tips, gifts, names, how-to steps, comparisons,
recommendations and quick questions.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from .phrasing import MONTHS, Record, cap_first, make_record, phrase_ask, pick_weighted, some_count

DISHES = [
    "lasagna",
    "chicken curry",
    "banana bread",
    "pancakes",
    "vegetable soup",
    "guacamole",
    "spaghetti carbonara",
    "chocolate chip cookies",
    "a Greek salad",
    "beef stew",
    "fried rice",
    "hummus",
    "shakshuka",
    "a quiche",
    "lentil dahl",
    "tacos",
    "mushroom risotto",
    "apple pie",
    "a smoothie bowl",
    "pad thai",
    "chili con carne",
    "overnight oats",
    "a tomato sauce from scratch",
    "roast chicken",
    "brownies",
    "falafel",
    "a frittata",
    "carrot cake",
    "minestrone",
    "a stir fry",
    "French toast",
    "potato salad",
    "a simple pizza dough",
    "butter chicken",
    "lemon drizzle cake",
    "gazpacho",
    "mac and cheese",
    "fish tacos",
    "a veggie burger",
    "miso soup",
    "scones",
    "a chickpea curry",
    "homemade granola",
    "a tuna pasta bake",
    "crepes",
]
RECIPE_CONSTRAINTS = [
    "vegetarian",
    "vegan",
    "gluten-free",
    "quick (under 30 minutes)",
    "cheap",
    "kid-friendly",
    "low-sugar",
    "high-protein",
    "dairy-free",
    "one-pan",
    "no-oven",
    "beginner-friendly",
]
INGREDIENTS = [
    "eggs",
    "rice",
    "spinach",
    "chickpeas",
    "tomatoes",
    "onions",
    "cheese",
    "pasta",
    "chicken thighs",
    "potatoes",
    "carrots",
    "tofu",
    "bread",
    "lentils",
    "mushrooms",
    "bananas",
    "oats",
    "yogurt",
    "tuna",
    "frozen peas",
    "bell peppers",
    "coconut milk",
    "garlic",
    "sweet potatoes",
    "courgettes",
    "beans",
    "leftover rice",
    "apples",
    "minced beef",
    "feta",
    "broccoli",
    "noodles",
    "cabbage",
    "avocado",
]


def _everyday_recipe(rng: random.Random) -> Record:
    s = rng.randrange(7)
    dish = rng.choice(DISHES)
    cons = rng.choice(RECIPE_CONSTRAINTS)
    serv = rng.choice([1, 2, 4, 6, 8, 12])
    if s == 0:
        core = f"give me a recipe for {dish}"
        extras = [f"It needs to serve {serv}."] if rng.random() < 0.4 else []
        return make_record("everyday", phrase_ask(rng, core, extras), kind="recipe")
    if s == 1:
        return make_record("everyday", phrase_ask(rng, f"give me a {cons} recipe for {dish}"), kind="recipe")
    if s == 2:
        ing = rng.sample(INGREDIENTS, rng.randint(2, 4))
        p = rng.choice(
            [
                f"What can I cook with {', '.join(ing[:-1])} and {ing[-1]}?",
                f"I only have {', '.join(ing)} in the fridge. Any dinner ideas?",
                f"dinner idea using {', '.join(ing)}?",
                f"Suggest a {cons} meal I can make with {', '.join(ing[:-1])} and {ing[-1]}.",
            ]
        )
        return make_record("everyday", p, kind="recipe")
    if s == 3:
        return make_record(
            "everyday",
            rng.choice(
                [
                    f"how do I make {dish}?",
                    f"How do you make {dish} for {serv} people?",
                    f"easy {dish} recipe pls",
                    f"What's the secret to good {dish}?",
                ]
            ),
            kind="recipe",
        )
    if s == 4:
        meal = rng.choice(["breakfast", "lunch", "dinner", "snack", "dessert", "lunchbox"])
        return make_record(
            "everyday",
            phrase_ask(rng, f"suggest {some_count(rng, rng.choice([3, 5, 7]))} {cons} {meal} ideas"),
            kind="recipe",
        )
    if s == 5:
        return make_record(
            "everyday",
            phrase_ask(rng, f"scale this recipe for {dish} to serve {serv} people and list the ingredients"),
            kind="recipe",
        )
    swap = rng.choice(["eggs", "butter", "milk", "sugar", "flour", "cream", "buttermilk", "baking powder"])
    return make_record("everyday", f"What can I use instead of {swap} in {dish}?", kind="recipe")


TRIPS = [
    "a weekend camping trip",
    "a beach holiday in {place}",
    "a business trip to {city}",
    "a ski trip",
    "a three-day hike",
    "a {n}-day trip to {city} in {month}",
    "a music festival",
    "a hospital stay",
    "a road trip with two kids",
    "a week in {place} in winter",
    "a long-haul flight",
    "a cruise",
    "a school trip for a 10-year-old",
    "a wedding abroad",
    "a backpacking trip through {place}",
    "a weekend at my in-laws'",
    "a city break in {city}",
    "a fishing trip",
    "a first trip with a baby",
]
TRIP_PLACES = [
    "Portugal",
    "Thailand",
    "Iceland",
    "Greece",
    "Mexico",
    "Scotland",
    "Japan",
    "Morocco",
    "Norway",
    "Costa Rica",
    "Croatia",
    "Vietnam",
    "Canada",
    "Peru",
    "New Zealand",
    "Italy",
]
TRIP_CITIES = [
    "Lisbon",
    "Tokyo",
    "New York",
    "Barcelona",
    "Prague",
    "Amsterdam",
    "Istanbul",
    "Vienna",
    "Seoul",
    "Mexico City",
    "Copenhagen",
    "Dublin",
    "Marrakech",
    "Budapest",
    "Edinburgh",
    "Kyoto",
    "Rome",
    "Berlin",
]


def _trip(rng: random.Random) -> str:
    return rng.choice(TRIPS).format(
        place=rng.choice(TRIP_PLACES), city=rng.choice(TRIP_CITIES), n=rng.randint(2, 10), month=rng.choice(MONTHS)
    )


def _everyday_lists(rng: random.Random) -> Record:
    s = rng.randrange(6)
    fmt = rng.choice(
        [
            "",
            "",
            "Use checkboxes.",
            "Group it by category.",
            "Keep it short.",
            "As a bulleted list.",
            "Numbered please.",
            "Only the essentials.",
        ]
    )
    extras = [fmt] if fmt else []
    if s in (0, 1):
        return make_record("everyday", phrase_ask(rng, f"make a packing list for {_trip(rng)}", extras), kind="packing")
    if s == 2:
        ppl = rng.randint(1, 6)
        budget = rng.choice([30, 50, 75, 100, 150])
        diet = rng.choice(["", "vegetarian ", "healthy ", "cheap ", "high-protein ", "vegan "])
        core = f"write a grocery list for a week of {diet}meals for {ppl} {'person' if ppl == 1 else 'people'}"
        if rng.random() < 0.5:
            core += f" on a ${budget} budget"
        return make_record("everyday", phrase_ask(rng, core, extras), kind="shopping")
    if s == 3:
        party = rng.choice(
            [
                "a kids' birthday party",
                "a barbecue for 15 people",
                "a movie night",
                "Thanksgiving dinner",
                "a picnic",
                "moving into my first apartment",
                "a new puppy",
                "a newborn baby",
                "starting university",
                "a home office setup",
                "a first aid kit",
                "winter car emergencies",
            ]
        )
        return make_record(
            "everyday", phrase_ask(rng, f"what do I need to buy for {party}? make a list", extras), kind="shopping"
        )
    if s == 4:
        things = rng.choice(
            [
                "a home emergency kit",
                "a diaper bag",
                "a gym bag",
                "a carry-on bag",
                "a beach bag",
                "a hiking day pack",
                "a school backpack",
                "a go-bag for emergencies",
            ]
        )
        return make_record("everyday", f"what should I keep in {things}?", kind="packing")
    chores = rng.choice(
        [
            "moving house",
            "hosting a dinner party",
            "a big spring clean",
            "preparing for a new baby",
            "getting ready for a job interview",
            "planning a wedding",
            "starting a vegetable garden",
            "selling my car",
            "going back to school",
        ]
    )
    return make_record("everyday", phrase_ask(rng, f"make a checklist for {chores}", extras), kind="checklist")


SUBJECTS_STUDY = [
    "a calculus exam",
    "the SAT",
    "my driving theory test",
    "a biology final",
    "a history exam",
    "the IELTS",
    "a job interview for a data role",
    "a chemistry test",
    "the bar exam",
    "a Spanish oral exam",
    "a statistics midterm",
    "a piano grade exam",
    "an AWS certification",
]
FITNESS_GOALS = [
    "lose weight",
    "build muscle",
    "run a 5k",
    "get stronger",
    "improve flexibility",
    "run a half marathon",
    "get back in shape after an injury",
    "do my first pull-up",
    "improve my posture",
    "have more energy",
]
SKILLS = [
    "Python",
    "guitar",
    "drawing",
    "Spanish",
    "touch typing",
    "photography",
    "cooking",
    "public speaking",
    "Excel",
    "chess",
    "swimming",
    "sewing",
    "video editing",
    "piano",
    "Japanese",
    "woodworking",
]


def _everyday_plan(rng: random.Random) -> Record:
    s = rng.randrange(8)
    w = rng.randint(1, 8)
    extras = (
        [
            rng.choice(
                [
                    "Put it in a table.",
                    "Keep it realistic.",
                    "I work full time.",
                    "I'm a complete beginner.",
                    "I have about an hour a day.",
                    "Make it day by day.",
                    "Nothing too intense.",
                ]
            )
        ]
        if rng.random() < 0.45
        else []
    )
    if s == 0:
        core = f"make a study plan for {rng.choice(SUBJECTS_STUDY)} in {w} week{'s' if w > 1 else ''}"
    elif s == 1:
        d = rng.randint(2, 6)
        eq = rng.choice(["at home with no equipment", "at the gym", "with just dumbbells", "outdoors", ""])
        core = f"create a workout plan to {rng.choice(FITNESS_GOALS)}, {d} days a week {eq}".strip()
    elif s == 2:
        n = rng.randint(1, 7)
        core = f"plan a {n}-day itinerary for {rng.choice(TRIP_CITIES)}"
        if rng.random() < 0.5:
            extras.append(
                rng.choice(
                    [
                        "We love food and museums.",
                        "Travelling with kids.",
                        "On a tight budget.",
                        "I don't like crowds.",
                        "First time there.",
                    ]
                )
            )
    elif s == 3:
        goal = rng.choice(
            ["eat healthier", "lose weight", "save money", "gain muscle", "eat more vegetables", "cut down on sugar"]
        )
        core = f"make a {rng.choice(['5-day', 'weekly', '3-day', '7-day'])} meal plan to help me {goal}"
    elif s == 4:
        amt = rng.choice([500, 1000, 2000, 3000, 5000, 10000])
        m = rng.randint(3, 24)
        core = f"help me plan how to save ${amt} in {m} months"
    elif s == 5:
        m = rng.randint(1, 12)
        core = f"make a plan to learn {rng.choice(SKILLS)} in {m} month{'s' if m > 1 else ''}"
    elif s == 6:
        core = rng.choice(
            [
                "make a cleaning schedule for a two-bedroom flat",
                f"plan a weekly chore schedule for a family of {rng.randint(3, 6)}",
                "create a morning routine that helps me feel less rushed",
                "create an evening routine to help me sleep better",
                f"plan a reading schedule to finish {rng.randint(6, 30)} books this year",
                "make a weekly schedule for a student with a part-time job",
            ]
        )
    else:
        tasks = rng.sample(
            [
                "go to the gym",
                "buy groceries",
                "finish a work report",
                "call my mom",
                "pick up the kids at 3:30",
                "do laundry",
                "study for 2 hours",
                "walk the dog",
                "cook dinner",
                "answer emails",
                "dentist at 11",
                "meet a friend for coffee",
                "pay bills",
                "clean the bathroom",
            ],
            rng.randint(3, 6),
        )
        return make_record(
            "everyday",
            f"Can you make me a schedule for tomorrow? I need to: {', '.join(tasks)}."
            + rng.choice(["", " I wake up at 7.", " I start work at 9.", " I'd like some free time in the evening."]),
            kind="schedule",
        )
    return make_record("everyday", phrase_ask(rng, core, extras), kind="plan")


TIP_TOPICS = [
    "sleeping better",
    "saving money on groceries",
    "staying focused when working from home",
    "a first job interview",
    "keeping houseplants alive",
    "learning to cook",
    "running my first 5k",
    "public speaking",
    "making friends in a new city",
    "reducing screen time",
    "sticking to a budget",
    "dealing with jet lag",
    "getting up early",
    "keeping my kitchen organised",
    "writing a good CV",
    "studying for exams",
    "staying motivated at the gym",
    "travelling on a budget",
    "negotiating a salary",
    "potty training a toddler",
    "training a puppy",
    "staying warm in winter without big heating bills",
    "taking better photos with my phone",
    "remembering names",
    "being more productive in the morning",
    "reducing food waste",
    "keeping a long-distance friendship going",
    "first-time home buyers",
    "starting a small garden on a balcony",
    "drinking more water",
    "dealing with stress at work",
    "a long flight",
    "learning a language on my own",
    "cleaning a small apartment quickly",
    "hosting a dinner party",
    "moving to a new country",
    "driving in snow",
    "packing light",
    "starting a podcast",
    "talking to teenagers",
    "working night shifts",
    "avoiding burnout",
]


def _everyday_tips(rng: random.Random) -> Record:
    topic = rng.choice(TIP_TOPICS)
    k = rng.choice([3, 5, 5, 7, 10])
    s = rng.randrange(5)
    if s == 0:
        core = f"give me {some_count(rng, k)} tips for {topic}"
    elif s == 1:
        return make_record(
            "everyday",
            rng.choice(
                [
                    f"any tips for {topic}?",
                    f"Do you have advice for {topic}?",
                    f"what are your best tips for {topic}",
                    f"{topic} - tips?",
                ]
            ),
            kind="tips",
        )
    elif s == 2:
        core = f"list {some_count(rng, k)} practical tips for {topic}"
    elif s == 3:
        core = f"share some advice on {topic}"
    else:
        core = f"give me the most important tip for {topic} and explain why"
    extras = (
        [
            rng.choice(
                ["Keep each tip to one line.", "In bullet points.", "Short answers please.", "Nothing obvious please."]
            )
        ]
        if rng.random() < 0.35
        else []
    )
    return make_record("everyday", phrase_ask(rng, core, extras), kind="tips")


GIFT_FOR = [
    "my dad",
    "my mom",
    "a 5-year-old boy",
    "a teenage girl",
    "my boss",
    "a coworker leaving the company",
    "my grandmother",
    "my boyfriend",
    "my wife",
    "a friend who loves cooking",
    "a new homeowner",
    "someone who has everything",
    "a teacher",
    "a gamer",
    "a runner",
    "a coffee lover",
    "a gardener",
    "my sister who just had a baby",
    "a book lover",
    "a 10-year-old who likes science",
    "my in-laws",
]
OCCASIONS = [
    "birthday",
    "Christmas",
    "anniversary",
    "retirement",
    "graduation",
    "housewarming",
    "Mother's Day",
    "Father's Day",
    "Secret Santa",
    "thank-you",
    "wedding",
    "Valentine's Day",
]


def _everyday_gifts(rng: random.Random) -> Record:
    who = rng.choice(GIFT_FOR)
    occ = rng.choice(OCCASIONS)
    budget = rng.choice([10, 20, 25, 30, 50, 75, 100, 200])
    s = rng.randrange(4)
    if s == 0:
        core = f"suggest {some_count(rng, rng.choice([3, 5, 10]))} {occ} gift ideas for {who} under ${budget}"
    elif s == 1:
        return make_record("everyday", f"What should I get {who} for {occ}? Budget is about ${budget}.", kind="gifts")
    elif s == 2:
        return make_record("everyday", f"gift ideas for {who}?? {occ} is next week and i have no idea", kind="gifts")
    else:
        core = f"give me some DIY {occ} gift ideas for {who}"
    return make_record("everyday", phrase_ask(rng, core), kind="gifts")


PETS = [
    "dog",
    "puppy",
    "cat",
    "kitten",
    "rabbit",
    "hamster",
    "goldfish",
    "parrot",
    "tortoise",
    "guinea pig",
    "chicken",
    "horse",
    "lizard",
    "ferret",
]
PET_LOOKS = [
    "black",
    "white",
    "ginger",
    "fluffy",
    "tiny",
    "very lazy",
    "grey",
    "spotted",
    "clumsy",
    "shy",
    "noisy",
    "huge",
    "three-legged",
    "old",
    "very fast",
]
NAME_THINGS = [
    "my {look} {pet}",
    "a bakery",
    "a podcast about {topic}",
    "a fantasy football team",
    "a book club",
    "a cleaning business",
    "my new sailboat",
    "our wifi network",
    "a dungeons and dragons character",
    "a YouTube channel about {topic}",
    "a startup that does {topic}",
    "my band",
    "a pub quiz team",
    "a hiking group",
    "my plant",
    "a coffee blend",
    "a mobile game about {topic}",
    "my car",
    "a school robotics team",
    "our family group chat",
    "an Etsy shop selling {craft}",
    "a newsletter about {topic}",
]
NAME_TOPICS = [
    "personal finance",
    "gardening",
    "true crime",
    "space",
    "cooking",
    "history",
    "cycling",
    "AI",
    "travel",
    "parenting",
    "board games",
    "birds",
    "home repair",
    "meal delivery",
    "recycling",
    "language learning",
]


def _everyday_names(rng: random.Random) -> Record:
    thing = rng.choice(NAME_THINGS).format(
        look=rng.choice(PET_LOOKS),
        pet=rng.choice(PETS),
        topic=rng.choice(NAME_TOPICS),
        craft=rng.choice(["candles", "earrings", "stickers", "knitted hats", "pottery"]),
    )
    k = rng.choice([5, 10, 10, 15, 20])
    style = rng.choice(["", "funny ", "cute ", "clever ", "short ", "unusual ", "classic ", "punny "])
    s = rng.randrange(4)
    if s == 0:
        core = f"suggest {some_count(rng, k)} {style}names for {thing}"
    elif s == 1:
        return make_record("everyday", f"I need a {style}name for {thing}. Ideas?", kind="names")
    elif s == 2:
        core = f"brainstorm {style}names for {thing}"
    else:
        return make_record("everyday", f"{style}name ideas for {thing}".strip(), kind="names")
    return make_record("everyday", phrase_ask(rng, core), kind="names")


HOWTO = [
    "unclog a drain",
    "change a flat tyre",
    "get a red wine stain out of a carpet",
    "iron a shirt",
    "boil an egg with a runny yolk",
    "set up a new wifi router",
    "tie a tie",
    "jump-start a car",
    "make cold brew coffee",
    "clean a cast iron pan",
    "descale a kettle",
    "write a cheque",
    "reset my router",
    "remove a splinter",
    "hang a picture straight",
    "fold a fitted sheet",
    "sharpen a kitchen knife",
    "bleed a radiator",
    "clean a washing machine",
    "back up my phone",
    "plant tomatoes",
    "repot a plant",
    "fix a squeaky door",
    "take a screenshot on Windows",
    "make a budget spreadsheet",
    "start running",
    "meditate",
    "wash a wool jumper",
    "get rid of fruit flies",
    "keep bread fresh longer",
    "make a paper airplane",
    "clean my laptop keyboard",
    "cut a mango",
    "wrap a present neatly",
    "freeze fresh herbs",
    "apply for a passport",
    "file my taxes for the first time",
    "unfreeze a frozen pipe",
    "patch a hole in drywall",
    "make my phone battery last longer",
    "cook rice without a rice cooker",
    "get my toddler to sleep",
]


def _everyday_howto(rng: random.Random) -> Record:
    task = rng.choice(HOWTO)
    s = rng.randrange(6)
    if s == 0:
        return make_record("everyday", f"How do I {task}?", kind="howto")
    if s == 1:
        return make_record("everyday", f"how to {task}", kind="howto")
    if s == 2:
        k = rng.randint(3, 8)
        core = f"explain how to {task} in {some_count(rng, k)} steps"
    elif s == 3:
        core = f"give me step-by-step instructions to {task}"
    elif s == 4:
        return make_record(
            "everyday",
            rng.choice(
                [
                    f"What's the easiest way to {task}?",
                    f"I've never done this before - how do I {task}?",
                    f"quickest way to {task}??",
                    f"Best way to {task}?",
                ]
            ),
            kind="howto",
        )
    else:
        core = f"walk me through how to {task}"
    return make_record("everyday", phrase_ask(rng, core), kind="howto")


COMPARE = [
    ("renting", "buying a home"),
    ("an iPhone", "an Android phone"),
    ("an electric car", "a petrol car"),
    ("Python", "JavaScript for a beginner"),
    ("running", "cycling"),
    ("tea", "coffee"),
    ("a Kindle", "paper books"),
    ("a gym membership", "working out at home"),
    ("a gas stove", "an induction hob"),
    ("a laptop", "a tablet for university"),
    ("Netflix", "Disney+"),
    ("a cat", "a dog"),
    ("a credit card", "a debit card"),
    ("flying", "taking the train"),
    ("a Roth IRA", "a traditional IRA"),
    ("freelancing", "a full-time job"),
    ("public school", "private school"),
    ("yoga", "pilates"),
    ("a standing desk", "a normal desk"),
    ("leasing a car", "buying one"),
    ("Spotify", "Apple Music"),
    ("a mirrorless camera", "a phone camera"),
    ("living in the city", "living in the suburbs"),
    ("an air fryer", "an oven"),
    ("Airbnb", "a hotel"),
    ("LED bulbs", "old light bulbs"),
    ("Mac", "Windows for video editing"),
    ("a Master's degree", "getting work experience"),
]


def _everyday_compare(rng: random.Random) -> Record:
    a, b = rng.choice(COMPARE)
    if rng.random() < 0.5:
        a, b = b, a
    s = rng.randrange(6)
    if s == 0:
        return make_record("everyday", f"{cap_first(a)} or {b}?", kind="compare")
    if s == 1:
        return make_record("everyday", f"What are the pros and cons of {a} vs {b}?", kind="compare")
    if s == 2:
        core = f"compare {a} and {b} in a table"
    elif s == 3:
        who = rng.choice(["a student", "a family of four", "someone on a budget", "a retired couple", "me"])
        return make_record("everyday", f"Which is better for {who}: {a} or {b}?", kind="compare")
    elif s == 4:
        core = f"help me decide between {a} and {b}"
    else:
        core = f"list the main differences between {a} and {b}"
    return make_record("everyday", phrase_ask(rng, core), kind="compare")


MEDIA = [
    "books",
    "movies",
    "podcasts",
    "board games",
    "TV series",
    "albums",
    "video games",
    "documentaries",
    "novels",
    "audiobooks",
    "YouTube channels",
    "card games",
]
LIKES = [
    "Harry Potter",
    "true crime",
    "science fiction",
    "cosy mysteries",
    "history",
    "Studio Ghibli films",
    "stand-up comedy",
    "Agatha Christie",
    "The Office",
    "jazz",
    "fantasy with dragons",
    "space",
    "cooking shows",
    "psychological thrillers",
    "nature documentaries",
    "strategy games",
    "romantic comedies",
    "philosophy",
    "Stephen King",
    "80s music",
    "learning about economics",
    "puzzles",
    "horror",
    "self-improvement",
]


def _everyday_recommend(rng: random.Random) -> Record:
    s = rng.randrange(6)
    k = rng.choice([3, 5, 5, 10])
    media = rng.choice(MEDIA)
    like = rng.choice(LIKES)
    if s == 0:
        core = f"recommend {some_count(rng, k)} {media} for someone who likes {like}"
    elif s == 1:
        return make_record("everyday", f"I loved {like}. What {media} should I try next?", kind="recommend")
    elif s == 2:
        who = rng.choice(
            [
                "a 7-year-old",
                "my teenage son",
                "my dad who is 70",
                "a long flight",
                "a rainy weekend",
                "a road trip",
                "date night",
                "a beginner",
            ]
        )
        core = f"suggest some {media} for {who}"
    elif s == 3:
        city = rng.choice(TRIP_CITIES)
        return make_record(
            "everyday",
            rng.choice(
                [
                    f"What should I do this weekend in {city}?",
                    f"things to do in {city} with kids?",
                    f"what are some free things to do in {city}",
                    f"Best neighbourhood to stay in {city} for a first visit?",
                ]
            ),
            kind="recommend",
        )
    elif s == 4:
        trait = rng.choice(
            [
                "is always stressed",
                "likes being outdoors",
                "has little free time",
                "wants to meet people",
                "is on a tight budget",
                "likes working with their hands",
                "is very introverted",
                "just retired",
                "sits at a desk all day",
            ]
        )
        return make_record("everyday", f"Suggest a new hobby for someone who {trait}.", kind="recommend")
    else:
        room = rng.choice(
            [
                "a dark bathroom",
                "a sunny windowsill",
                "my office desk",
                "a bedroom with little light",
                "a small balcony",
                "a kitchen",
            ]
        )
        return make_record("everyday", f"What plant should I get for {room}?", kind="recommend")
    return make_record("everyday", phrase_ask(rng, core), kind="recommend")


QUICK_QUESTIONS = [
    "How long should I boil pasta?",
    "How long can cooked rice stay in the fridge?",
    "Is it ok to run every day?",
    "How much water should I drink a day?",
    "what temperature should i wash towels at",
    "How often should I water a cactus?",
    "How long does it take to walk 5 km?",
    "Can dogs eat grapes?",
    "How many hours of sleep does a teenager need?",
    "is it safe to refreeze thawed chicken",
    "How do I know if an egg is still good?",
    "What's a good tip in a restaurant in the US?",
    "How early should I get to the airport for an international flight?",
    "how do i get rid of hiccups",
    "How long should I let a steak rest?",
    "What should I do if my phone gets wet?",
    "How do I stop my glasses from fogging up with a mask?",
    "How often should I replace my toothbrush?",
    "What do I do if I locked myself out?",
    "how much should i save for an emergency fund",
    "Is it better to shower in the morning or at night?",
    "How do I politely leave a party early?",
    "What's a healthy breakfast if I don't have time to cook?",
    "How can I fall asleep faster?",
    "What should I bring to a dinner party as a guest?",
    "How do I keep my cat off the kitchen counter?",
]


def _everyday_quick(rng: random.Random) -> Record:
    q = rng.choice(QUICK_QUESTIONS)
    add = rng.choice(["", "", "", " Short answer please.", " Thanks!", " Just curious.", " Asking for a friend."])
    return make_record("everyday", q + add, kind="quick")


_EVERYDAY_KINDS: list[tuple[Callable[[random.Random], Record], int]] = [
    (_everyday_recipe, 14),
    (_everyday_lists, 12),
    (_everyday_plan, 14),
    (_everyday_tips, 12),
    (_everyday_gifts, 8),
    (_everyday_names, 8),
    (_everyday_howto, 10),
    (_everyday_compare, 9),
    (_everyday_recommend, 10),
    (_everyday_quick, 3),
]


def gen_everyday(rng: random.Random) -> Record:
    return pick_weighted(rng, _EVERYDAY_KINDS)(rng)
