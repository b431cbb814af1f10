"""Where and why a threshold-mode answer leaves the one-token answer: forward by forward, every slot's proposal
and confidence, which were committed, and whether each committed draft is the model's own greedy token there.

    python benchmarks/threshold_trace.py --split heldout --index 4 [--threshold 0.9] [--dtype fp32]
    python benchmarks/threshold_trace.py --prompt "List the numbers from 1 to 15, separated by commas."

A committed draft is checked by one causal re-read of prompt + answer (mars_core.evaluation.drafts.ar_choices): ✗
means the model, given the text committed before it, would have written another token. Threshold mode never
takes that back; every later forward conditions on it (verified mode would have committed the model's token).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mars_core import generate, load  # noqa: E402
from mars_core.evaluation.drafts import ar_choices  # noqa: E402
from mars_core.evaluation.prompts import load_split  # noqa: E402
from mars_core.generate import encode_prompt, stream  # noqa: E402


def trace(model, tokenizer, prompt: str, threshold: float, block_size: int, max_new_tokens: int) -> list[str]:
    """The report's lines: one per forward, then where the answer departs from the one-token answer."""
    events = list(stream(model, tokenizer, prompt, strategy="sliding", threshold=threshold, block_size=block_size,
                         max_new_tokens=max_new_tokens))
    committed = [t for e in events for t in e.token_ids[0]]
    choices = ar_choices(model, encode_prompt(tokenizer, prompt), committed)
    lines, at = [], 0
    for e in events:
        cells = []
        for j, (t, c) in enumerate(zip(e.proposed_ids[0], e.proposed_confidences[0])):
            taken = j < len(e.token_ids[0])
            model_token = choices[at + j] if taken else None
            mark = "-" if not taken else "✓" if model_token == t else f"✗ model: {tokenizer.decode([model_token])!r}"
            cells.append(f"{tokenizer.decode([t])!r} {c:.3f} {mark}")
        lines.append(f"{e.forward:>3} +{len(e.token_ids[0])}  " + "  |  ".join(cells))
        at += len(e.token_ids[0])
    one = generate(model, tokenizer, prompt, strategy="sliding", threshold=1.0, block_size=block_size,
                   max_new_tokens=max_new_tokens).token_ids[0]
    depart = next((i for i, (a, b) in enumerate(zip(one, committed)) if a != b), None)
    if depart is None and len(one) == len(committed):
        lines.append(f"the same answer as one-token mode: {len(committed)} tokens in {len(events)} forwards")
    else:
        depart = min(len(one), len(committed)) if depart is None else depart
        lines.append(f"departs from the one-token answer at token {depart + 1}: "
                     f"{tokenizer.decode(committed[:depart + 1])!r} against {tokenizer.decode(one[:depart + 1])!r}")
    lines.append(f"answer: {tokenizer.decode(committed, skip_special_tokens=True)!r}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompt", default=None, help="a prompt (else --split and --index)")
    parser.add_argument("--split", default="heldout")
    parser.add_argument("--index", type=int, default=0,
                        help="the record's place in mars-eval's order (its samples lists)")
    parser.add_argument("--threshold", type=float, default=0.9)
    parser.add_argument("--block-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--dtype", default="fp32", help="fp32 (default: no rounding noise), bf16 or auto")
    args = parser.parse_args(argv)
    prompt = args.prompt or load_split(args.split)[args.index]["prompt"]
    torch.manual_seed(0)
    model, tokenizer = load(dtype=args.dtype)
    print(f"prompt: {prompt!r}\nτ = {args.threshold}, B = {args.block_size}, {model.dtype}; per forward: how many "
          "tokens it committed, then each slot's proposal, confidence and ✓/✗ against the model's own token")
    print("\n".join(trace(model, tokenizer, prompt, args.threshold, args.block_size, args.max_new_tokens)))


if __name__ == "__main__":
    main()
