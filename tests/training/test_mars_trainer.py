"""MarsTrainer: the loss is CE(noisy) + α·CE(clean) by hand, GA normalisation, overfitting, checkpoints."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoTokenizer

from mars_core.attention import as_model_mask
from mars_core.training.data import ChatCollator, load_chat_dataset
from mars_core.training.mars_config import MarsConfig
from mars_core.training.mars_trainer import MarsTrainer
from mars_core.training.masks import training_attention_mask

from tiny import tiny_qwen2, tiny_tokenizer

CHATS = [
    [{"role": "user", "content": "What is the capital of France?"},
     {"role": "assistant", "content": "Paris is the capital of France."}],
    [{"role": "user", "content": "List three colours"}, {"role": "assistant", "content": "red, green, blue."}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Count from one to ten"},
     {"role": "assistant", "content": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10."}],
    [{"role": "user", "content": "hello world"}, {"role": "assistant", "content": "The quick brown fox."},
     {"role": "user", "content": "and?"}, {"role": "assistant", "content": "jumps over the lazy dog."}],
]


@pytest.fixture(scope="module")
def dataset(tokenizer):
    return load_chat_dataset([{"messages": m} for m in CHATS], tokenizer, max_length=64)


def config(tmp_path, **overrides) -> MarsConfig:
    values = dict(
        output_dir=str(tmp_path), use_cpu=True, disable_tqdm=True, save_strategy="no", logging_steps=1,
        per_device_train_batch_size=4, learning_rate=1e-3, seed=0,
    )
    return MarsConfig(**{**values, **overrides})


def hand_loss_terms(model, batch, mask_id: int, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(noisy CE, clean CE), each a mean over label tokens, computed the long way with full logits."""
    x, y = batch["input_ids"], batch["labels"]
    b, n = x.shape
    noisy = x.masked_fill(y != -100, mask_id)
    positions = torch.arange(n).repeat(2)[None].expand(b, -1)
    mask = as_model_mask(training_attention_mask(n, block_size), model).expand(b, -1, -1, -1)
    logits = model(input_ids=torch.cat([noisy, x], 1), attention_mask=mask, position_ids=positions).logits
    # logits'[i] = logits[i-1]: drop the last position of the noisy half, compare with labels 1..n-1.
    ce_noisy = F.cross_entropy(logits[:, : n - 1].flatten(0, 1), y[:, 1:].flatten(), ignore_index=-100)
    # The clean term is the model's own causal-LM loss on the plain sequence.
    ce_clean = model(input_ids=x, attention_mask=batch["attention_mask"], labels=y).loss
    return ce_noisy, ce_clean


@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.0])
def test_loss_matches_hand_computation(model, tokenizer, dataset, tmp_path, alpha: float) -> None:
    trainer = MarsTrainer(model=model, args=config(tmp_path, block_size=3, ar_weight=alpha), processing_class=tokenizer)
    batch = ChatCollator(tokenizer.pad_token_id)([dataset[i] for i in range(4)])
    assert (batch["attention_mask"] == 0).any()  # padding is exercised
    with torch.no_grad():
        loss = trainer.compute_loss(model, batch)
        ce_noisy, ce_clean = hand_loss_terms(model, batch, tokenizer.mask_token_id, 3)
    torch.testing.assert_close(loss, ce_noisy + alpha * ce_clean, atol=1e-5, rtol=1e-5)
    assert ce_clean > 0.1 and (ce_noisy - ce_clean).abs() > 1e-3  # the two terms are distinct
    # The separately recorded terms come out in the logs (here as eval terms: the model is in eval mode).
    trainer.log({"eval_loss": loss.item()})
    logged = trainer.state.log_history[-1]
    assert logged["eval_loss_noisy"] == pytest.approx(ce_noisy.item(), abs=1e-3)
    assert logged["eval_loss_clean"] == pytest.approx(ce_clean.item(), abs=1e-3)


def test_slot_losses_match_hand_computation(model, tokenizer, dataset, tmp_path) -> None:
    """loss_slot{j}: the noisy CE of the labels at positions p+1 with p mod B = j-1, each a mean over its own tokens;
    weighted by their counts, the slots give back the noisy loss."""
    b_size = 3
    trainer = MarsTrainer(model=model, args=config(tmp_path, block_size=b_size), processing_class=tokenizer)
    batch = ChatCollator(tokenizer.pad_token_id)([dataset[i] for i in range(4)])
    x, y = batch["input_ids"], batch["labels"]
    n = x.shape[1]
    with torch.no_grad():
        loss = trainer.compute_loss(model, batch)
        noisy = x.masked_fill(y != -100, tokenizer.mask_token_id)
        mask = as_model_mask(training_attention_mask(n, b_size), model).expand(x.shape[0], -1, -1, -1)
        logits = model(input_ids=torch.cat([noisy, x], 1), attention_mask=mask,
                       position_ids=torch.arange(n).repeat(2)[None].expand(x.shape[0], -1)).logits[:, :n - 1]
        ce = F.cross_entropy(logits.transpose(1, 2), y[:, 1:], ignore_index=-100, reduction="none")
    trainer.log({"eval_loss": loss.item()})
    logged = trainer.state.log_history[-1]
    slot_of_query = torch.arange(n - 1) % b_size + 1  # the query at p predicts label p+1
    weighted = 0.0
    for j in range(1, b_size + 1):
        here = (slot_of_query == j)[None].expand_as(ce) & (y[:, 1:] != -100)
        expected = ce[here].mean().item()
        assert logged[f"eval_loss_slot{j}"] == pytest.approx(expected, abs=1e-3)
        weighted += ce[here].sum().item()
    count = int((y[:, 1:] != -100).sum())
    assert weighted / count == pytest.approx(logged["eval_loss_noisy"], abs=1e-3)
    assert len({round(logged[f"eval_loss_slot{j}"], 3) for j in range(1, b_size + 1)}) == b_size  # slots differ


def test_bf16_model_loss_close_to_fp32(tokenizer, dataset, tmp_path) -> None:
    model = tiny_qwen2(len(tokenizer))
    batch = ChatCollator(tokenizer.pad_token_id)([dataset[0], dataset[1]])
    trainer = MarsTrainer(model=model, args=config(tmp_path), processing_class=tokenizer)
    with torch.no_grad():
        fp32 = trainer.compute_loss(model, batch)
        bf16 = trainer.compute_loss(model.to(torch.bfloat16), batch)
    assert bf16.dtype == torch.float32 and torch.isfinite(bf16)
    torch.testing.assert_close(bf16, fp32, rtol=3e-2, atol=0.0)


def test_gradient_accumulation_normalisation(model, tokenizer, dataset, tmp_path) -> None:
    """Two micro-batches divided by the total token count sum to the loss of the whole batch."""
    trainer = MarsTrainer(model=model, args=config(tmp_path), processing_class=tokenizer)
    collate = ChatCollator(tokenizer.pad_token_id)
    whole = collate([dataset[i] for i in range(4)])
    parts = [collate([dataset[0], dataset[1]]), collate([dataset[2], dataset[3]])]
    total = sum(int((p["labels"][:, 1:] != -100).sum()) for p in parts)
    with torch.no_grad():
        accumulated = sum(trainer.compute_loss(model, p, num_items_in_batch=torch.tensor(total)) for p in parts)
        full = trainer.compute_loss(model, whole)
        halves = [trainer.compute_loss(model, p) for p in parts]
    torch.testing.assert_close(accumulated, full, atol=1e-5, rtol=1e-5)
    assert not torch.isclose(sum(halves) / 2, full, atol=1e-4)  # a mean of means would differ


def test_lora_wrapped_model(tokenizer, dataset, tmp_path) -> None:
    from peft import LoraConfig, get_peft_model

    base = tiny_qwen2(len(tokenizer))
    batch = ChatCollator(tokenizer.pad_token_id)([dataset[0], dataset[1]])
    args = config(tmp_path)
    with torch.no_grad():
        expected = MarsTrainer(model=base, args=args, processing_class=tokenizer).compute_loss(base, batch)
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    trainer = MarsTrainer(model=peft_model, args=args, processing_class=tokenizer)
    loss = trainer.compute_loss(peft_model, batch)
    torch.testing.assert_close(loss, expected, atol=1e-5, rtol=1e-5)  # LoRA starts as the identity (B = 0)
    loss.backward()
    grads = {n: p.grad for n, p in peft_model.named_parameters() if p.grad is not None}
    assert grads and all("lora_" in n for n in grads)


def test_overfit_lowers_loss(model, tokenizer, dataset, tmp_path) -> None:
    fresh = copy.deepcopy(model)
    trainer = MarsTrainer(
        model=fresh, args=config(tmp_path, max_steps=30), train_dataset=dataset, processing_class=tokenizer
    )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    first, last = logs[0], logs[-1]
    assert last["loss"] < 0.4 * first["loss"]
    assert last["loss_noisy"] < first["loss_noisy"] and last["loss_clean"] < first["loss_clean"]
    for h in logs:  # one step per log: the logged loss is the sum of the two logged terms (α = 1)
        assert h["loss"] == pytest.approx(h["loss_noisy"] + h["loss_clean"], rel=1e-3)


def test_checkpoint_keeps_mask_token(tokenizer, dataset, tmp_path) -> None:
    args = config(tmp_path, max_steps=1, save_strategy="steps", save_steps=1)
    trainer = MarsTrainer(
        model=tiny_qwen2(len(tokenizer)), args=args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.train()
    saved = AutoTokenizer.from_pretrained(tmp_path / "checkpoint-1")
    assert saved.mask_token == tokenizer.mask_token and saved.mask_token_id == tokenizer.mask_token_id


def test_mask_token_required(tmp_path) -> None:
    plain = tiny_tokenizer(mask_token=False)
    model = tiny_qwen2(len(plain))
    with pytest.raises(ValueError, match="mask token"):
        MarsTrainer(model=model, args=config(tmp_path), processing_class=plain)
    mask_id = plain.convert_tokens_to_ids("<|reserved_0|>")
    trainer = MarsTrainer(model=model, args=config(tmp_path, mask_token_id=mask_id), processing_class=plain)
    assert trainer.mask_token_id == mask_id
    with pytest.raises(ValueError, match="outside"):
        MarsTrainer(model=model, args=config(tmp_path, mask_token_id=10_000), processing_class=plain)


def test_config_validation(tmp_path) -> None:
    with pytest.raises(ValueError, match="block_size"):
        config(tmp_path, block_size=0)
    with pytest.raises(ValueError, match="ar_weight"):
        config(tmp_path, ar_weight=-0.5)
    defaults = MarsConfig(output_dir=str(tmp_path))
    assert (defaults.block_size, defaults.ar_weight, defaults.remove_unused_columns) == (4, 1.0, False)
