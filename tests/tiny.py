"""Tiny tokenizers and models built in code, so the tests never download anything."""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|reserved_0|>", "<|reserved_1|>"]
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Count from one to ten: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10.",
    "List three colours: red, green, blue. Apples are red and bananas are yellow.",
    "What is the capital of France? Paris is the capital of France.",
    "Step by step: 12 * 3 = 36, then 36 + 4 = 40. The answer is 40.",
    "user assistant system hello world, please answer briefly and clearly!",
] * 20


def tiny_tokenizer(mask_token: bool = False) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (~400 entries) with ChatML and two unused reserved specials."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    fast.chat_template = CHATML
    if mask_token:
        fast.mask_token = "<|reserved_1|>"
    return fast


def _sharpen(model: torch.nn.Module, scale: float) -> torch.nn.Module:
    """Scale the output head so a random model has confident and unconfident positions alike."""
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    return model.eval()


def _config(cls, vocab_size: int, overrides: dict):
    base = dict(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        tie_word_embeddings=False, attn_implementation="sdpa", bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    return cls(**{**base, **overrides})


def tiny_qwen2(vocab_size: int, seed: int = 0, scale: float = 16.0, **overrides) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    return _sharpen(Qwen2ForCausalLM(_config(Qwen2Config, vocab_size, overrides)), scale)


def tiny_llama(vocab_size: int, seed: int = 0, scale: float = 16.0, **overrides) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    return _sharpen(LlamaForCausalLM(_config(LlamaConfig, vocab_size, overrides)), scale)
