"""Code prompts: write, complete, convert, explain, fix or predict small programs in many languages. Part of the
pool phrases public standard-library functions (name, signature, first docstring sentence), so it depends on the
Python version; golds only for "what does this print", computed by plain Python that mirrors the snippet.
Words, snippets and templates: banks/code.json.
"""

from __future__ import annotations

import importlib
import inspect
import random
import re

from .fill import bank, draw, fill, fill_each, later
from .phrasing import NAMES, Record, attach_text, cap_first, compose, make_record, one_of, phrase_ask, pick_weighted

C = bank("code")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.capitalize() for w in rest)


def _pascal(name: str) -> str:
    return "".join(w.capitalize() for w in name.split("_"))


def _lang_name(lang: str, name: str) -> str:
    if lang in ("Python", "C", "C++", "Rust", "Ruby", "PHP"):
        return name
    return _pascal(name) if lang in ("Go", "C#") else _camel(name)


def _fenced(fence: str, code: str) -> str:
    return f"```{fence}\n{code}\n```"


def _code_extras(rng: random.Random, lang: str, k_max: int = 2) -> list[str]:
    pool = C["extras_any"] + (C["extras_python"] if lang == "Python" else [])
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
    name, params, desc = rng.choice(C["functions"])
    lang = pick_weighted(rng, C["langs"])
    fname = _lang_name(lang, name)
    entry = rng.choice(C["write"])
    p = compose(rng, entry, _code_extras(rng, lang), lang=lang, desc=desc, fname=fname, params=params,
                sig=f"{fname}({params})" if lang == "Python" else fname, base=_desc_base(desc),
                other=lambda: rng.choice([x for x, _ in C["langs"] if x != lang]))
    return make_record("code", p, kind="write_fn")


def _code_complete(rng: random.Random) -> Record:
    name, params, desc = rng.choice(C["functions"])
    lang = pick_weighted(rng, C["complete_langs"])
    ps = [p.strip() for p in params.split(",")]
    sentence = cap_first(_desc_base(desc)) + "."
    stub = C["stubs"][lang]

    def docstring() -> str:
        doc = C["docstrings"][0] if rng.random() < 0.5 else C["docstrings"][1]
        return fill(doc, sentence=sentence, arg_lines="".join(f"        {p}: ...\n" for p in ps))

    args = ", ".join(fill(stub.get("arg", "{p}"), p=p, camel=_camel(p)) for p in ps)
    body = fill(stub["stub"], name=name, params=params, desc=desc, sentence3=cap_first(desc) + ".", args=args,
                camel_name=_camel(name), go_name=_pascal(name), doc=docstring, tail=later(rng, C["stub_tails"]))
    if rng.random() < 0.6:
        body = _fenced(stub["fence"], body)
    instr = compose(rng, C["complete"], lambda: _code_extras(rng, lang, 1), lang=lang)
    return make_record("code", attach_text(rng, instr, body, multiline=True), kind="complete")


# --- stdlib introspection: public functions with a clean one-sentence docstring

_STDLIB_CACHE: list[tuple[str, str, str, str]] | None = None


def stdlib_functions() -> list[tuple[str, str, str, str]]:
    """(module, name, signature, first docstring sentence without the final period), sorted; cached."""
    global _STDLIB_CACHE
    if _STDLIB_CACHE is not None:
        return _STDLIB_CACHE
    skip, bad_words, verbs = set(C["stdlib_skip"]), tuple(C["stdlib_bad_words"]), C["stdlib_verbs"]
    out: dict[tuple[str, str], tuple[str, str, str, str]] = {}
    for modname in C["stdlib_modules"]:
        try:
            mod = importlib.import_module(modname)
        except Exception:  # module missing in this Python (e.g. uu was removed in 3.13)
            continue
        for name in sorted(dir(mod)):
            if name.startswith("_") or not name.isidentifier() or name in skip:
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
            if any(b in low for b in bad_words) or any(ch in first for ch in '`>[]*="') or name in low.split():
                continue
            if first.split()[0] not in verbs:
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
    third = C["stdlib_verbs"][verb] + (" " + rest if rest else "")
    shown = mod.replace("posixpath", "os.path").replace("genericpath", "os.path")
    entry = rng.choice(C["stdlib"])
    extras = _code_extras(rng, "Python", 1)

    def stub() -> str:
        body = fill(C["stdlib_stub"], name=name, sig=sig, doc=doc)
        return f"```python\n{body}```" if rng.random() < 0.5 else body

    p = compose(rng, entry, extras, name=name, sig=sig, doc=doc, doc_lc=doc[:1].lower() + doc[1:], third=third,
                base=_desc_base(third), shown=shown, stub=stub, lang=later(rng, C["stdlib_langs"]))
    return make_record("code", p, kind="stdlib")


# --- tiny programs: converting, annotating, refactoring


def _py_snippet(rng: random.Random) -> str:
    """A short plain Python snippet (for conversion / annotation / explanation requests)."""
    v, n, k = rng.choice(C["vars"]), rng.randint(3, 30), rng.randint(2, 9)
    nums = [rng.randint(1, 60) for _ in range(rng.randint(4, 6))]
    fn = rng.choice(C["function_names"])
    return fill(rng.choice(C["py_snippets"]), v=v, n=n, k=k, k5=k * 5, top=min(k, 3), nums=nums, fn=fn,
                w=later(rng, C["words"]))


def _js_snippet(rng: random.Random) -> str:
    n, k = rng.randint(3, 20), rng.randint(2, 9)
    nums = [rng.randint(1, 50) for _ in range(rng.randint(3, 6))]
    word = later(rng, C["words"])
    return fill(rng.choice(C["js_snippets"]), n=n, k=k, nums=nums, w1=word, w2=word, w3=word)


def _code_convert(rng: random.Random) -> Record:
    if rng.random() < 0.78:
        src, body, dst = "Python", _py_snippet(rng), pick_weighted(rng, C["convert_targets"])
    else:
        src, body, dst = "JavaScript", _js_snippet(rng), rng.choice(C["js_targets"])
    if rng.random() < 0.5:
        body = _fenced(src.lower(), body)
    instr = compose(rng, C["convert"], lambda: rng.sample(C["convert_notes"], pick_weighted(rng, [(0, 3), (1, 2)])),
                    src=src, dst=dst)
    return make_record("code", attach_text(rng, instr, body, multiline=True), kind="convert")


def _code_annotate(rng: random.Random) -> Record:
    body = _py_snippet(rng)
    if "def " not in body:
        body = _py_snippet(rng)
    core = rng.choice(C["annotate"])
    if rng.random() < 0.5:
        body = _fenced("python", body)
    return make_record("code", attach_text(rng, phrase_ask(rng, core), body, multiline=True), kind="annotate")


def _code_explain(rng: random.Random) -> Record:
    body = _py_snippet(rng) if rng.random() < 0.7 else _js_snippet(rng)
    core = rng.choice(C["explain"])
    return make_record("code", attach_text(rng, phrase_ask(rng, core), body, multiline=True), kind="explain")


# --- "What does this print?": one snippet maker a row, each with a gold computed by mirroring it in Python


def _py_arith(rng, a, b, c, **_):
    op = rng.choice(["+", "-", "*"])
    val = {"+": a + b, "-": a - b, "*": a * b}[op]
    return f"a = {a}\nb = {b}\nprint((a {op} b) * {c})", str(val * c)


def _py_divmod(rng, a, b, **_):
    return f"x = {a + 20}\nprint(x // {b}, x % {b})", f"{(a + 20) // b} {(a + 20) % b}"


def _py_range_sum(rng, **_):
    lo, hi = rng.randint(0, 5), rng.randint(6, 15)
    return f"total = 0\nfor i in range({lo}, {hi}):\n    total += i\nprint(total)", str(sum(range(lo, hi)))


def _py_string_op(rng, w, **_):
    expr, out = rng.choice([
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
    ])
    return f'word = "{w}"\nprint({expr})', out


def _py_list_op(rng, nums, v, **_):
    expr, out = rng.choice([
        ("sum({v})", str(sum(nums))),
        ("max({v}) - min({v})", str(max(nums) - min(nums))),
        ("sorted({v})", repr(sorted(nums))),
        ("sorted({v}, reverse=True)", repr(sorted(nums, reverse=True))),
        ("{v}[::2]", repr(nums[::2])),
        ("{v}[-2:]", repr(nums[-2:])),
        ("len({v})", str(len(nums))),
        ("{v}[1] + {v}[-1]", str(nums[1] + nums[-1])),
    ])
    return f"{v} = {nums}\nprint({expr.format(v=v)})", out


def _py_comprehension(rng, **_):
    n, k = rng.randint(3, 7), rng.randint(1, 4)
    return f"print([i * {k} for i in range({n})])", repr([i * k for i in range(n)])


def _py_halvings(rng, **_):
    n = rng.randint(10, 200)
    steps, m = 0, n
    while m > 1:
        m //= 2
        steps += 1
    return f"n = {n}\ncount = 0\nwhile n > 1:\n    n //= 2\n    count += 1\nprint(count)", str(steps)


def _py_dict_get(rng, **_):
    keys = rng.sample(C["fruits"], 3)
    stock = {key: rng.randint(1, 9) for key in keys}
    k0, dflt = rng.choice(keys), rng.randint(0, 5)
    src = "stock = {" + ", ".join(f'"{k}": {x}' for k, x in stock.items()) + "}"
    return f'{src}\nprint(stock["{k0}"] + stock.get("melon", {dflt}))', str(stock[k0] + dflt)


def _py_fstring(rng, a, **_):
    name = rng.choice(NAMES)
    return (f'name = "{name}"\nage = {a}\nprint(f"{{name}} will be {{age + 1}} next year")',
            f"{name} will be {a + 1} next year")


def _py_join(rng, **_):
    words, sep = rng.sample(C["words"], 3), rng.choice(C["separators"])
    return f"words = {words!r}\nprint({sep!r}.join(words))", sep.join(words)


def _py_call(rng, b, **_):
    k, m = rng.randint(2, 9), rng.randint(1, 5)
    return f"def f(x):\n    return x * {k} + {m}\n\nprint(f({b}))", str(b * k + m)


def _py_parity(rng, **_):
    x = rng.randint(1, 99)
    return f'x = {x}\nif x % 2 == 0:\n    print("even")\nelse:\n    print("odd")', "even" if x % 2 == 0 else "odd"


def _py_multiples(rng, **_):
    n, k = rng.randint(3, 5), rng.randint(2, 7)
    return f"for i in range(1, {n + 1}):\n    print(i * {k})", "\n".join(str(i * k) for i in range(1, n + 1))


def _py_split(rng, **_):
    s = ",".join(rng.sample(C["words"], 3))
    return f's = "{s}"\nprint(s.split(","))', repr(s.split(","))


def _py_set(rng, **_):
    xs = [rng.randint(1, 6) for _ in range(rng.randint(5, 8))]
    return f"print(len(set({xs})))", str(len(set(xs)))


def _py_longest(rng, **_):
    words = rng.sample(C["words"] + C["short_words"], 4)
    return f"words = {words!r}\nprint(max(words, key=len))", max(words, key=len)


def _py_enumerate(rng, **_):
    words = rng.sample(C["colours"], rng.randint(2, 3))
    return f"for i, w in enumerate({words!r}):\n    print(i, w)", "\n".join(f"{i} {x}" for i, x in enumerate(words))


def _py_repeat(rng, **_):
    s, n = rng.choice(C["repeats"]), rng.randint(2, 5)
    return f'print("{s}" * {n})', s * n


def _py_zip(rng, **_):
    xs, ys = [rng.randint(1, 9) for _ in range(3)], rng.sample(C["letters"], 3)
    return f"print(list(zip({xs}, {ys!r})))", repr(list(zip(xs, ys)))


def _py_factorial(rng, **_):
    n = rng.randint(3, 6)
    total = 1
    for i in range(1, n + 1):
        total *= i
    return f"result = 1\nfor i in range(1, {n + 1}):\n    result *= i\nprint(result)", str(total)


_PY_PRINTS = [
    _py_arith, _py_divmod, _py_range_sum, _py_string_op, _py_list_op, _py_comprehension, _py_halvings, _py_dict_get,
    _py_fstring, _py_join, _py_call, _py_parity, _py_multiples, _py_split, _py_set, _py_longest, _py_enumerate,
    _py_repeat, _py_zip, _py_factorial,
]


def _output_python(rng: random.Random) -> tuple[str, str]:
    make = rng.choice(_PY_PRINTS)
    a, b, c = rng.randint(2, 40), rng.randint(2, 12), rng.randint(1, 30)
    w = rng.choice(C["words"])
    nums = [rng.randint(1, 50) for _ in range(rng.randint(4, 6))]
    return make(rng, a=a, b=b, c=c, w=w, nums=nums, v=rng.choice(C["vars"]))


def _js_map(rng, nums, k, **_):
    return f"const arr = {nums};\nconsole.log(arr.map(x => x * {k}).join(','));", ",".join(str(x * k) for x in nums)


def _js_length(rng, w, **_):
    return f'let s = "{w}";\nconsole.log(s.length);', str(len(w))


def _js_concat(rng, **_):
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    return f'console.log({a} + "{b}");', f"{a}{b}"


def _js_loop(rng, **_):
    n = rng.randint(3, 12)
    return (f"let total = 0;\nfor (let i = 0; i < {n}; i++) {{\n  total += i;\n}}\nconsole.log(total);",
            str(sum(range(n))))


def _js_filter(rng, nums, **_):
    return (f"const xs = {nums};\nconsole.log(xs.filter(x => x % 2 === 0).length);",
            str(sum(1 for x in nums if x % 2 == 0)))


def _js_max(rng, nums, **_):
    return f"console.log(Math.max({', '.join(map(str, nums))}));", str(max(nums))


def _js_upper(rng, w, **_):
    return f'console.log("{w}".toUpperCase());', w.upper()


def _js_typeof(rng, **_):
    val, typ = rng.choice([("42", "number"), ("'hi'", "string"), ("true", "boolean"), ("[]", "object"),
                           ("null", "object"), ("undefined", "undefined"), ("{}", "object"), ("3.5", "number")])
    return f"console.log(typeof {val});", typ


def _js_modulo(rng, **_):
    a, b = rng.randint(10, 60), rng.randint(2, 9)
    return f"console.log({a} % {b});", str(a % b)


_JS_PRINTS = [_js_map, _js_length, _js_concat, _js_loop, _js_filter, _js_max, _js_upper, _js_typeof, _js_modulo]


def _output_js(rng: random.Random) -> tuple[str, str]:
    make = rng.choice(_JS_PRINTS)
    nums = [rng.randint(1, 30) for _ in range(rng.randint(3, 5))]
    k = rng.randint(2, 6)
    return make(rng, nums=nums, k=k, w=rng.choice(C["words"]))


def _output_c(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(7, 90), rng.randint(2, 9)
    op, val = rng.choice([("/", a // b), ("%", a % b), ("*", a * b), ("-", a - b)])
    return fill(C["c_print"], a=a, b=b, op=op), str(val)


def _code_output(rng: random.Random) -> Record:
    lang = pick_weighted(rng, [("Python", 7), ("JavaScript", 2), ("C", 1)])
    src, gold = {"Python": _output_python, "JavaScript": _output_js, "C": _output_c}[lang](rng)
    fence = {"Python": "python", "JavaScript": "javascript", "C": "c"}[lang]
    body = _fenced(fence, src) if rng.random() < 0.55 else src
    core = fill(rng.choice(C["output_asks"]), lang=lang)
    if rng.random() < 0.4:
        instr = phrase_ask(rng, core, noisy=False)
    else:
        instr = fill(rng.choice(C["output_questions"]), lang=lang)
        if rng.random() < 0.3:
            instr += " " + rng.choice(C["output_notes"])
    return make_record("code", attach_text(rng, instr, body, multiline=True), gold=gold, kind="output")


# --- bug fixing, SQL, shell, web, regex, tooling questions


def _code_bugfix(rng: random.Random) -> Record:
    v, n = rng.choice(C["vars"]), rng.randint(5, 50)
    bug = fill_each(rng.choice(C["bugs"]), v=v, n=n, short=sum(range(1, n)), full=sum(range(1, n + 1)),
                    sql=later(rng, C["sql_bugs"]), many=later(rng, range(2, 11)))
    body = _fenced(bug["fence"], bug["code"]) if rng.random() < 0.5 else bug["code"]
    instr = compose(rng, rng.choice(C["bugfix"]), lang=bug["lang"], goal=bug["goal"], symptom=bug["symptom"])
    return make_record("code", attach_text(rng, instr, body, multiline=True), kind="bugfix")


def _code_sql(rng: random.Random) -> Record:
    table, cols, num, cat, date, noun = rng.choice(C["sql_tables"])
    k = rng.randint(3, 20)
    intents, above, year = [], None, None
    if num:
        above = rng.choice([10, 50, 100, 1000, 5000])
        intents += C["sql_number_intents"]
    intents += C["sql_intents"]
    if date:
        year = rng.randint(2015, 2024)
        intents += C["sql_date_intents"]
    intent = fill(rng.choice(intents), table=table, cols=cols, num=num, cat=cat, date=date, noun=noun, k=k,
                  above=above, year=year)
    dialect = pick_weighted(rng, C["dialects"])
    p = compose(rng, rng.choice(C["sql"]), intent=intent, dialect=dialect, table=table, cols=cols,
                schema=f"{table}({', '.join(cols)})", base=_desc_base(intent), rest=intent.split(" ", 1)[1])
    return make_record("code", p, kind="sql")


def _code_shell(rng: random.Random) -> Record:
    e1, e2 = rng.sample(C["extensions"], 2)
    n, d = rng.choice([1, 5, 10, 50, 100, 500]), rng.choice([1, 3, 7, 30, 90])
    counts = draw(rng, {"big": range(5, 21), "top": range(5, 31), "every": range(5, 61), "last": range(10, 101)})
    task = fill(rng.choice(C["shell_tasks"]), e1=e1, e2=e2, n=n, d=d, **counts)
    shell = pick_weighted(rng, C["shells"])
    return make_record("code", compose(rng, rng.choice(C["shell"]), shell=shell, task=task), kind="shell")


def _code_web(rng: random.Random) -> Record:
    c1, c2 = rng.sample(C["css_colours"], 2)
    pages = rng.sample(C["sections"], rng.randint(3, 5))
    k, biz, things = rng.randint(2, 4), rng.choice(C["businesses"]), rng.choice(C["table_things"])
    task = fill(rng.choice(C["web_tasks"]), c1=c1, c2=c2, pages=pages, k=k, biz=biz, things=things)
    tech = pick_weighted(rng, C["web_techs"])
    return make_record("code", compose(rng, rng.choice(C["web"]), tech=tech, task=task), kind="web")


def _code_regex(rng: random.Random) -> Record:
    lang, thing = rng.choice(C["regex_langs"]), rng.choice(C["regex_things"])
    return make_record("code", compose(rng, rng.choice(C["regex"]), lang=lang, thing=thing), kind="regex")


def _code_question(rng: random.Random) -> Record:
    q = rng.choice(C["questions"])
    lang = pick_weighted(rng, C["langs"])
    q = fill(q, lang=lang, **draw(rng, {"n": range(3, 21), "port": [80, 443, 3000, 5000, 8000, 8080, 5432]}))
    if rng.random() < 0.15:
        q = q.lower()
    return make_record("code", q, kind="question")


gen_code = one_of({
    _code_write: 22, _code_complete: 8, _code_stdlib: 12, _code_convert: 8, _code_annotate: 5, _code_explain: 5,
    _code_output: 12, _code_bugfix: 7, _code_sql: 8, _code_shell: 5, _code_web: 5, _code_regex: 3,
    _code_question: 5,
})
