"""MARS training: one forward over [noisy | clean] under the MARS mask, loss = CE(noisy) + α·CE(clean)."""

from __future__ import annotations

from typing import Any

import torch

from ..attention import as_model_mask
from .data import IGNORE_INDEX
from .mars_config import MarsConfig
from .masks import training_attention_mask
from .sft_trainer import ChatTrainer, shifted_targets, token_cross_entropy


def resolve_mask_token_id(args: MarsConfig, processing_class: Any, model: torch.nn.Module | None) -> int:
    """The mask token id: MarsConfig.mask_token_id, else the tokenizer's; it must index the model's embeddings."""
    mask_id = args.mask_token_id
    if mask_id is None:
        mask_id = getattr(processing_class, "mask_token_id", None)
    if mask_id is None:
        raise ValueError(
            "MARS needs a mask token: set MarsConfig.mask_token_id or pass processing_class=tokenizer whose "
            "tokenizer.mask_token is set (mars_core.load guarantees one)"
        )
    embeddings = model.get_input_embeddings() if model is not None and hasattr(model, "get_input_embeddings") else None
    # peft wraps the embedding when its mask row trains (trainable_token_indices); the wrapper has no num_embeddings.
    count = None
    if embeddings is not None:
        count = getattr(embeddings, "num_embeddings", None) or getattr(model.config, "vocab_size", None)
    if count is not None and mask_id >= count:
        raise ValueError(
            f"mask_token_id {mask_id} is outside the model's {count} embeddings: "
            "call model.resize_token_embeddings(len(tokenizer)) after adding the mask token"
        )
    return int(mask_id)


def mars_inputs(
    input_ids: torch.Tensor, labels: torch.Tensor, mask_token_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The doubled sequence [x~ | x] and its position ids [0..n) ++ [0..n).

    x~[i] = MASK where y[i] != -100 (every response token), else x[i] (the prompt and padding).
    """
    b, n = input_ids.shape
    noisy = torch.where(labels != IGNORE_INDEX, torch.full_like(input_ids, mask_token_id), input_ids)
    positions = torch.arange(n, device=input_ids.device).repeat(2).unsqueeze(0).expand(b, -1)
    return torch.cat([noisy, input_ids], dim=1), positions


def slot_terms(block_size: int) -> list[str]:
    """The names of the per-slot noisy losses: loss_slot1 .. loss_slot{B}."""
    return [f"loss_slot{j}" for j in range(1, block_size + 1)]


def slot_losses(noisy_ce: torch.Tensor, keep: torch.Tensor, block_size: int
                ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The noisy stream's token losses (`noisy_ce`, one per True of `keep` [b, n], row by row) summed and counted by
    slot. The noisy query at position p predicts token p+1 and sees the real tokens before its block, which starts
    at s = p - p mod B: with L = s the first token it does not see, it predicts token L + j, j = p mod B + 1, as a
    decode's mask j-1 does (prediction j of MARS_METHOD.md; prediction 0, token L, is the AR one). Slot j, then: the
    token j+1 past the last real one. Slot B is trained but never read at B-1 masks."""
    slot = (torch.arange(keep.shape[1], device=keep.device) % block_size + 1).expand_as(keep)[keep]
    sums, counts = {}, {}
    for j, name in enumerate(slot_terms(block_size), 1):
        here = slot == j
        sums[name], counts[name] = noisy_ce.masked_fill(~here, 0.0).sum(), here.sum()
    return sums, counts


class MarsTrainer(ChatTrainer):
    """Trainer for MARS fine-tuning of a causal LM; the checkpoint stays an ordinary causal LM.

    Right padding needs no extra mask: padded tokens come after every real token of their row, so the
    causal and block rules already keep real queries from seeing them.
    """

    def __init__(self, model: torch.nn.Module | None = None, args: MarsConfig | None = None, **kwargs: Any):
        args = args if args is not None else MarsConfig()
        if not isinstance(args, MarsConfig):
            raise TypeError(f"MarsTrainer needs a MarsConfig (block_size, ar_weight, ...), got {type(args).__name__}")
        self.mask_token_id = resolve_mask_token_id(args, kwargs.get("processing_class"), model)
        # loss_slot{j}: the noisy loss of a decode's prediction j, the token j+1 past the last real token a mask sees
        # (slot j = 1..B; a decode reads slots 1..B-1), each a mean over its own tokens: nearer slots learn first
        self.loss_terms = ("loss_noisy", "loss_clean", *slot_terms(args.block_size))
        super().__init__(model=model, args=args, **kwargs)

    def token_loss_sum(self, model: torch.nn.Module, inputs: dict[str, torch.Tensor]
                       ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """Σ_i CE(noisy logits'[i], y_i) + α · Σ_i CE(clean logits'[i], y_i) over label tokens i (compute_loss divides
        by their count N); each term is recorded for the logs."""
        input_ids, labels = inputs["input_ids"], inputs["labels"]
        b, n = input_ids.shape
        sequence, position_ids = mars_inputs(input_ids, labels, self.mask_token_id)
        allowed = training_attention_mask(n, self.args.block_size, device=input_ids.device)
        attention_mask = as_model_mask(allowed, self.accelerator.unwrap_model(model)).expand(b, -1, -1, -1)

        # Logits only where a label is predicted: position i-1 of each stream for label i.
        keep_one, targets_one = shifted_targets(labels)
        keep = torch.cat([keep_one, keep_one], dim=1)  # [b, 2n]: noisy half, clean half
        targets = torch.cat([targets_one, targets_one], dim=1)[keep]
        is_clean = torch.cat([torch.zeros_like(keep_one), torch.ones_like(keep_one)], dim=1)[keep]

        outputs = model(
            input_ids=sequence,
            attention_mask=attention_mask,
            position_ids=position_ids,
            logits_to_keep=keep,  # a bool [b, 2n] mask: logits come back flattened as [keep.sum(), V]
            use_cache=False,
        )
        ce = token_cross_entropy(outputs.logits, targets)
        noisy_sum = ce.masked_fill(is_clean, 0.0).sum()
        clean_sum = ce.masked_fill(~is_clean, 0.0).sum()
        count = keep_one.sum()
        slot_sums, slot_counts = slot_losses(ce[~is_clean], keep_one, self.args.block_size)
        self.record_terms({"loss_noisy": noisy_sum, "loss_clean": clean_sum, **slot_sums}, count, slot_counts)
        return noisy_sum + self.args.ar_weight * clean_sum, count, outputs
