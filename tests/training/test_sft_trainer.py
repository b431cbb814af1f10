"""SFTTrainer: plain causal CE on assistant tokens equals the model's own loss; it overfits a few chats."""

from __future__ import annotations

import copy

import pytest
import torch

from mars_core.training.data import ChatCollator, load_chat_dataset
from mars_core.training.sft_config import SFTConfig
from mars_core.training.sft_trainer import SFTTrainer, shifted_targets

CHATS = [
    [{"role": "user", "content": "What is the capital of France?"},
     {"role": "assistant", "content": "Paris is the capital of France."}],
    [{"role": "user", "content": "List three colours"}, {"role": "assistant", "content": "red, green, blue."}],
    [{"role": "user", "content": "Count from one to ten"}, {"role": "assistant", "content": "1, 2, 3, 4, 5."}],
]


@pytest.fixture(scope="module")
def dataset(tokenizer):
    return load_chat_dataset([{"messages": m} for m in CHATS], tokenizer, max_length=64)


def config(tmp_path, **overrides) -> SFTConfig:
    values = dict(
        output_dir=str(tmp_path), use_cpu=True, disable_tqdm=True, save_strategy="no", logging_steps=1,
        per_device_train_batch_size=3, learning_rate=1e-3, seed=0,
    )
    return SFTConfig(**{**values, **overrides})


def test_shifted_targets() -> None:
    labels = torch.tensor([[-100, -100, 7, 8, -100], [-100, 4, -100, -100, -100]])
    keep, targets = shifted_targets(labels)
    assert targets.tolist() == [[-100, 7, 8, -100, -100], [4, -100, -100, -100, -100]]
    assert keep.tolist() == [[False, True, True, False, False], [True, False, False, False, False]]


def test_loss_equals_model_causal_lm_loss(model, tokenizer, dataset, tmp_path) -> None:
    trainer = SFTTrainer(model=model, args=config(tmp_path), processing_class=tokenizer)
    batch = ChatCollator(tokenizer.pad_token_id)([dataset[i] for i in range(3)])
    with torch.no_grad():
        loss = trainer.compute_loss(model, batch)
        expected = model(**batch).loss  # transformers' own shifted causal-LM CE with labels
    assert expected > 0.1
    torch.testing.assert_close(loss, expected, atol=1e-5, rtol=1e-5)


def test_overfit_lowers_loss(model, tokenizer, dataset, tmp_path) -> None:
    trainer = SFTTrainer(
        model=copy.deepcopy(model), args=config(tmp_path, max_steps=25), train_dataset=dataset,
        processing_class=tokenizer,
    )
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 25
    assert losses[-1] < 0.3 * losses[0]
