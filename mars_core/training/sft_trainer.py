"""Plain autoregressive SFT on chat data (the paper's control), and the pieces MARS training shares with it."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from transformers import Trainer, TrainingArguments

from .data import IGNORE_INDEX, ChatCollator
from .sft_config import SFTConfig


def shifted_targets(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-shift unshifted labels onto the positions whose logits predict them.

    The prediction for token i is read at position i-1, so with y = labels [b, n]:
      target[:, p] = y[:, p+1]  (p < n-1),  target[:, n-1] = -100
      keep[:, p]   = target[:, p] != -100   (the positions whose logits we need)
    """
    targets = torch.full_like(labels, IGNORE_INDEX)
    targets[:, :-1] = labels[:, 1:]
    return targets != IGNORE_INDEX, targets


def token_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-token cross-entropy -log softmax(logits)[target], in fp32 whatever the logits' dtype."""
    return F.cross_entropy(logits.float(), targets, reduction="none")


def default_pad_token_id(processing_class: Any, model: torch.nn.Module | None) -> int:
    """The pad id for the collator: the tokenizer's pad, else the model config's pad, else eos."""
    for source in (processing_class, getattr(model, "config", None)):
        for name in ("pad_token_id", "eos_token_id"):
            value = getattr(source, name, None)
            if isinstance(value, list):
                value = value[0] if value else None
            if value is not None:
                return int(value)
    raise ValueError("no pad token id: pass a tokenizer with a pad token (mars_core.load sets one) or a data_collator")


class ChatTrainer(Trainer):
    """Trainer base for token-level CE on chat data: default collator, token-count normalisation, extra loss logs.

    A subclass says how its loss is summed (token_loss_sum); compute_loss, the Trainer's hook, is written once here.
    The loss is a sum of per-token CE divided by the number of label tokens. Under gradient accumulation
    (and across processes when average_tokens_across_devices) the Trainer counts the label tokens of all
    micro-batches first and passes the total as `num_items_in_batch`; dividing each micro-batch's sum by it
    makes the accumulated gradient that of one big batch, as transformers does for causal LMs.
    """

    # Names of the loss terms a subclass records with record_terms (logged as token means next to "loss").
    loss_terms: tuple[str, ...] = ()

    def __init__(
        self,
        model: torch.nn.Module | None = None,
        args: TrainingArguments | None = None,
        data_collator: Any = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        *,  # transformers.Trainer's order up to here; the rest by name
        processing_class: Any = None,
        **kwargs: Any,
    ) -> None:
        if args is not None and args.label_smoothing_factor:
            raise ValueError("label_smoothing_factor is not supported by the chat trainers (their CE is plain)")
        if data_collator is None:
            data_collator = ChatCollator(default_pad_token_id(processing_class, model))
        super().__init__(
            model=model,
            args=args,
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            **kwargs,
        )
        # Our compute_loss normalises by num_items_in_batch itself: make the Trainer always count label
        # tokens (over labels[..., 1:], position 0 is never predicted) and treat the loss as GA-scaled.
        self.model_accepts_loss_kwargs = True
        self._loss_shifts_labels = True
        self._term_sums: dict[str, dict[str, torch.Tensor]] = {}

    def token_loss_sum(self, model: torch.nn.Module, inputs: dict[str, torch.Tensor]
                       ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """(sum of the token losses, label tokens counted, the model's outputs) of one micro-batch."""
        raise NotImplementedError

    def compute_loss(
        self,
        model: torch.nn.Module,
        inputs: dict[str, torch.Tensor],
        return_outputs: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ):
        """The subclass's token-loss sum as a mean per label token (normalize_loss)."""
        loss_sum, count, outputs = self.token_loss_sum(model, inputs)
        loss = self.normalize_loss(loss_sum, count, num_items_in_batch)
        return (loss, outputs) if return_outputs else loss

    def normalize_loss(
        self, loss_sum: torch.Tensor, count: torch.Tensor, num_items_in_batch: torch.Tensor | int | None
    ) -> torch.Tensor:
        """Sum of token losses -> mean per label token (over the whole accumulated batch when it is known)."""
        if num_items_in_batch is None:
            return loss_sum / count.clamp(min=1)
        loss = loss_sum / num_items_in_batch
        if self.args.average_tokens_across_devices:
            # num_items_in_batch counts every process's tokens while DDP averages gradients over processes.
            loss = loss * self.accelerator.num_processes
        return loss

    def record_terms(self, sums: dict[str, torch.Tensor], count: torch.Tensor,
                     counts: dict[str, torch.Tensor] | None = None) -> None:
        """Accumulate per-term token-loss sums (train or eval) until the next log, where they become means: over
        `count` tokens, or over a term's own token count in `counts` (a loss over some of the tokens only)."""
        split = "train" if self.model.training else "eval"
        acc = self._term_sums.setdefault(split, {})
        own = {f"_count:{name}": n for name, n in (counts or {}).items()}
        for name, value in {**sums, "_count": count, **own}.items():
            value = value.detach().float().reshape(())
            acc[name] = acc[name] + value if name in acc else value

    def _pop_term_means(self, split: str) -> dict[str, float]:
        """Token-weighted means of the `loss_terms` across all processes, then reset (a term with no token yet is
        left out).

        Every process calls this at the same log, with the same fixed term names (zeros where it recorded
        nothing), so the gather never waits on a process that has nothing to send.
        """
        if not self.loss_terms:
            return {}
        acc = self._term_sums.pop(split, {})
        zero = torch.zeros((), device=self.args.device)
        count = acc.get("_count", zero)
        # each term's sum, then its token count (its own where it was recorded with one, else the common one)
        local = torch.stack([v.to(zero.device) for name in self.loss_terms
                             for v in (acc.get(name, zero), acc.get(f"_count:{name}", count))])
        total = self.accelerator.gather(local).reshape(-1, len(local)).sum(0).tolist()
        return {name: round(total[2 * i] / total[2 * i + 1], 4) for i, name in enumerate(self.loss_terms)
                if total[2 * i + 1] > 0}

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Add the separately recorded loss terms (e.g. loss_noisy, loss_clean) to the Trainer's logs."""
        eval_losses = [k for k in logs if k.endswith("_loss") and k != "train_loss"]  # eval_loss, test_loss, ...
        if eval_losses:
            prefix = eval_losses[0][: -len("loss")]
            logs.update({f"{prefix}{k}": v for k, v in self._pop_term_means("eval").items()})
        elif "loss" in logs:
            logs.update(self._pop_term_means("train"))
        super().log(logs, start_time)


class SFTTrainer(ChatTrainer):
    """Plain AR SFT: causal next-token CE on the assistant tokens (labels -100 on the prompt)."""

    def __init__(self, model: torch.nn.Module | None = None, args: TrainingArguments | None = None, **kwargs: Any):
        super().__init__(model=model, args=args if args is not None else SFTConfig(), **kwargs)

    def token_loss_sum(self, model: torch.nn.Module, inputs: dict[str, torch.Tensor]
                       ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """Σ over label tokens i of -log p(x_i | x_<i) (compute_loss divides by their count), logits computed only
        where a label is."""
        labels = inputs["labels"]
        keep, targets = shifted_targets(labels)
        outputs = model(
            input_ids=inputs["input_ids"],
            attention_mask=inputs.get("attention_mask"),
            logits_to_keep=keep,  # a bool [b, n] mask: logits come back flattened as [keep.sum(), V]
            use_cache=False,
        )
        return token_cross_entropy(outputs.logits, targets[keep]).sum(), keep.sum(), outputs
