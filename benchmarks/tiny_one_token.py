"""One-token mode of our decoders against transformers' generate on a tiny random Qwen2 (no download).

    python benchmarks/tiny_one_token.py

Best of 7 interleaved runs, 1 thread, 4 prompts x 64 tokens, at batch 1 and 4: the decoding machinery's
own overhead, since a tiny model's forward is cheap.
"""

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent.parent / "tests")]

from mars_core import generate  # noqa: E402
from mars_core.generate import encode_prompt  # noqa: E402
from mars_core.runtime.timing import seconds  # noqa: E402

from tiny import tiny_qwen2, tiny_tokenizer  # noqa: E402

PROMPTS = ["Count from one to ten", "What is the capital of France?", "hello there", "List three colours"]
N = 64


def main() -> None:
    torch.set_num_threads(1)
    tok = tiny_tokenizer(mask_token=True)
    tok.padding_side = "left"
    model = tiny_qwen2(len(tok), max_position_embeddings=512)

    def hf(batch):
        enc = tok.pad({"input_ids": [encode_prompt(tok, p) for p in batch]}, return_tensors="pt")
        model.generate(**enc, max_new_tokens=N, min_new_tokens=N, do_sample=False, pad_token_id=tok.pad_token_id)

    def ours(strategy, batch):
        r = generate(model, tok, batch, strategy=strategy, block_size=4, threshold=1.0, max_new_tokens=N)
        assert r.generated_tokens == N * len(batch)

    for bs in (1, 4):
        batches = [PROMPTS[i : i + bs] for i in range(0, len(PROMPTS), bs)]
        runs = {
            "hf_generate": lambda: [hf(b) for b in batches],
            "ar": lambda: [ours("ar", b) for b in batches],
            "sliding τ=1": lambda: [ours("sliding", b) for b in batches],
            "block τ=1": lambda: [ours("block", b) for b in batches],
        }
        best = dict.fromkeys(runs, float("inf"))
        for _ in range(7):
            for name, run in runs.items():
                best[name] = min(best[name], seconds(run))
        base = best["hf_generate"]
        print(f"batch {bs}: " + "  ".join(f"{k} {v * 1000:.0f} ms ({base / v:.2f}x)" for k, v in best.items()))


if __name__ == "__main__":
    main()
