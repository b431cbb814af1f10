"""Chat data: tokenize conversations with the chat template and label only the assistant turns."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:  # datasets is imported where a dataset is built: reading JSONL (prompts, the app) needs none
    import datasets

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100
# Tokens that close a turn in common chat templates; the template glue after them (e.g. "\n") is not labelled.
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>")

Message = Mapping[str, Any]
ChatSource = "str | Path | datasets.Dataset | Sequence[Mapping[str, Any]]"


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSONL file (one JSON object a line, blank lines skipped) into a list of dicts."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from e
    return rows


def _chat_ids(tokenizer, messages: Sequence[Message], add_generation_prompt: bool) -> list[int]:
    """Token ids of `messages` rendered by the chat template (transformers 5 returns a BatchEncoding)."""
    out = tokenizer.apply_chat_template(
        list(messages), tokenize=True, add_generation_prompt=add_generation_prompt
    )
    ids = out["input_ids"] if isinstance(out, Mapping) or hasattr(out, "keys") else out
    return list(ids)


def end_of_turn_ids(tokenizer) -> set[int]:
    """Ids that end an assistant turn: the eos token plus the known end-of-turn specials in the vocabulary."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    # One lookup per known token, checked by the reverse lookup (an unknown token maps to unk or None):
    # get_vocab() builds the whole vocabulary as a dict, which took most of a chat's tokenizing time.
    for token in END_OF_TURN_TOKENS:
        token_id = tokenizer.convert_tokens_to_ids(token)
        if token_id is not None and token != tokenizer.pad_token and tokenizer.convert_ids_to_tokens(token_id) == token:
            ids.add(token_id)
    return ids


def _trim_after_end_of_turn(span: list[int], stop_ids: set[int]) -> list[int]:
    """Keep the response up to and including its first end-of-turn token (the model must learn to stop)."""
    for j, t in enumerate(span):
        if t in stop_ids:
            return span[: j + 1]
    return span


def response_spans(tokenizer, messages: Sequence[Message]) -> tuple[list[int], list[tuple[int, int]]]:
    """Token ids of the whole conversation and the [start, end) spans of each assistant response.

    For assistant turn k, the prompt is messages[:k] rendered with the generation prompt and the
    response is what rendering messages[:k+1] adds after it. Both must be token prefixes of the full
    conversation, otherwise the template is not prefix-stable and a ValueError is raised.
    """
    ids = _chat_ids(tokenizer, messages, add_generation_prompt=False)
    stop_ids = end_of_turn_ids(tokenizer)
    spans = []
    for k, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        prompt = _chat_ids(tokenizer, messages[:k], add_generation_prompt=True) if k else []
        upto = _chat_ids(tokenizer, messages[: k + 1], add_generation_prompt=False)
        if ids[: len(prompt)] != prompt or ids[: len(upto)] != upto or upto[: len(prompt)] != prompt:
            raise ValueError(f"chat template is not prefix-stable at assistant turn {k}")
        response = _trim_after_end_of_turn(upto[len(prompt):], stop_ids)
        spans.append((len(prompt), len(prompt) + len(response)))
    return ids, spans


def tokenize_chat(tokenizer, messages: Sequence[Message], max_length: int) -> dict[str, list[int]]:
    """input_ids and unshifted labels (token id on assistant responses, -100 elsewhere), cut to max_length."""
    ids, spans = response_spans(tokenizer, messages)
    labels = [IGNORE_INDEX] * len(ids)
    for start, end in spans:
        labels[start:end] = ids[start:end]
    return {"input_ids": ids[:max_length], "labels": labels[:max_length]}


def has_target(labels: Sequence[int]) -> bool:
    """True when some label can be predicted: position 0 never is (its prediction would come from position -1)."""
    return any(y != IGNORE_INDEX for y in labels[1:])


def _as_dataset(source: ChatSource) -> datasets.Dataset:
    """A datasets.Dataset from a JSONL path, a Dataset, or a list of {"messages": [...]} dicts."""
    import datasets

    if isinstance(source, datasets.Dataset):
        return source
    if isinstance(source, (str, Path)):
        return datasets.Dataset.from_list(read_jsonl(source))
    return datasets.Dataset.from_list([dict(r) for r in source])


def encode_chat(tokenizer, messages: Sequence[Message], max_length: int) -> dict[str, list[int]]:
    """tokenize_chat, or empty lists for a conversation left without a label (or whose template is not
    prefix-stable: logged), which the callers drop."""
    try:
        out = tokenize_chat(tokenizer, messages, max_length)
    except ValueError as e:
        logger.warning("dropping a conversation: %s", e)
        return {"input_ids": [], "labels": []}
    return out if has_target(out["labels"]) else {"input_ids": [], "labels": []}


def tokenized_chats(examples: Sequence[Mapping[str, Any]], tokenizer, max_length: int) -> list[dict[str, list[int]]]:
    """The examples ({"messages": [...]}) tokenized as load_chat_dataset does, as a plain list (what the Trainer takes
    as a dataset; no `datasets` needed): for a few hundred examples, as a live run trains on."""
    rows = [encode_chat(tokenizer, example["messages"], max_length) for example in examples]
    kept = [row for row in rows if row["input_ids"]]
    if not kept:
        raise ValueError("no conversation has an assistant token to learn from (check roles and max_length)")
    return kept


def load_chat_dataset(source: ChatSource, tokenizer, max_length: int) -> datasets.Dataset:
    """Tokenized chat dataset with columns input_ids and labels; examples left without a label are dropped."""
    raw = _as_dataset(source)
    if "messages" not in raw.column_names:
        raise ValueError(f"chat data needs a 'messages' column, found {raw.column_names}")

    def encode(example: dict[str, Any]) -> dict[str, list[int]]:
        return encode_chat(tokenizer, example["messages"], max_length)

    encoded = raw.map(encode, remove_columns=raw.column_names, desc="tokenizing chats")
    kept = encoded.filter(lambda ex: len(ex["input_ids"]) > 0, desc="dropping unlabelled chats")
    if len(kept) < len(encoded):
        logger.warning("dropped %d of %d conversations with no assistant token left",
                       len(encoded) - len(kept), len(encoded))
    if len(kept) == 0:
        raise ValueError("no conversation has an assistant token to learn from (check roles and max_length)")
    return kept


def pad_right(rows: Iterable[Sequence[int]], value: int, length: int) -> torch.Tensor:
    """Stack int sequences into a LongTensor [b, length], right-padded with `value`."""
    rows = list(rows)
    out = torch.full((len(rows), length), value, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.as_tensor(r, dtype=torch.long)
    return out


class ChatCollator:
    """Right-pads input_ids (pad id) and labels (-100) to the longest example of the batch."""

    def __init__(self, pad_token_id: int, pad_to_multiple_of: int | None = None) -> None:
        if pad_token_id is None:
            raise ValueError("ChatCollator needs a pad_token_id")
        self.pad_token_id = int(pad_token_id)
        self.pad_to_multiple_of = pad_to_multiple_of

    def _length(self, longest: int) -> int:
        """The padded length: the longest example, rounded up to pad_to_multiple_of if set."""
        m = self.pad_to_multiple_of
        return longest if not m else -(-longest // m) * m

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        ids = [list(f["input_ids"]) for f in features]
        labels = [list(f["labels"]) for f in features]
        n = self._length(max(len(r) for r in ids))
        lengths = torch.tensor([len(r) for r in ids])
        return {
            "input_ids": pad_right(ids, self.pad_token_id, n),
            "labels": pad_right(labels, IGNORE_INDEX, n),
            "attention_mask": (torch.arange(n)[None, :] < lengths[:, None]).long(),
        }
