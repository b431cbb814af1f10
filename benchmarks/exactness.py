"""How exact is verified decoding on the real model: its answers against transformers' greedy generate, in fp32
and in bf16, beside the bf16 noise floor (how many answers bf16 generate itself shares with fp32 generate).

    python benchmarks/exactness.py [--split heldout] [--limit 99] [--max-new-tokens 64] [--layout fixed]
                                   [--json out.json]

--layout fixed sizes verified trees by the fixed rules (the widest, siblings included) instead of the cost curve.

In fp32 verified decoding must equal generate on every answer (tests/test_default_model.py checks a slice). In
bf16 a wide forward rounds differently from a one-token forward, so where two candidates' logits are within
rounding of each other the answers can part; the same happens between fp32 and bf16 generate, which is the floor
to read the bf16 number against.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mars_core import TreeLayout, generate, load  # noqa: E402
from mars_core.evaluation.prompts import load_split  # noqa: E402
from mars_core.generate import encode_prompt, stop_token_ids  # noqa: E402


@torch.inference_mode()
def hf_greedy(model, tokenizer, prompt: str, max_new: int) -> list[int]:
    """transformers' greedy generate, cut after the first stop token."""
    ids = torch.tensor([encode_prompt(tokenizer, prompt)], device=model.device)
    row = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new,
                         pad_token_id=tokenizer.pad_token_id)[0, ids.shape[1]:].tolist()
    stops = set(stop_token_ids(model, tokenizer))
    return next((row[: k + 1] for k, t in enumerate(row) if t in stops), row)


def answers(dtype: str, prompts: list[str], max_new: int, model_name: str | None, layout: TreeLayout
            ) -> dict[str, list[list[int]]]:
    """generate's and the verified decoder's answers with the model loaded in `dtype`."""
    model, tokenizer = load(model_name, dtype=dtype)
    out = {"generate": [], "verified": []}
    for prompt in tqdm(prompts, desc=dtype):
        out["generate"].append(hf_greedy(model, tokenizer, prompt, max_new))
        out["verified"].append(generate(model, tokenizer, prompt, strategy="verified", max_new_tokens=max_new,
                                        layout=layout).token_ids[0])
    return out


def same(a: list[list[int]], b: list[list[int]]) -> int:
    return sum(x == y for x, y in zip(a, b))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None)
    p.add_argument("--split", default="heldout")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--layout", choices=("cost", "fixed"), default="cost",
                   help="verified trees by the machine's cost curve (default) or by the fixed rules")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    layout = TreeLayout(use_cost=args.layout == "cost")
    prompts = [r["prompt"] for r in load_split(args.split, args.limit)]
    fp32 = answers("fp32", prompts, args.max_new_tokens, args.model, layout)
    bf16 = answers("bf16", prompts, args.max_new_tokens, args.model, layout)
    n = len(prompts)
    report = {
        "split": args.split, "prompts": n, "max_new_tokens": args.max_new_tokens, "layout": args.layout,
        "fp32_verified_equals_generate": same(fp32["verified"], fp32["generate"]),
        "bf16_verified_equals_bf16_generate": same(bf16["verified"], bf16["generate"]),
        "bf16_generate_equals_fp32_generate": same(bf16["generate"], fp32["generate"]),  # the noise floor
        "bf16_verified_equals_fp32_generate": same(bf16["verified"], fp32["generate"]),
    }
    for key, value in report.items():
        print(f"{key:<38} {value}" + (f" of {n}" if key.endswith(("generate",)) else ""))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
