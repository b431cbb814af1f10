"""Draft re-checking: every committed token against the model's own greedy choice at its place.

Every output is re-read in one causal forward over prompt + answer, and each accepted mask-slot token is compared
with the model's own greedy choice there. Draft precision says how far a threshold can be trusted: at threshold 0.9
a calibrated model's drafts would be right at least 90% of the time (draft_stats bins them by confidence). Tokens
after the first wrong draft are checked against the text that was actually committed.
"""

from __future__ import annotations

from typing import Any

Check = tuple[int, float, bool]  # (slot: 0 = the AR token, j >= 1 = a mask-slot draft; confidence; equals AR's)
CONFIDENCE_EDGES = (0.0, 0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.999, 1.01)  # the calibration's bins


def ar_choices(model, prompt_ids: list[int], out_ids: list[int]) -> list[int]:
    """The model's own greedy token at every output position, given the committed tokens before it
    (one causal forward over prompt + output: what one-token decoding would have chosen there)."""
    import torch

    if not out_ids:
        return []
    ids = torch.tensor([prompt_ids + out_ids], device=model.device)
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1]
    return logits.argmax(-1).tolist()


def check_drafts(model, tokenizer, prompt: str, out_ids: list[int], slots: list[int], confs: list[float]
                 ) -> list[Check]:
    """Per committed token: (slot, confidence, equals the model's own AR choice). Slot 0 is the AR prediction
    itself (a mismatch there is bf16 rounding between a cached k-token forward and one long forward);
    slot j >= 1 is a mask-slot draft accepted because its confidence reached the threshold."""
    from ..generate import encode_prompt

    choices = ar_choices(model, encode_prompt(tokenizer, prompt), out_ids)
    return [(s, round(c, 4), t == a) for s, c, t, a in zip(slots, confs, out_ids, choices)]


def precision(checks: list[Check]) -> float | None:
    """The share of checks whose token equals the AR choice (None when there are none)."""
    return round(sum(c[2] for c in checks) / len(checks), 4) if checks else None


def calibration(drafts: list[Check]) -> list[dict[str, Any]]:
    """Draft precision by confidence bin (CONFIDENCE_EDGES), the bins that hold drafts only."""
    bins = []
    for lo, hi in zip(CONFIDENCE_EDGES, CONFIDENCE_EDGES[1:]):
        hit = [c for c in drafts if lo <= c[1] < hi]
        if hit:
            bins.append({"confidence": [lo, min(hi, 1.0)], "n": len(hit), "precision": precision(hit)})
    return bins


def draft_stats(results: list[dict[str, Any]], block_size: int) -> dict[str, Any] | None:
    """Draft precision: the share of accepted mask-slot tokens equal to the model's own greedy AR token,
    per slot and per confidence bin (the calibration: a confidence of 0.9 should be right 90% of the time)."""
    checks = [c for x in results for c in x.get("checks", [])]
    if not checks:
        return None
    drafts = [c for c in checks if c[0] >= 1]
    return {
        "drafts": len(drafts),
        "precision": precision(drafts),
        "precision_by_slot": [precision([c for c in drafts if c[0] == j]) for j in range(1, block_size)],
        "ar_consistency": precision([c for c in checks if c[0] == 0]) or 0.0,
        "samples_with_a_wrong_draft": sum(any(c[0] >= 1 and not c[2] for c in x.get("checks", [])) for x in results),
        "calibration": calibration(drafts),
    }
