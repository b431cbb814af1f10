"""The public decoding API: generate() returns texts and stats, stream() yields one event per forward."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch

from .decoding import strategies
from .decoding.control import DecodeControl
from .decoding.spec import DecodeSpec, Step
from .decoding.verified import Forward, VerifiedConfig
from .runtime.prepare import prepared
from .runtime.runtime import Runtime

Message = dict[str, str]
Prompts = str | Sequence[str] | Sequence[Message] | Sequence[Sequence[Message]]


@dataclass
class StreamEvent:
    """What one forward committed, per sample (lists are indexed by prompt)."""

    forward: int  # index of this forward, from 0
    elapsed: float  # seconds since generation started
    threshold: float  # the threshold this forward used
    token_ids: list[list[int]]  # tokens committed by this forward
    confidences: list[list[float]]  # their confidences (the first of a step is the AR prediction)
    texts: list[str]  # text those tokens added (held back while a multi-byte character is incomplete)
    done: list[bool]  # the sample has finished
    proposed_ids: list[list[int]]  # every slot's prediction in this forward (sliding: slot j = j tokens ahead)
    proposed_confidences: list[list[float]]  # and their confidences; token_ids is an accepted run of these
    accepted_from: list[int]  # slot of proposed_ids where token_ids starts (sliding: 0; block: the first unfilled)
    drafts: list[list[int]] = field(default_factory=list)  # verified: the drafts this forward checked
    matched: list[int] = field(default_factory=list)  # verified: the first matched[i] of token_ids were drafts,
    # the token after them (if any) is the bonus, the model's own prediction after the last matched draft
    draft_source: list[str] = field(default_factory=list)  # verified: "mask" (the mask slots) or "lookup" (the text)
    # where a scheduler ran the forward (mars_core.scheduler): its own seconds (the caller's wait also counts other
    # decodes' forwards), when it began (time.perf_counter) and how many requests' samples it fed; None, None and 1
    # where the caller's own call ran it
    seconds: float | None = None
    began: float | None = None
    shared: int = 1


@dataclass
class GenerationResult:
    texts: list[str]  # decoded continuations, special tokens skipped, cut at a stop string
    token_ids: list[list[int]]  # committed tokens (a stop token included)
    forwards: int  # model forwards run (prefill included)
    generated_tokens: int  # over all samples
    seconds: float
    sample_forwards: list[int] = field(default_factory=list)  # forwards in which each sample committed tokens

    @property
    def tokens_per_forward(self) -> float:
        """Committed tokens per forward, counting for each sample the forwards in which it advanced."""
        return self.generated_tokens / max(sum(self.sample_forwards), 1)

    @property
    def text(self) -> str:
        return self.texts[0]


def as_prompt_list(prompts: Prompts) -> list[str | list[Message]]:
    """A string, a list of strings, one chat (list of messages) or a list of chats -> list of prompts."""
    if isinstance(prompts, str):
        return [prompts]
    if isinstance(prompts, Sequence) and len(prompts) > 0 and isinstance(prompts[0], dict):
        return [list(prompts)]
    if isinstance(prompts, Sequence) and len(prompts) > 0:
        return list(prompts)
    raise ValueError("prompts must be a non-empty string, list of strings, chat, or list of chats")


def encode_prompt(tokenizer: Any, prompt: str | list[Message], chat: bool = True) -> list[int]:
    """Token ids of one prompt; a string becomes a user turn under the chat template when there is one."""
    if isinstance(prompt, str):
        if not prompt.strip():
            raise ValueError("empty prompt: type something to generate from")
        if not (chat and tokenizer.chat_template):
            return list(tokenizer(prompt)["input_ids"])
        prompt = [{"role": "user", "content": prompt}]
    if not isinstance(prompt, Sequence):
        raise ValueError(f"a prompt is a string or a chat, not {prompt!r}")
    if not all(isinstance(m, dict) for m in prompt):  # token ids, say
        kinds = ", ".join(sorted({type(m).__name__ for m in prompt}))
        raise ValueError("a prompt is a string or a chat (a list of {'role': ..., 'content': ...} messages), "
                         f"not a {type(prompt).__name__} of {kinds}")
    if not prompt or not any(str(m.get("content", "")).strip() for m in prompt):
        raise ValueError("empty prompt: the chat has no message with content")
    ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def stop_token_ids(model: torch.nn.Module, tokenizer: Any) -> list[int]:
    """EOS ids of the tokenizer and of the model's generation config (often the chat end token)."""
    ids = {tokenizer.eos_token_id}
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update(gen_eos if isinstance(gen_eos, list) else [gen_eos])
    return sorted(i for i in ids if i is not None)


def context_length(model: torch.nn.Module) -> int | None:
    return getattr(model.config, "max_position_embeddings", None)


def check_request(
    model: torch.nn.Module, tokenizer: Any, prompt_ids: list[list[int]], strategy: str, block_size: int,
    max_new_tokens: int, *, layout: VerifiedConfig | None = None,
) -> None:
    """Raise a clear ValueError for settings no decoder can honour (layout: verified's, None the default)."""
    entry = strategies.strategy(strategy)
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be an integer >= 1, got {block_size!r}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    if block_size > 1 and tokenizer.mask_token_id is None:
        raise ValueError(
            "MARS decoding (block_size > 1) needs a mask token, and this tokenizer has none: "
            "load the model with mars_core.load(), which picks one, or set tokenizer.mask_token"
        )
    vocab = (model.get_input_embeddings().num_embeddings if isinstance(model, torch.nn.Module)
             else getattr(getattr(model, "config", None), "vocab_size", None))  # an Engine: its config's
    if block_size > 1 and vocab is not None and not 0 <= tokenizer.mask_token_id < vocab:
        raise ValueError(
            f"the tokenizer's mask token ({tokenizer.mask_token!r}, id {tokenizer.mask_token_id}) is not in the "
            f"model's vocabulary of {vocab} tokens: resize the model's embeddings to the tokenizer "
            "(model.resize_token_embeddings(len(tokenizer))) or pick a mask token it has"
        )
    ctx = context_length(model)
    longest = max(len(p) for p in prompt_ids)
    ahead = entry.headroom(block_size, layout)  # mask slots past the answer (verified: drafts, then masks after them)
    if ctx is not None and longest + max_new_tokens + ahead > ctx:
        raise ValueError(
            f"prompt too long: {longest} prompt tokens + max_new_tokens {max_new_tokens} + {ahead} mask and draft "
            f"slots exceed the model's context of {ctx} tokens; shorten the prompt or lower max_new_tokens"
        )


@dataclass
class DecodeOptions:
    """How to decode, shared by generate() and stream(); each field can also be given to them as a keyword."""

    strategy: str = "sliding"  # "ar", "sliding" (MARS, one sequence at a time), "block" (batches) or "verified"
    block_size: int = 4  # B: the most tokens one forward may commit (the adapter's training block size)
    max_new_tokens: int = 256  # per prompt
    # the four live settings, copied into a DecodeControl at the start; or give `control` instead, not both
    threshold: float | None = None  # None: the strategy's default (decoding/strategies.py); 1 = one token per forward
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0  # nucleus mass when sampling
    confidence: str = "prob"  # "prob", "entropy" or "margin"
    seed: int | None = None  # seeds sampling
    stop_strings: Sequence[str] = ()  # the text is cut before the first of these
    chat: bool = True  # a string prompt becomes a user turn under the chat template
    control: DecodeControl | None = None  # the live settings (changed while it runs, stop()), instead of the four
    layout: VerifiedConfig = field(default_factory=VerifiedConfig)  # verified: which drafts and groups are fed
    record: Callable[[Forward], None] | None = None  # verified: called before each event with what its forward fed
    # and decided (a decoding.verified.Forward: the tree, the exact mask, the verdicts, the next drafts and groups)
    # how forwards run on this machine; None: prepared(model), prepare()'s runtime made once per model and process, so
    # verified is one-token decoding bit for bit wherever its width check passed; Runtime(): plain torch, no promise
    runtime: Runtime | None = None

    def with_settings(self, settings: dict[str, Any]) -> DecodeOptions:
        """A copy with some fields replaced; an unknown name is a TypeError that lists the known ones."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise TypeError(f"unknown decoding option(s) {unknown}; known: {sorted(known)}")
        return replace(self, **settings)


LIVE = ("threshold", "temperature", "top_p", "confidence")  # the settings a DecodeControl carries


def live_control(options: DecodeOptions) -> DecodeControl:
    """The live settings: the caller's control, or one made from the four options (never both: which would win?)."""
    if options.control is not None:
        given = [name for name in LIVE if getattr(options, name) != getattr(DecodeOptions, name)]
        if given:
            raise ValueError(f"set {', '.join(given)} on the control, not beside it: a control carries the live "
                             f"settings ({', '.join(LIVE)})")
        options.control.snapshot()  # validates
        return options.control
    threshold = options.threshold
    if threshold is None:  # the strategy's default (an unknown strategy is check_request's to name)
        entry = strategies.STRATEGIES.get(options.strategy)
        threshold = entry.threshold if entry else 1.0
    return DecodeControl(threshold=threshold, temperature=options.temperature, top_p=options.top_p,
                         confidence=options.confidence)


def decode_spec(model: torch.nn.Module, tokenizer: Any, options: DecodeOptions, block_size: int) -> DecodeSpec:
    """What a decode of these options is asked (its limits, stop and pad ids, the runtime its forwards run on)."""
    generator = None
    if options.seed is not None:
        generator = torch.Generator(model.device).manual_seed(options.seed)
    stops = stop_token_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stops[0]
    return DecodeSpec(
        block_size=block_size,
        max_new_tokens=options.max_new_tokens,
        stop_ids=torch.tensor(stops, dtype=torch.long, device=model.device),
        pad_id=pad,
        mask_id=tokenizer.mask_token_id,
        generator=generator,
        runtime=options.runtime or prepared(model),
    )


def _start(model, tokenizer, prompts: Prompts, options: DecodeOptions) -> tuple[Iterator[Step], list[list[int]]]:
    """Validate, encode, and start the chosen decoder (a generator of Steps)."""
    control = live_control(options)  # the settings first: their message names what is wrong
    prompt_ids = [encode_prompt(tokenizer, p, options.chat) for p in as_prompt_list(prompts)]
    block_size = strategies.strategy(options.strategy).block_size(options.block_size)
    check_request(model, tokenizer, prompt_ids, options.strategy, block_size, options.max_new_tokens,
                  layout=options.layout)
    spec = decode_spec(model, tokenizer, options, block_size)
    steps = strategies.start(options.strategy, model, prompt_ids, spec, control, layout=options.layout,
                             record=options.record)
    return steps, prompt_ids


class TextTracker:
    """Incremental detokenisation per sample, and the stop-string check that needs the text. With stop strings, the
    last len(longest) - 1 characters are held back until the sample ends, since they may begin a stop string that
    the next tokens complete (text once sent cannot be taken back)."""

    def __init__(self, tokenizer: Any, n: int, stop_strings: Sequence[str] = ()):
        stop_strings = [stop_strings] if isinstance(stop_strings, str) else stop_strings  # one string: one stop
        self.tokenizer, self.stop_strings = tokenizer, [s for s in stop_strings if s]
        self.hold = max((len(s) for s in self.stop_strings), default=1) - 1
        self.ids: list[list[int]] = [[] for _ in range(n)]
        self.texts = [""] * n  # the text so far, cut at a stop string
        self.sent = [0] * n  # how much of it update() has returned
        self.cut = [False] * n

    def update(self, i: int, new_ids: list[int], done: bool) -> str:
        """Add sample i's new tokens; return the text they add (held back while a character is incomplete)."""
        if self.cut[i] or not (new_ids or done):
            return ""
        self.ids[i].extend(new_ids)
        text = self.tokenizer.decode(self.ids[i], skip_special_tokens=True)
        if text.endswith("\ufffd") and not done:
            return ""
        hits = [text.find(s, max(len(self.texts[i]) - len(s), 0)) for s in self.stop_strings]
        hits = [h for h in hits if h >= 0]
        if hits:
            text, self.cut[i] = text[: min(hits)], True
        self.texts[i] = text
        ready = len(text) if done or self.cut[i] else max(len(text) - self.hold, self.sent[i])
        added, self.sent[i] = text[self.sent[i] : ready], ready
        return added


def stream(
    model: torch.nn.Module, tokenizer: Any, prompts: Prompts, options: DecodeOptions | None = None, **settings: Any
) -> Iterator[StreamEvent]:
    """Yield a StreamEvent per forward. Settings (DecodeOptions, or its fields as keywords) are read from the
    control at every forward, so a change made while streaming (threshold, temperature, stop()) acts from the
    next forward on."""
    options = (options or DecodeOptions()).with_settings(settings)
    steps, prompt_ids = _start(model, tokenizer, prompts, options)
    tracker = TextTracker(tokenizer, len(prompt_ids), options.stop_strings)
    t0, stop = time.perf_counter(), None
    for index in range(10**12):
        try:
            step = steps.send(stop) if index else next(steps)
        except StopIteration:
            return
        event = event_of(step, index, time.perf_counter() - t0, tracker)
        cut = [c and not d for c, d in zip(tracker.cut, step.done)]
        stop = torch.tensor(cut) if any(cut) else None
        yield event


def event_of(step: Step, forward: int, elapsed: float, tracker: TextTracker, rows: list[int] | None = None,
             **extra: Any) -> StreamEvent:
    """The StreamEvent of a Step for its samples `rows` (None: all; the tracker's samples are their places in rows);
    extra: fields set by whoever ran the forward (threshold, seconds, began, shared)."""
    pick = (lambda t: t) if rows is None else (lambda t: t[rows])
    tokens, conf = pick(step.tokens).tolist(), pick(step.confidence).tolist()
    starts, ends = pick(step.start).tolist(), pick(step.end).tolist()
    done = step.done if rows is None else [step.done[i] for i in rows]
    drafts, matched, sources = [], [], []
    if step.drafts is not None:
        drafted = pick(step.drafted).tolist()
        drafts = [row[:k] for row, k in zip(pick(step.drafts).tolist(), drafted)]
        matched = pick(step.matched).tolist()
        sources = ["lookup" if x else "mask" for x in pick(step.looked_up).tolist()]
    ids = [row[s:e] for row, s, e in zip(tokens, starts, ends)]
    texts = [tracker.update(i, row, d) for i, (row, d) in enumerate(zip(ids, done))]
    return StreamEvent(**{
        "forward": forward, "elapsed": elapsed, "threshold": step.threshold, "token_ids": ids,
        "confidences": [row[s:e] for row, s, e in zip(conf, starts, ends)], "texts": texts,
        "done": [d or c for d, c in zip(done, tracker.cut)],
        "proposed_ids": tokens, "proposed_confidences": conf, "accepted_from": starts,
        "drafts": drafts, "matched": matched, "draft_source": sources, **extra})


def generate(
    model: torch.nn.Module, tokenizer: Any, prompts: Prompts, options: DecodeOptions | None = None, **settings: Any
) -> GenerationResult:
    """Decode prompts with one of the strategies ("ar", "sliding", "block", "verified"); return texts, ids, stats.
    Settings: a DecodeOptions, or its fields as keywords (generate(model, tok, "Hi", strategy="verified"))."""
    t0 = time.perf_counter()
    options = (options or DecodeOptions()).with_settings(settings)
    if options.stop_strings:  # the stop-string check needs the text, which the streaming path keeps
        events = list(stream(model, tokenizer, prompts, options))
        n = len(events[0].token_ids) if events else len(as_prompt_list(prompts))
        ids = [[t for e in events for t in e.token_ids[i]] for i in range(n)]
        texts = ["".join(e.texts[i] for e in events) for i in range(n)]
        per_sample = [sum(1 for e in events if e.token_ids[i]) for i in range(n)]
        return GenerationResult(
            texts, ids, len(events), sum(map(len, ids)), time.perf_counter() - t0, per_sample
        )
    steps, prompt_ids = _start(model, tokenizer, prompts, options)
    forwards, active, last = 0, None, None
    for step in steps:  # the fast path: no per-sample Python work per forward
        forwards += 1
        advanced = (step.end > step.start).long()
        active = advanced if active is None else active + advanced
        last = step
    if last is None:  # stopped before the first forward
        return GenerationResult([""] * len(prompt_ids), [[] for _ in prompt_ids], 0, 0, time.perf_counter() - t0,
                                [0] * len(prompt_ids))
    lengths = last.lengths.tolist()
    ids = [row[:n] for row, n in zip(last.out.tolist(), lengths)]
    texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
    return GenerationResult(texts, ids, forwards, sum(lengths), time.perf_counter() - t0, active.tolist())
