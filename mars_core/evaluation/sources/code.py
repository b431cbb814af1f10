"""Code prompts: write, complete, convert, explain, fix or predict small programs in many languages. Part of the
pool phrases public standard-library functions (name, signature, first docstring sentence), so it depends on the
Python version; golds only for "what does this print", computed by plain Python that mirrors the snippet.
"""

from __future__ import annotations

import importlib
import inspect
import random
import re
from collections.abc import Callable

from .phrasing import NAMES, Record, attach_text, cap_first, make_record, phrase_ask, pick_weighted

# (name, python parameters, what it does: third-person verb phrase)
FUNCTIONS: list[tuple[str, str, str]] = [
    ("reverse_string", "s", "returns the string reversed"),
    ("is_palindrome", "s", "returns True if the text reads the same backwards, ignoring case and spaces"),
    ("count_vowels", "text", "counts how many vowels a string contains"),
    (
        "fizzbuzz",
        "n",
        "prints the numbers from 1 to n, printing Fizz for multiples of 3, Buzz for multiples of 5 "
        "and FizzBuzz for multiples of both",
    ),
    ("factorial", "n", "returns the factorial of a non-negative integer"),
    ("fibonacci", "n", "returns the n-th Fibonacci number"),
    ("first_fibonacci", "n", "returns a list with the first n Fibonacci numbers"),
    ("is_prime", "n", "checks whether a number is prime"),
    ("primes_up_to", "limit", "returns every prime number up to a limit"),
    ("gcd", "a, b", "returns the greatest common divisor of two integers"),
    ("lcm", "a, b", "returns the least common multiple of two integers"),
    ("celsius_to_fahrenheit", "celsius", "converts a temperature from Celsius to Fahrenheit"),
    ("miles_to_km", "miles", "converts a distance in miles to kilometres, rounded to two decimals"),
    ("word_frequencies", "text", "returns a dictionary mapping each word of a text to how often it appears"),
    ("flatten", "nested", "flattens a list of lists into one list"),
    ("chunk", "items, size", "splits a list into pieces of a given size"),
    ("unique_in_order", "items", "removes duplicates from a list but keeps the original order"),
    ("second_largest", "numbers", "returns the second largest distinct number in a list"),
    ("merge_sorted", "left, right", "merges two sorted lists into a single sorted list"),
    ("binary_search", "items, target", "returns the index of target in a sorted list, or -1 if it is missing"),
    ("bubble_sort", "numbers", "sorts a list of numbers with bubble sort"),
    ("is_anagram", "first, second", "checks whether two words are anagrams of each other"),
    ("capitalize_words", "sentence", "capitalizes the first letter of every word in a sentence"),
    ("average", "numbers", "returns the average of a list of numbers, or 0 when the list is empty"),
    ("median", "numbers", "returns the median of a list of numbers"),
    ("digit_sum", "n", "adds up the digits of a non-negative integer"),
    ("is_leap_year", "year", "tells whether a year is a leap year"),
    ("longest_word", "sentence", "finds the longest word in a sentence"),
    ("most_common_char", "text", "returns the character that appears most often in a string"),
    ("rotate_right", "items, k", "rotates a list k positions to the right"),
    ("transpose", "matrix", "transposes a matrix stored as a list of rows"),
    ("looks_like_email", "address", "checks whether a string looks like a valid email address"),
    ("camel_to_snake", "name", "converts a camelCase identifier to snake_case"),
    ("snake_to_camel", "name", "converts a snake_case identifier to camelCase"),
    ("roman_to_int", "numeral", "converts a Roman numeral such as 'XIV' to an integer"),
    ("int_to_roman", "number", "converts an integer between 1 and 3999 to a Roman numeral"),
    ("to_binary", "n", "converts a non-negative integer to a binary string without built-in helpers"),
    ("caesar", "text, shift", "encrypts text with a Caesar cipher, leaving non-letters unchanged"),
    ("brackets_balanced", "expr", "checks whether the (), [] and {} brackets in a string are balanced"),
    ("running_total", "numbers", "returns the running totals of a list of numbers"),
    ("common_items", "a, b", "returns the items that appear in both lists"),
    ("group_by_length", "words", "groups a list of words into a dictionary keyed by word length"),
    ("truncate", "text, limit", "cuts a text to at most limit characters and adds '...' when it was shortened"),
    ("days_between", "start, end", "returns the number of days between two dates written as YYYY-MM-DD"),
    ("clamp", "value, low, high", "keeps a number inside the range from low to high"),
    ("subsets", "items", "returns every subset of a list"),
    ("permutations", "word", "returns all the permutations of a string"),
    ("count_lines", "path", "counts the lines of a text file"),
    ("load_json", "path", "reads a JSON file and returns the parsed data, or None if the file is missing"),
    ("invert_dict", "mapping", "swaps the keys and values of a dictionary"),
    ("mask_card", "card_number", "hides every digit of a card number except the last four"),
    ("format_duration", "seconds", "turns a number of seconds into a string like '1h 02m 05s'"),
    ("is_sorted", "items", "checks whether a list is sorted in ascending order"),
    ("missing_number", "numbers", "finds the one missing number in a list that should contain 1 to n"),
    ("two_sum", "numbers, target", "returns the positions of the two numbers that add up to target"),
    ("max_subarray_sum", "numbers", "returns the largest sum of any contiguous slice of a list"),
    ("run_length_encode", "text", "compresses a string with run-length encoding, so 'aaabb' becomes 'a3b2'"),
    ("word_lengths", "sentence", "returns the length of each word in a sentence"),
    ("evens_only", "numbers", "keeps only the even numbers of a list"),
    ("squares", "numbers", "returns a new list with every number squared"),
    ("random_password", "length", "generates a random password mixing letters, digits and symbols"),
    ("bmi", "weight_kg, height_m", "calculates the body mass index from weight and height"),
    ("compound_interest", "principal, rate, years", "returns what a deposit is worth after compound interest"),
    ("split_bill", "total, people, tip_percent", "works out how much each person pays, tip included"),
    ("letter_grade", "score", "turns a score from 0 to 100 into a letter grade from A to F"),
    ("reverse_linked_list", "head", "reverses a singly linked list and returns the new head"),
    ("tree_depth", "root", "returns the depth of a binary tree"),
    ("is_pangram", "sentence", "checks whether a sentence uses every letter of the alphabet"),
    ("hex_to_rgb", "color", "converts a hex colour like '#ff8800' to an (r, g, b) tuple"),
    ("rgb_to_hex", "r, g, b", "converts three 0-255 values to a hex colour string"),
    ("slugify", "title", "turns a title into a lowercase URL slug with words joined by hyphens"),
    ("count_occurrences", "items, value", "counts how many times a value occurs in a list"),
    ("is_armstrong", "n", "checks whether a number equals the sum of its digits each raised to the number of digits"),
    ("collatz_steps", "n", "counts the steps the Collatz sequence needs to reach 1 from n"),
    ("dedupe_emails", "emails", "removes duplicate email addresses, ignoring upper and lower case"),
    ("parse_query", "url", "returns the query-string parameters of a URL as a dictionary"),
    ("seconds_to_hms", "seconds", "converts seconds to a (hours, minutes, seconds) tuple"),
    ("char_histogram", "text", "prints a simple text histogram of how often each letter appears"),
    ("valid_password", "password", "checks that a password has at least 8 characters, a digit and an uppercase letter"),
    ("normalize_spaces", "text", "collapses runs of whitespace into single spaces and trims the ends"),
    ("nth_word", "sentence, n", "returns the n-th word of a sentence, or an empty string if there is none"),
    ("pairwise_diff", "numbers", "returns the differences between consecutive numbers"),
    ("sum_of_multiples", "limit", "adds up all numbers below limit that are multiples of 3 or 5"),
    ("matrix_add", "a, b", "adds two matrices of the same size"),
    ("is_power_of_two", "n", "checks whether an integer is a power of two"),
    ("pig_latin", "word", "translates a word into Pig Latin"),
    ("word_wrap", "text, width", "wraps a text so that no line is longer than width characters"),
    ("average_grade", "grades", "takes a dictionary of student names to grades and returns the class average"),
]

LANGS: list[tuple[str, int]] = [
    ("Python", 12),
    ("JavaScript", 4),
    ("TypeScript", 2),
    ("Java", 2),
    ("C", 2),
    ("C++", 2),
    ("Go", 2),
    ("Rust", 2),
    ("C#", 1),
    ("Ruby", 1),
    ("PHP", 1),
    ("Kotlin", 1),
    ("Swift", 1),
]
CODE_EXTRAS_ANY = [
    "Include a couple of example calls.",
    "Add comments.",
    "Keep it short.",
    "Just the code, no explanation.",
    "Explain how it works afterwards.",
    "Make it efficient.",
    "Handle empty input gracefully.",
    "Don't use any libraries.",
    "Add some tests.",
    "Keep it under 15 lines.",
    "Use clear variable names.",
    "Explain the time complexity.",
    "Use recursion if it makes sense.",
    "Avoid recursion.",
    "It's for a beginner, so keep it simple.",
    "Show the output for one example.",
]
CODE_EXTRAS_PY = [
    "Use type hints.",
    "Add a docstring.",
    "Write it as a one-liner if you can.",
    "Use only built-in functions.",
    "Add pytest tests.",
    "Make it work for Python 3.8.",
]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.capitalize() for w in rest)


def _lang_name(lang: str, name: str) -> str:
    if lang in ("Python", "C", "C++", "Rust", "Ruby", "PHP"):
        return name
    if lang in ("Go", "C#"):
        return "".join(w.capitalize() for w in name.split("_"))
    return _camel(name)


def _code_extras(rng: random.Random, lang: str, k_max: int = 2) -> list[str]:
    pool = CODE_EXTRAS_ANY + (CODE_EXTRAS_PY if lang == "Python" else [])
    k = pick_weighted(rng, [(0, 5), (1, 4), (2, 1)])
    return rng.sample(pool, min(k, k_max))


def _desc_base(desc: str) -> str:
    """'returns the x' -> 'return the x' (third person to base form of the first verb)."""
    first, _, rest = desc.partition(" ")
    irregular = {"does": "do", "has": "have", "is": "be", "goes": "go"}
    if first in irregular:
        base = irregular[first]
    elif first.endswith("ies"):
        base = first[:-3] + "y"
    elif first.endswith(("shes", "ches", "sses", "xes", "zes")):
        base = first[:-2]
    elif first.endswith("s"):
        base = first[:-1]
    else:
        base = first
    return base + (" " + rest if rest else "")


def _code_write(rng: random.Random) -> Record:
    name, params, desc = rng.choice(FUNCTIONS)
    lang = pick_weighted(rng, LANGS)
    fname = _lang_name(lang, name)
    t = rng.randrange(11)
    extras = _code_extras(rng, lang)
    if t == 0:
        core = f"write a {lang} function that {desc}"
    elif t == 1:
        core = f"write a function `{fname}` in {lang} that {desc}"
    elif t == 2:
        core = f"implement {fname + '(' + params + ')' if lang == 'Python' else fname} in {lang}; it {desc}"
    elif t == 3:
        core = f"give me {lang} code that {desc}"
    elif t == 4:
        core = f"show me how to write a function that {desc} in {lang}"
    elif t == 5:
        core = f"create a small {lang} program that {desc}"
    elif t == 6:
        p = rng.choice(
            [
                f"How do I write a function that {_desc_base(desc)} in {lang}?",
                f"I need a {lang} function that {desc}.",
                f"{lang} question: how would you write something that {desc}?",
                f"what's the cleanest way in {lang.lower()} to write a function that {desc}?",
                f"Looking for a {lang} snippet that {desc}.",
            ]
        )
        return make_record("code", p + (" " + " ".join(extras) if extras else ""), kind="write_fn")
    elif t == 7:
        core = f"write {fname} in {lang}. It takes {params} and {desc}"
    elif t == 8:
        core = f"code a {lang} function named {fname} which {desc}"
    elif t == 9:
        other = rng.choice([x for x, _ in LANGS if x != lang])
        core = f"write a function that {desc}, once in {lang} and once in {other}"
    else:
        core = f"write a {lang} function that {desc}, with unit tests"
    return make_record("code", phrase_ask(rng, core, extras), kind="write_fn")


def _code_complete(rng: random.Random) -> Record:
    name, params, desc = rng.choice(FUNCTIONS)
    lang = pick_weighted(
        rng, [("Python", 6), ("JavaScript", 2), ("TypeScript", 1), ("Java", 1), ("Go", 1), ("Rust", 1)]
    )
    sentence = cap_first(_desc_base(desc)) + "."
    sentence3 = cap_first(desc) + "."
    ps = [p.strip() for p in params.split(",")]
    if lang == "Python":
        if rng.random() < 0.5:
            doc = f'    """{sentence}"""'
        else:
            doc = f'    """{sentence}\n\n    Args:\n' + "".join(f"        {p}: ...\n" for p in ps) + '    """'
        body = f"def {name}({params}):\n{doc}\n" + rng.choice(["    pass", "    # TODO", "    ...", ""])
        fence = "python"
    elif lang in ("JavaScript", "TypeScript"):
        args = ", ".join(_camel(p) + (": any" if lang == "TypeScript" else "") for p in ps)
        body = f"/**\n * {sentence3}\n */\nfunction {_camel(name)}({args}) {{\n  // your code here\n}}"
        fence = "js" if lang == "JavaScript" else "ts"
    elif lang == "Java":
        args = ", ".join(f"Object {_camel(p)}" for p in ps)
        body = f"// {sentence3}\npublic static Object {_camel(name)}({args}) {{\n    // TODO\n}}"
        fence = "java"
    elif lang == "Go":
        gname = "".join(w.capitalize() for w in name.split("_"))
        body = f"// {gname} {desc}.\nfunc {gname}({', '.join(ps)} interface{{}}) interface{{}} {{\n}}"
        fence = "go"
    else:
        body = f"/// {sentence3}\nfn {name}({', '.join(p + ': ()' for p in ps)}) {{\n    todo!()\n}}"
        fence = "rust"
    if rng.random() < 0.6:
        body = f"```{fence}\n{body}\n```"
    core = rng.choice(
        [
            "complete this function",
            "finish this function",
            "fill in the body of this function",
            f"implement this {lang} function",
            "write the body for this",
            "complete the code below",
            f"finish this {lang} stub",
        ]
    )
    extras = _code_extras(rng, lang, 1)
    return make_record("code", attach_text(rng, phrase_ask(rng, core, extras), body, multiline=True), kind="complete")


# --- stdlib introspection: public functions with a clean one-sentence docstring

_STDLIB_MODULES = (
    "string",
    "textwrap",
    "math",
    "statistics",
    "posixpath",
    "genericpath",
    "random",
    "bisect",
    "heapq",
    "calendar",
    "fnmatch",
    "glob",
    "difflib",
    "html",
    "urllib.parse",
    "colorsys",
    "base64",
    "secrets",
    "re",
    "shlex",
    "zlib",
    "binascii",
    "mimetypes",
    "email.utils",
    "xml.sax.saxutils",
    "fractions",
    "unicodedata",
    "filecmp",
    "pprint",
    "functools",
    "keyword",
    "json",
    "shutil",
    "itertools",
    "operator",
    "datetime",
    "ipaddress",
    "quopri",
    "uu",
    "csv",
    "gzip",
    "zipfile",
    "tarfile",
)
_VERBS = {
    "Return": "returns",
    "Returns": "returns",
    "Get": "gets",
    "Convert": "converts",
    "Converts": "converts",
    "Decode": "decodes",
    "Encode": "encodes",
    "Test": "tests",
    "Compute": "computes",
    "Compare": "compares",
    "Parse": "parses",
    "Parses": "parses",
    "Split": "splits",
    "Find": "finds",
    "Determine": "determines",
    "Escape": "escapes",
    "Calculate": "calculates",
    "Join": "joins",
    "Normalize": "normalizes",
    "Translate": "translates",
    "Replace": "replaces",
    "Format": "formats",
    "Collapse": "collapses",
    "Expand": "expands",
    "Transform": "transforms",
    "Guess": "guesses",
    "Remove": "removes",
    "Insert": "inserts",
    "Generate": "generates",
    "Check": "checks",
    "Count": "counts",
    "Round": "rounds",
    "Shorten": "shortens",
    "Wrap": "wraps",
    "Fill": "fills",
    "Dedent": "dedents",
    "Indent": "indents",
    "Quote": "quotes",
    "Unquote": "unquotes",
    "Unescape": "unescapes",
    "Strip": "strips",
    "Merge": "merges",
    "Locate": "locates",
    "Choose": "chooses",
    "Shuffle": "shuffles",
    "Sort": "sorts",
    "Make": "makes",
    "Compress": "compresses",
    "Decompress": "decompresses",
    "Build": "builds",
    "Extract": "extracts",
    "Pop": "pops",
    "Push": "pushes",
}
_BAD_WORDS = (
    "deprecated",
    "obsolete",
    "internal",
    "undocumented",
    "file descriptor",
    "thread",
    "interpreter",
    "frame",
    "self",
    "see ",
    "e.g.",
    "i.e.",
    "etc",
    "cls",
    "instance",
    "pickl",
    "__",
)
_SKIP_NAMES = {
    "itn",
    "nti",
    "nts",
    "stn",
    "decompressobj",
    "get_mixed_type_key",
    "fmod",
    "localtime",
    "get_archive_formats",
    "get_unpack_formats",
    "get_terminal_size",
    "disk_usage",
    "isreadable",
    "isrecursive",
    "length_hint",
    "truth",
    "decode_params",
    "encode_rfc2231",
    "restore",
    "cmpfiles",
    "tee",
    "crc_hqx",
    "a2b_uu",
    "a2b_qp",
    "list_dialects",
    "east_asian_width",
    "collapse_addresses",
    "subn",
    "getatime",
    "getctime",
    "normcase",
    "lexists",
    "ulp",
    "nextafter",
    "frexp",
    "realpath",
    "abspath",
}
_STDLIB_CACHE: list[tuple[str, str, str, str]] | None = None


def stdlib_functions() -> list[tuple[str, str, str, str]]:
    """(module, name, signature, first docstring sentence without the final period), sorted; cached."""
    global _STDLIB_CACHE
    if _STDLIB_CACHE is not None:
        return _STDLIB_CACHE
    out: dict[tuple[str, str], tuple[str, str, str, str]] = {}
    for modname in _STDLIB_MODULES:
        try:
            mod = importlib.import_module(modname)
        except Exception:  # module missing in this Python (e.g. uu was removed in 3.13)
            continue
        for name in sorted(dir(mod)):
            if name.startswith("_") or not name.isidentifier() or name in _SKIP_NAMES:
                continue
            obj = getattr(mod, name, None)
            if not (inspect.isfunction(obj) or inspect.isbuiltin(obj)):
                continue
            owner = getattr(obj, "__module__", None)
            if owner not in (modname, "_" + modname.split(".")[-1], None):
                continue  # re-exported from another module
            try:
                sig = str(inspect.signature(obj)).replace(", /)", ")").replace(", /,", ",")
            except (TypeError, ValueError):
                continue
            if len(sig) > 48 or any(ch in sig for ch in "<>/") or "**" in sig:
                continue
            doc = inspect.getdoc(obj) or ""
            para = " ".join(doc.split("\n\n")[0].split())
            first = re.split(r"(?<=\.)\s", para)[0].strip()
            if not first.endswith(".") or not (18 <= len(first) <= 120) or not first.isascii():
                continue
            low = first.lower()
            if any(b in low for b in _BAD_WORDS) or any(ch in first for ch in '`>[]*="') or name in low.split():
                continue
            verb = first.split()[0]
            if verb not in _VERBS:
                continue
            out.setdefault((name, sig), (modname, name, sig, first[:-1]))
    _STDLIB_CACHE = sorted(out.values())
    return _STDLIB_CACHE


def _code_stdlib(rng: random.Random) -> Record:
    pool = stdlib_functions()
    if not pool:
        return _code_write(rng)
    mod, name, sig, doc = rng.choice(pool)
    verb, _, rest = doc.partition(" ")
    third = _VERBS[verb] + (" " + rest if rest else "")
    base = _desc_base(third)
    shown = mod.replace("posixpath", "os.path").replace("genericpath", "os.path")
    t = rng.randrange(8)
    extras = _code_extras(rng, "Python", 1)
    if t == 0:
        core = f"write a Python function `{name}{sig}` that {third}"
    elif t == 1:
        core = f"implement `{name}{sig}` in plain Python without importing {shown}; it {third}"
    elif t == 2:
        core = f"reimplement {shown}.{name} yourself: it should {base}"
    elif t == 3:
        body = f'def {name}{sig}:\n    """{doc}."""\n'
        if rng.random() < 0.5:
            body = f"```python\n{body}```"
        core = rng.choice(
            [
                "complete this function",
                "implement this",
                "write the body of this function",
                "fill in this function (don't just call the standard library)",
            ]
        )
        return make_record("code", attach_text(rng, phrase_ask(rng, core, extras), body, multiline=True), kind="stdlib")
    elif t == 4:
        p = rng.choice(
            [
                f"What does {shown}.{name} do in Python? Show a short example.",
                f"how do i use {shown}.{name}? example please",
                f"Explain {shown}.{name}{sig} with an example.",
                f"When would I use {shown}.{name} in Python?",
            ]
        )
        return make_record("code", p, kind="stdlib")
    elif t == 5:
        core = f"write unit tests for a function `{name}{sig}` that {third}"
    elif t == 6:
        lang = rng.choice(["JavaScript", "TypeScript", "Go", "Rust", "Java", "C#"])
        core = f"write a {lang} function that works like Python's {shown}.{name}, i.e. it {third}"
    else:
        p = rng.choice(
            [
                f"Write {name}{sig} in Python.\nSpec: {doc}.",
                f"python: {name}{sig}. {doc}. write it",
                f"Implement this in Python:\n{name}{sig} - {doc[:1].lower() + doc[1:]}.",
            ]
        )
        return make_record("code", p, kind="stdlib")
    return make_record("code", phrase_ask(rng, core, extras), kind="stdlib")


# --- tiny programs: converting, annotating, refactoring

_VARS = ["nums", "values", "scores", "data", "items", "prices", "ages", "temps", "counts", "marks"]
_WORDS = [
    "banana",
    "planet",
    "kitchen",
    "python",
    "river",
    "garden",
    "window",
    "monday",
    "rocket",
    "pencil",
    "orange",
    "summer",
    "silver",
    "button",
    "coffee",
    "dragon",
    "marble",
    "castle",
    "winter",
    "tomato",
]


def _py_snippet(rng: random.Random) -> str:
    """A short plain Python snippet (for conversion / annotation / explanation requests)."""
    v = rng.choice(_VARS)
    n = rng.randint(3, 30)
    k = rng.randint(2, 9)
    nums = [rng.randint(1, 60) for _ in range(rng.randint(4, 6))]
    fn = rng.choice(["process", "calc", "do_it", "helper", "f", "check", "handle", "compute", "run", "get_result"])
    t = rng.randrange(12)
    if t == 0:
        return f"total = 0\nfor i in range(1, {n} + 1):\n    total += i * i\nprint(total)"
    if t == 1:
        return f"def {fn}(n):\n    return n % 2 == 0\n\nprint({fn}({n}))"
    if t == 2:
        return f"{v} = {nums}\nbig = [x for x in {v} if x > {k * 5}]\nprint(big)"
    if t == 3:
        return (
            "def " + fn + "(text):\n    counts = {}\n    for word in text.split():\n"
            "        counts[word] = counts.get(word, 0) + 1\n    return counts"
        )
    if t == 4:
        w = rng.choice(_WORDS)
        return f'word = "{w}"\nprint(word[::-1].upper())'
    if t == 5:
        return (
            f"def {fn}({v}):\n    best = {v}[0]\n    for x in {v}:\n"
            f"        if x > best:\n            best = x\n    return best"
        )
    if t == 6:
        return f"n = {n}\nwhile n > 0:\n    print(n)\n    n -= {k}"
    if t == 7:
        return f'def greet(name, times={k}):\n    for _ in range(times):\n        print(f"Hello, {{name}}!")'
    if t == 8:
        return f"for i in range(1, {n}):\n    if i % {k} == 0:\n        print('tick')\n    else:\n        print(i)"
    if t == 9:
        return f"def {fn}({v}):\n    if not {v}:\n        return 0\n    return sum({v}) / len({v})"
    if t == 10:
        return f"{v} = {nums}\n{v}.sort(reverse=True)\nprint({v}[:{min(k, 3)}])"
    return (
        f"def {fn}(a, b):\n    result = []\n    for x in a:\n        if x in b and x not in result:\n"
        f"            result.append(x)\n    return result"
    )


def _js_snippet(rng: random.Random) -> str:
    n = rng.randint(3, 20)
    k = rng.randint(2, 9)
    nums = [rng.randint(1, 50) for _ in range(rng.randint(3, 6))]
    t = rng.randrange(5)
    if t == 0:
        return f"const nums = {nums};\nconst doubled = nums.map(x => x * {k});\nconsole.log(doubled);"
    if t == 1:
        return (
            f"function sumTo(n) {{\n  let total = 0;\n  for (let i = 1; i <= n; i++) total += i;\n"
            f"  return total;\n}}\nconsole.log(sumTo({n}));"
        )
    if t == 2:
        return (
            f"const words = ['{rng.choice(_WORDS)}', '{rng.choice(_WORDS)}', '{rng.choice(_WORDS)}'];\n"
            f"words.forEach((w, i) => console.log(i, w.toUpperCase()));"
        )
    if t == 3:
        return f"const evens = {nums}.filter(n => n % 2 === 0);\nconsole.log(evens.length);"
    return f"let count = {n};\nwhile (count > 0) {{\n  console.log(count);\n  count -= {k};\n}}"


def _code_convert(rng: random.Random) -> Record:
    if rng.random() < 0.78:
        src, body = "Python", _py_snippet(rng)
        dst = pick_weighted(
            rng,
            [
                ("JavaScript", 5),
                ("TypeScript", 2),
                ("Java", 2),
                ("C", 1),
                ("C++", 2),
                ("Go", 2),
                ("Rust", 2),
                ("C#", 1),
                ("Ruby", 1),
                ("Kotlin", 1),
                ("PHP", 1),
            ],
        )
    else:
        src, body = "JavaScript", _js_snippet(rng)
        dst = rng.choice(["Python", "Python", "TypeScript", "Java", "Go"])
    if rng.random() < 0.5:
        body = f"```{src.lower()}\n{body}\n```"
    core = rng.choice(
        [
            f"convert this {src} to {dst}",
            f"translate this {src} code into {dst}",
            f"rewrite this in {dst}",
            f"port this snippet from {src} to {dst}",
            f"how would this look in {dst}",
            f"turn this {src} into idiomatic {dst}",
        ]
    )
    extras = rng.sample(
        ["Keep the same behaviour.", "Explain any differences.", "Add comments.", "Only the code please."],
        pick_weighted(rng, [(0, 3), (1, 2)]),
    )
    return make_record("code", attach_text(rng, phrase_ask(rng, core, extras), body, multiline=True), kind="convert")


def _code_annotate(rng: random.Random) -> Record:
    body = _py_snippet(rng)
    if "def " not in body:
        body = _py_snippet(rng)
    kind = rng.randrange(7)
    core = [
        "add type hints to this function",
        "add type hints and a docstring to this",
        "add a docstring to this code",
        "add comments explaining each line",
        "refactor this to be more readable",
        "give the variables better names in this code",
        "make this code more pythonic",
    ][kind]
    if rng.random() < 0.5:
        body = f"```python\n{body}\n```"
    return make_record("code", attach_text(rng, phrase_ask(rng, core), body, multiline=True), kind="annotate")


def _code_explain(rng: random.Random) -> Record:
    body = _py_snippet(rng) if rng.random() < 0.7 else _js_snippet(rng)
    core = rng.choice(
        [
            "explain what this code does",
            "explain this code line by line",
            "walk me through this snippet",
            "what is this code doing",
            "describe what this function does in plain English",
            "what's the time complexity of this code",
            "is there anything wrong with this code",
            "suggest improvements for this code",
        ]
    )
    return make_record("code", attach_text(rng, phrase_ask(rng, core), body, multiline=True), kind="explain")


# --- "What does this print?" with a gold computed by mirroring the snippet in Python


def _py_repr_list(xs: list) -> str:
    return repr(xs)


def _output_python(rng: random.Random) -> tuple[str, str]:
    t = rng.randrange(20)
    a, b, c = rng.randint(2, 40), rng.randint(2, 12), rng.randint(1, 30)
    w = rng.choice(_WORDS)
    nums = [rng.randint(1, 50) for _ in range(rng.randint(4, 6))]
    v = rng.choice(_VARS)
    if t == 0:
        op = rng.choice(["+", "-", "*"])
        val = {"+": a + b, "-": a - b, "*": a * b}[op]
        return f"a = {a}\nb = {b}\nprint((a {op} b) * {c})", str(val * c)
    if t == 1:
        return f"x = {a + 20}\nprint(x // {b}, x % {b})", f"{(a + 20) // b} {(a + 20) % b}"
    if t == 2:
        lo, hi = rng.randint(0, 5), rng.randint(6, 15)
        return f"total = 0\nfor i in range({lo}, {hi}):\n    total += i\nprint(total)", str(sum(range(lo, hi)))
    if t == 3:
        ops = [
            ("word[::-1]", w[::-1]),
            ("word.upper()", w.upper()),
            ("word[1:4]", w[1:4]),
            ("len(word)", str(len(w))),
            ("word[-1] + word[0]", w[-1] + w[0]),
            ("word.capitalize()", w.capitalize()),
            (f'word.count("{w[1]}")', str(w.count(w[1]))),
            (f'word.replace("{w[0]}", "*")', w.replace(w[0], "*")),
            ("word[:3] * 2", w[:3] * 2),
            ("word.find('a')", str(w.find("a"))),
        ]
        expr, out = rng.choice(ops)
        return f'word = "{w}"\nprint({expr})', out
    if t == 4:
        ops = [
            ("sum({v})", str(sum(nums))),
            ("max({v}) - min({v})", str(max(nums) - min(nums))),
            ("sorted({v})", repr(sorted(nums))),
            ("sorted({v}, reverse=True)", repr(sorted(nums, reverse=True))),
            ("{v}[::2]", repr(nums[::2])),
            ("{v}[-2:]", repr(nums[-2:])),
            ("len({v})", str(len(nums))),
            ("{v}[1] + {v}[-1]", str(nums[1] + nums[-1])),
        ]
        expr, out = rng.choice(ops)
        return f"{v} = {nums}\nprint({expr.format(v=v)})", out
    if t == 5:
        n = rng.randint(3, 7)
        k = rng.randint(1, 4)
        return f"print([i * {k} for i in range({n})])", repr([i * k for i in range(n)])
    if t == 6:
        n = rng.randint(10, 200)
        steps, m = 0, n
        while m > 1:
            m //= 2
            steps += 1
        return f"n = {n}\ncount = 0\nwhile n > 1:\n    n //= 2\n    count += 1\nprint(count)", str(steps)
    if t == 7:
        keys = rng.sample(["apple", "pear", "fig", "kiwi", "plum", "lime"], 3)
        vals = [rng.randint(1, 9) for _ in keys]
        d = dict(zip(keys, vals))
        k0 = rng.choice(keys)
        dflt = rng.randint(0, 5)
        src = "stock = {" + ", ".join(f'"{k}": {x}' for k, x in d.items()) + "}"
        return f'{src}\nprint(stock["{k0}"] + stock.get("melon", {dflt}))', str(d[k0] + dflt)
    if t == 8:
        name = rng.choice(NAMES)
        return (
            f'name = "{name}"\nage = {a}\nprint(f"{{name}} will be {{age + 1}} next year")',
            f"{name} will be {a + 1} next year",
        )
    if t == 9:
        words = rng.sample(_WORDS, 3)
        sep = rng.choice(["-", ", ", "+", " / ", ""])
        return f"words = {words!r}\nprint({sep!r}.join(words))", sep.join(words)
    if t == 10:
        k, m = rng.randint(2, 9), rng.randint(1, 5)
        return f"def f(x):\n    return x * {k} + {m}\n\nprint(f({b}))", str(b * k + m)
    if t == 11:
        x = rng.randint(1, 99)
        return (f'x = {x}\nif x % 2 == 0:\n    print("even")\nelse:\n    print("odd")', "even" if x % 2 == 0 else "odd")
    if t == 12:
        n = rng.randint(3, 5)
        k = rng.randint(2, 7)
        return f"for i in range(1, {n + 1}):\n    print(i * {k})", "\n".join(str(i * k) for i in range(1, n + 1))
    if t == 13:
        parts = rng.sample(_WORDS, 3)
        s = ",".join(parts)
        return f's = "{s}"\nprint(s.split(","))', repr(s.split(","))
    if t == 14:
        xs = [rng.randint(1, 6) for _ in range(rng.randint(5, 8))]
        return f"print(len(set({xs})))", str(len(set(xs)))
    if t == 15:
        words = rng.sample(_WORDS + ["cat", "sky", "ox", "bee"], 4)
        return f"words = {words!r}\nprint(max(words, key=len))", max(words, key=len)
    if t == 16:
        words = rng.sample(["red", "green", "blue", "gold", "teal"], rng.randint(2, 3))
        return (
            f"for i, w in enumerate({words!r}):\n    print(i, w)",
            "\n".join(f"{i} {x}" for i, x in enumerate(words)),
        )
    if t == 17:
        s = rng.choice(["ab", "xo", "hi", "na", "-"])
        n = rng.randint(2, 5)
        return f'print("{s}" * {n})', s * n
    if t == 18:
        xs = [rng.randint(1, 9) for _ in range(3)]
        ys = rng.sample(["a", "b", "c", "d", "e"], 3)
        return f"print(list(zip({xs}, {ys!r})))", repr(list(zip(xs, ys)))
    total = 1
    n = rng.randint(3, 6)
    for i in range(1, n + 1):
        total *= i
    return f"result = 1\nfor i in range(1, {n + 1}):\n    result *= i\nprint(result)", str(total)


def _js_num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


def _output_js(rng: random.Random) -> tuple[str, str]:
    t = rng.randrange(9)
    nums = [rng.randint(1, 30) for _ in range(rng.randint(3, 5))]
    k = rng.randint(2, 6)
    w = rng.choice(_WORDS)
    if t == 0:
        return f"const arr = {nums};\nconsole.log(arr.map(x => x * {k}).join(','));", ",".join(str(x * k) for x in nums)
    if t == 1:
        return f'let s = "{w}";\nconsole.log(s.length);', str(len(w))
    if t == 2:
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        return f'console.log({a} + "{b}");', f"{a}{b}"
    if t == 3:
        n = rng.randint(3, 12)
        return (
            f"let total = 0;\nfor (let i = 0; i < {n}; i++) {{\n  total += i;\n}}\nconsole.log(total);",
            str(sum(range(n))),
        )
    if t == 4:
        return (
            f"const xs = {nums};\nconsole.log(xs.filter(x => x % 2 === 0).length);",
            str(sum(1 for x in nums if x % 2 == 0)),
        )
    if t == 5:
        return f"console.log(Math.max({', '.join(map(str, nums))}));", str(max(nums))
    if t == 6:
        return f'console.log("{w}".toUpperCase());', w.upper()
    if t == 7:
        val, typ = rng.choice(
            [
                ("42", "number"),
                ("'hi'", "string"),
                ("true", "boolean"),
                ("[]", "object"),
                ("null", "object"),
                ("undefined", "undefined"),
                ("{}", "object"),
                ("3.5", "number"),
            ]
        )
        return f"console.log(typeof {val});", typ
    a, b = rng.randint(10, 60), rng.randint(2, 9)
    return f"console.log({a} % {b});", str(a % b)


def _output_c(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(7, 90), rng.randint(2, 9)
    op, val = rng.choice([("/", a // b), ("%", a % b), ("*", a * b), ("-", a - b)])
    return (
        f'#include <stdio.h>\n\nint main(void) {{\n    int x = {a}, y = {b};\n    printf("%d\\n", x {op} y);\n'
        f"    return 0;\n}}",
        str(val),
    )


def _code_output(rng: random.Random) -> Record:
    lang = pick_weighted(rng, [("Python", 7), ("JavaScript", 2), ("C", 1)])
    src, gold = {"Python": _output_python, "JavaScript": _output_js, "C": _output_c}[lang](rng)
    fence = {"Python": "python", "JavaScript": "javascript", "C": "c"}[lang]
    body = f"```{fence}\n{src}\n```" if rng.random() < 0.55 else src
    core = rng.choice(
        [
            "tell me what this code prints",
            "tell me what this prints",
            f"predict the output of this {lang} snippet",
            "trace through this and give the output",
            "tell me the output of this code",
        ]
    )
    q = rng.random()
    if q < 0.4:
        instr = phrase_ask(rng, core, noisy=False)
    else:
        instr = rng.choice(
            [
                "What does this code print?",
                "What will this output?",
                "what is printed here?",
                f"What's the output of this {lang} code?",
                "What gets printed when I run this?",
                "Output of this snippet?",
                "what does this print",
                "What is the output?",
            ]
        )
        if rng.random() < 0.3:
            instr += " " + rng.choice(["Just give the output.", "Explain briefly.", "Show your reasoning."])
    return make_record("code", attach_text(rng, instr, body, multiline=True), gold=gold, kind="output")


# --- bug fixing


def _code_bugfix(rng: random.Random) -> Record:
    v = rng.choice(_VARS)
    n = rng.randint(5, 50)
    t = rng.randrange(10)
    lang = "Python"
    if t == 0:
        code = f"def average({v}):\n    return sum({v}) / (len({v}) - 1)"
        goal, symptom = "return the average", "the result is always too big"
    elif t == 1:
        code = "def sum_to(n):\n    total = 0\n    for i in range(1, n):\n        total += i\n    return total"
        goal, symptom = (
            "add up the numbers from 1 to n",
            f"sum_to({n}) gives {sum(range(1, n))} instead of {sum(range(1, n + 1))}",
        )
    elif t == 2:
        code = (
            "def factorial(n):\n    result = 0\n    for i in range(1, n + 1):\n        result *= i\n    return result"
        )
        goal, symptom = "compute n!", "it always returns 0"
    elif t == 3:
        code = (
            f"def biggest({v}):\n    best = 0\n    for x in {v}:\n"
            f"        if x > best:\n            best = x\n    return best"
        )
        goal, symptom = "return the largest number", "it returns 0 when every number is negative"
    elif t == 4:
        code = "def add_item(item, bucket=[]):\n    bucket.append(item)\n    return bucket"
        goal, symptom = "return a new list with the item", "items from earlier calls keep showing up"
    elif t == 5:
        code = (
            f"def remove_odds({v}):\n    for x in {v}:\n        if x % 2 == 1:\n"
            f"            {v}.remove(x)\n    return {v}"
        )
        goal, symptom = "remove every odd number", "some odd numbers are left in the list"
    elif t == 6:
        code = f"def middle({v}):\n    return {v}[len({v}) / 2]"
        goal, symptom = "return the middle element", "I get a TypeError"
    elif t == 7:
        lang = "JavaScript"
        code = (
            "function sumArray(arr) {\n  let total = 0;\n  for (let i = 0; i <= arr.length; i++) {\n"
            "    total += arr[i];\n  }\n  return total;\n}"
        )
        goal, symptom = "sum an array", "it returns NaN"
    elif t == 8:
        lang = "C"
        code = (
            "int sum(int *a, int n) {\n    int s;\n    for (int i = 0; i < n; i++)\n"
            "        s += a[i];\n    return s;\n}"
        )
        goal, symptom = "sum an array", "the result is random garbage"
    else:
        lang = "SQL"
        tbl, grp = rng.choice([("orders", "customer_id"), ("employees", "department"), ("sales", "region")])
        code = f"SELECT {grp}, COUNT(*)\nFROM {tbl}\nWHERE COUNT(*) > {rng.randint(2, 10)}\nGROUP BY {grp};"
        goal, symptom = f"list the {grp.replace('_', ' ')} values with many rows", "it gives an error"
    fence = {"Python": "python", "JavaScript": "js", "C": "c", "SQL": "sql"}[lang]
    body = f"```{fence}\n{code}\n```" if rng.random() < 0.5 else code
    s = rng.randrange(6)
    if s == 0:
        instr = phrase_ask(rng, f"fix the bug in this {lang} code")
    elif s == 1:
        instr = f"This is supposed to {goal}, but {symptom}. What's wrong?"
    elif s == 2:
        instr = f"why doesn't this work? {symptom}"
    elif s == 3:
        instr = phrase_ask(rng, "find and fix the bug", [f"It should {goal}."])
    elif s == 4:
        instr = f"My {lang} function is broken: {symptom}. Can you fix it and explain the problem?"
    else:
        instr = rng.choice(["help, this has a bug", "Debug this for me.", "Something is off here, can you spot it?"])
    return make_record("code", attach_text(rng, instr, body, multiline=True), kind="bugfix")


# --- SQL

SQL_TABLES = [
    (
        "employees",
        ["id", "name", "department", "salary", "hire_date"],
        "salary",
        "department",
        "hire_date",
        "employees",
    ),
    ("orders", ["id", "customer_id", "total", "status", "created_at"], "total", "status", "created_at", "orders"),
    ("products", ["id", "name", "category", "price", "stock"], "price", "category", None, "products"),
    ("students", ["id", "name", "class", "grade", "birth_date"], "grade", "class", "birth_date", "students"),
    ("books", ["id", "title", "author", "year", "pages"], "pages", "author", None, "books"),
    ("movies", ["id", "title", "genre", "rating", "release_year"], "rating", "genre", None, "movies"),
    ("customers", ["id", "name", "city", "country", "signup_date"], None, "country", "signup_date", "customers"),
    ("sales", ["id", "region", "product", "amount", "sold_on"], "amount", "region", "sold_on", "sales"),
    ("patients", ["id", "name", "age", "ward", "admitted_on"], "age", "ward", "admitted_on", "patients"),
    (
        "flights",
        ["id", "origin", "destination", "price", "departs_at"],
        "price",
        "destination",
        "departs_at",
        "flights",
    ),
]


def _code_sql(rng: random.Random) -> Record:
    table, cols, num, cat, date, noun = rng.choice(SQL_TABLES)
    k = rng.randint(3, 20)
    intents = []
    if num:
        intents += [
            f"lists all {noun} with a {num} above {rng.choice([10, 50, 100, 1000, 5000])}",
            f"returns the top {k} {noun} by {num}",
            f"shows the average {num} per {cat}",
            f"finds the {noun} with the lowest {num}",
            f"gets the total {num} for each {cat}",
            f"shows the {noun} whose {num} is above the average",
        ]
    intents += [
        f"counts the {noun} in each {cat}",
        f"lists the distinct values of {cat}",
        f"finds every {cat} that has more than {k} {noun}",
        f"returns all {noun} sorted by {cols[1]}",
        f"deletes {noun} with no {cols[1]}",
        f"finds duplicate {cols[1]} values in {table}",
    ]
    if date:
        intents += [
            f"returns the {noun} from the last {k} days",
            f"counts {noun} per month using {date}",
            f"gets the {noun} added in {rng.randint(2015, 2024)}",
        ]
    intent = rng.choice(intents)
    dialect = pick_weighted(rng, [("", 6), (" in PostgreSQL", 1), (" for SQLite", 1), (" in MySQL", 1)])
    schema = f"{table}({', '.join(cols)})"
    s = rng.randrange(6)
    if s == 0:
        p = phrase_ask(
            rng, f"write a SQL query{dialect} that {intent}", [f"Table: {schema}"] if rng.random() < 0.7 else []
        )
    elif s == 1:
        p = f"I have a table {schema}. How do I write a query that {_desc_base(intent)}?"
    elif s == 2:
        p = phrase_ask(rng, f"give me the SQL that {intent}")
    elif s == 3:
        p = f"sql: {intent.split(' ', 1)[1]}{dialect}. table is {table} ({', '.join(cols)})"
    elif s == 4:
        p = phrase_ask(rng, f"write the query{dialect}", [f"Table {schema}. I want something that {intent}."])
    else:
        p = f"Table `{table}` has columns {', '.join(cols)}. Query that {intent}?"
    return make_record("code", p, kind="sql")


# --- shell, web, regex, tooling questions

_EXTS = ["txt", "log", "csv", "jpg", "png", "py", "md", "json", "pdf", "mp3"]


def _code_shell(rng: random.Random) -> Record:
    e1, e2 = rng.sample(_EXTS, 2)
    n = rng.choice([1, 5, 10, 50, 100, 500])
    d = rng.choice([1, 3, 7, 30, 90])
    tasks = [
        f"counts the lines in every .{e1} file in the current folder",
        f"finds all files bigger than {n} MB under my home directory",
        f"renames every .{e1} file in a folder to .{e2}",
        f"deletes .{e1} files older than {d} days",
        f"shows the {rng.randint(5, 20)} largest files in a directory",
        f"prints the {rng.randint(5, 30)} most common words in a text file",
        "backs up a folder into a tar.gz archive with today's date in the name",
        f"checks every {rng.randint(5, 60)} seconds whether a website is up",
        "replaces 'foo' with 'bar' in all files of a folder",
        "lists the processes using the most memory",
        "downloads a list of URLs from a text file",
        f"moves all .{e1} files into a subfolder called {e1}",
        f"prints the last {rng.randint(10, 100)} lines of a log file and keeps following it",
        f"counts how many times 'ERROR' appears in each .{e1} file",
        "shows how much disk space each subfolder uses, sorted",
        f"converts every .{e1} filename in a folder to lowercase",
        "loops over the numbers 1 to 10 and prints whether each is even or odd",
    ]
    task = rng.choice(tasks)
    shell = pick_weighted(rng, [("bash", 6), ("shell", 2), ("zsh", 1), ("PowerShell", 1)])
    s = rng.randrange(4)
    if s == 0:
        p = phrase_ask(rng, f"write a {shell} script that {task}")
    elif s == 1:
        p = phrase_ask(rng, f"give me a {shell} one-liner that {task}")
    elif s == 2:
        p = f"how do I write a {shell} command that {task}?"
    else:
        p = f"{shell} command that {task}?"
    return make_record("code", p, kind="shell")


_SECTIONS = ["Home", "About", "Services", "Blog", "Contact", "Pricing", "Gallery", "FAQ", "Menu", "Shop"]
_CSS_COLOURS = ["navy", "teal", "coral", "#333", "tomato", "forestgreen", "#ff6600", "purple", "slategray"]


def _code_web(rng: random.Random) -> Record:
    c1, c2 = rng.sample(_CSS_COLOURS, 2)
    pages = rng.sample(_SECTIONS, rng.randint(3, 5))
    k = rng.randint(2, 4)
    biz = rng.choice(
        [
            "bakery",
            "yoga studio",
            "dentist",
            "bike shop",
            "photographer",
            "book club",
            "coffee cart",
            "plumber",
            "wedding",
            "small law firm",
            "music teacher",
            "dog groomer",
        ]
    )
    tasks = [
        f"a navigation bar with links to {', '.join(pages)}",
        "a contact form with name, email and message fields",
        f"a button with rounded corners and a {c1} background that turns {c2} on hover",
        "a centered card with an image, a title and a short description",
        f"a {k}-column layout that becomes one column on phones",
        f"a simple landing page for a {biz}",
        "a login form with a 'remember me' checkbox",
        f"a pricing table with {k} plans",
        "a sticky footer",
        "a responsive image gallery using CSS grid",
        "a dark mode toggle",
        f"a table of {rng.choice(['products', 'employees', 'scores', 'books'])} with striped rows",
        "a modal popup that opens when a button is clicked",
        "a loading spinner using only CSS",
        "a to-do list where you can add and remove items",
        "an FAQ section where each answer expands when you click the question",
    ]
    task = rng.choice(tasks)
    tech = pick_weighted(
        rng,
        [
            ("HTML and CSS", 5),
            ("HTML", 2),
            ("CSS", 1),
            ("HTML, CSS and JavaScript", 2),
            ("Tailwind", 1),
            ("React", 2),
            ("plain JavaScript", 1),
        ],
    )
    s = rng.randrange(4)
    if s == 0:
        p = phrase_ask(rng, f"write the {tech} for {task}")
    elif s == 1:
        p = phrase_ask(rng, f"make {task} in {tech}")
    elif s == 2:
        p = f"how do I make {task} with {tech}?"
    else:
        p = f"{tech}: {task}, please"
    return make_record("code", p, kind="web")


def _code_regex(rng: random.Random) -> Record:
    things = [
        "email addresses",
        "US phone numbers like (555) 123-4567",
        "dates in the format DD/MM/YYYY",
        "UK postcodes",
        "hex colour codes",
        "IPv4 addresses",
        "URLs that start with https",
        "words that start with a capital letter",
        "times like 14:30",
        "numbers with two decimal places",
        "hashtags in a tweet",
        "lines that contain only whitespace",
        "words repeated twice in a row",
        "strong passwords (8+ chars, a digit, an uppercase letter)",
        "file names ending in .jpg or .png",
        "prices like $19.99",
        "ISO dates like 2024-05-31",
        "HTML tags",
    ]
    lang = rng.choice(["", "", " in Python", " in JavaScript", " for grep"])
    thing = rng.choice(things)
    s = rng.randrange(3)
    if s == 0:
        p = phrase_ask(rng, f"write a regular expression{lang} that matches {thing}")
    elif s == 1:
        p = f"regex for {thing}{lang}?"
    else:
        p = phrase_ask(
            rng, f"give me a regex{lang} to find {thing}", ["Explain each part."] if rng.random() < 0.4 else []
        )
    return make_record("code", p, kind="regex")


_TOOL_QUESTIONS = [
    "How do I undo my last git commit but keep the changes?",
    "what's the difference between git merge and git rebase",
    "How do I create a virtual environment in Python?",
    "How can I see which process is using port {port}?",
    "What does `git stash` do?",
    "how do i install a specific version of a package with pip",
    "How do I read a CSV file with pandas and show the first {n} rows?",
    "What's the difference between a list and a tuple in Python?",
    "Explain async/await in JavaScript with a short example.",
    "What is a null pointer exception and how do I avoid it in Java?",
    "When should I use a HashMap instead of an ArrayList?",
    "What's the difference between let, const and var?",
    "How do I make an HTTP GET request in Python?",
    "How do I reverse a list in place in Python?",
    "what does 'segmentation fault' mean in C",
    "How do I write a Dockerfile for a small Flask app?",
    "Explain what a REST API is, with an example request.",
    "How can I format a date as YYYY-MM-DD in JavaScript?",
    "How do I sort a dictionary by its values in Python?",
    "What is the difference between == and is in Python?",
    "How do I rename a branch in git?",
    "What's a good way to structure a small Python project?",
    "How do I read a file line by line in {lang}?",
    "How do I handle errors in {lang}?",
    "What is recursion? Show an example in {lang}.",
    "Explain classes and objects in {lang} with a simple example.",
    "How do I write a for loop in {lang}?",
    "What's the {lang} equivalent of a Python dictionary?",
    "How do I convert a string to an integer in {lang}?",
    "How do I get the current date and time in {lang}?",
    "how to split a string by commas in {lang}",
    "How do I sort an array of objects by a field in {lang}?",
    "Why is my {lang} loop running forever?",
    "What are the most common mistakes beginners make in {lang}?",
    "How do I add {n} days to a date in {lang}?",
    "How do I merge two lists in {lang}?",
]


def _code_question(rng: random.Random) -> Record:
    q = rng.choice(_TOOL_QUESTIONS)
    lang = pick_weighted(rng, [(x, w) for x, w in LANGS])
    q = q.format(lang=lang, n=rng.randint(3, 20), port=rng.choice([80, 443, 3000, 5000, 8000, 8080, 5432]))
    if rng.random() < 0.15:
        q = q.lower()
    return make_record("code", q, kind="question")


_CODE_KINDS: list[tuple[Callable[[random.Random], Record], int]] = [
    (_code_write, 22),
    (_code_complete, 8),
    (_code_stdlib, 12),
    (_code_convert, 8),
    (_code_annotate, 5),
    (_code_explain, 5),
    (_code_output, 12),
    (_code_bugfix, 7),
    (_code_sql, 8),
    (_code_shell, 5),
    (_code_web, 5),
    (_code_regex, 3),
    (_code_question, 5),
]


def gen_code(rng: random.Random) -> Record:
    return pick_weighted(rng, _CODE_KINDS)(rng)
