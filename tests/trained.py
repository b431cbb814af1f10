"""A tiny model taught MARS on a repetitive toy task (a few seconds on CPU), so its mask slots really draft."""

from __future__ import annotations

import tempfile

import torch

from mars_core.runtime import prepared

from tiny import tiny_llama, tiny_qwen2

ANSWERS = {
    "Count from one to ten": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10.",
    "List three colours": "red, green, blue. Apples are red and bananas are yellow.",
    "What is the capital of France? Answer briefly and clearly please, with the reason.":
        "Paris is the capital of France. Paris is the capital of France.",
    "hello": "hello world, please answer briefly and clearly!",
    "Tell me about the fox":
        "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog.",
}


def toy_chats() -> list[dict]:
    return [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
            for q, a in ANSWERS.items()]


# weights trained once per session, and torch's RNG state training left, by (kind, vocab, steps, B)
_TRAINED: dict[tuple, tuple[dict[str, torch.Tensor], torch.Tensor]] = {}


def mars_trained(kind: str, tokenizer, steps: int = 150, block_size: int = 4) -> torch.nn.Module:
    """A tiny Qwen2 or Llama after `steps` MARS steps on the toy answers (fp32, deterministic): trained once per
    test session, then a fresh model with those weights on every call (a test may change its model freely). Every
    call leaves torch's RNG where training left it, so a test sees the same random state whichever test trained."""
    key = (kind, len(tokenizer), steps, block_size)
    if key not in _TRAINED:
        trained = train(kind, tokenizer, steps, block_size)
        _TRAINED[key] = {k: v.detach().clone() for k, v in trained.state_dict().items()}, torch.get_rng_state()
    weights, rng = _TRAINED[key]
    model = untrained(kind, tokenizer)
    model.load_state_dict(weights)
    torch.set_rng_state(rng)
    prepared(model)  # the runtime generate() gives it, made now: a test that counts forwards counts the decode's
    return model.eval()


def untrained(kind: str, tokenizer) -> torch.nn.Module:
    """The tiny Qwen2 or Llama that training starts from (its weights drawn from torch's current seed)."""
    return (tiny_qwen2 if kind == "qwen2" else tiny_llama)(len(tokenizer), scale=1.0)


def train(kind: str, tokenizer, steps: int, block_size: int) -> torch.nn.Module:
    """The MARS training run behind mars_trained."""
    from mars_core import MarsConfig, MarsTrainer
    from mars_core.training.data import load_chat_dataset

    torch.manual_seed(0)
    model = untrained(kind, tokenizer)
    model.train()
    with tempfile.TemporaryDirectory() as out:
        args = MarsConfig(output_dir=out, block_size=block_size, per_device_train_batch_size=8, learning_rate=3e-3,
                          lr_scheduler_type="constant", max_steps=steps, use_cpu=True, save_strategy="no",
                          report_to="none", disable_tqdm=True, logging_steps=steps, seed=0)
        data = load_chat_dataset(toy_chats() * 8, tokenizer, 128)
        MarsTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer).train()
    return model.eval()
