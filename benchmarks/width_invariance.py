"""What makes a row's numbers depend on its forward's width, op by op and for the whole model, on this machine.

    python benchmarks/width_invariance.py [--dtype auto|fp32|bf16] [--widths 2,3,4,8,16,32]

1. Linear kernels at the embedded model's layer shapes: torch's F.linear and oneDNN's packed kernel, rows fed M at a
   time (M = 2..33) against each row fed alone, and against M = 33.
2. Attention (9 query heads, 3 key heads, 64 dims, 150 cached keys): SDPA over the whole forward, the same in plain
   matmul + softmax, and row by row (runtime.attention): rows of a width-w forward against each row alone, and a
   lone query with masked keys after it against the same query with exactly its keys.
3. The embedded model after a chat prompt, 32 new tokens: a width-w forward against 32 one-token forwards (logits and
   cache bit for bit) under four runtimes: plain torch, packed linear layers only, attention by rows only, and
   prepare()'s (both).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mars_core import load  # noqa: E402
from mars_core.decoding.feed import right_pad  # noqa: E402
from mars_core.generate import encode_prompt  # noqa: E402
from mars_core.machine import machine_info, machine_line  # noqa: E402
from mars_core.runtime import Runtime, compare_widths  # noqa: E402
from mars_core.runtime.attention import attention_by_rows  # noqa: E402
from mars_core.runtime.linear import pack_linears, packing_pays  # noqa: E402

SHAPES = ((576, 576), (192, 576), (1536, 576), (576, 1536), (49152, 576))


def linear_rows(dtype: torch.dtype) -> None:
    print("\n| layer (out × in) | kernel | M (2..33) whose rows differ from rows fed alone | ... from M = 33 |")
    print("|---|---|---|---|")
    gen = torch.Generator().manual_seed(0)
    for n, k in SHAPES:
        layer = torch.nn.Linear(k, n, bias=False).to(dtype)
        x = torch.randn(33, k, generator=gen).to(dtype)
        kernels = {"torch F.linear": Runtime()}
        if packing_pays(layer):
            kernels["oneDNN packed"] = Runtime(linears=pack_linears(layer))
        for name, runtime in kernels.items():
            with torch.inference_mode(), runtime.active():
                alone = torch.cat([layer(x[r : r + 1]) for r in range(33)])
                full = layer(x)
                vs_alone = sum(not torch.equal(layer(x[:m]), alone[:m]) for m in range(2, 34))
                vs_full = sum(not torch.equal(layer(x[:m]), full[:m]) for m in range(2, 33))
            print(f"| {n} × {k} | {name} | {vs_alone} of 32 | {vs_full} of 31 |")


@torch.inference_mode()
def attention_rows(dtype: torch.dtype, widths: list[int]) -> None:
    b, hq, hkv, d, cached, most = 1, 9, 3, 64, 150, max(widths)
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(b, hq, most, d, generator=gen).to(dtype)
    k, v = (torch.randn(b, hkv, cached + most, d, generator=gen).to(dtype) for _ in range(2))
    rep = lambda t: t.repeat_interleave(hq // hkv, 1)  # noqa: E731

    def sdpa(qq, kk, vv, m):
        return F.scaled_dot_product_attention(qq, rep(kk), rep(vv), attn_mask=m).transpose(1, 2)

    def math(qq, kk, vv, m):
        s = (qq @ rep(kk).transpose(-1, -2)) * d**-0.5
        return (s.masked_fill(~m, float("-inf")).softmax(-1) @ rep(vv)).transpose(1, 2)

    def rows(qq, kk, vv, m):
        return attention_by_rows(qq, kk, vv, m, None)

    print("\n| attention | rows of a width-w forward that differ from the row alone, by w | lone query + masked keys |")
    print("|---|---|---|")
    for name, fn in (("SDPA over the forward", sdpa), ("matmul + softmax", math), ("row by row", rows)):
        alone = [fn(q[:, :, i : i + 1], k[:, :, : cached + i + 1], v[:, :, : cached + i + 1],
                    torch.ones(1, 1, 1, cached + i + 1, dtype=torch.bool)) for i in range(most)]
        cells = []
        for w in widths:
            mask = torch.ones(w, cached + w, dtype=torch.bool).tril(cached)[None, None]
            out = fn(q[:, :, :w], k[:, :, : cached + w], v[:, :, : cached + w], mask)
            cells.append(f"{w}: {sum(not torch.equal(out[:, i : i + 1], alone[i]) for i in range(w))}")
        if fn is rows:  # its keys end at the row itself: no masked key ever follows
            print(f"| {name} | {', '.join(cells)} | none: keys end at the row |")
            continue
        trailing = 0
        for i in range(most - 17):
            mask = torch.zeros(1, 1, 1, cached + i + 18, dtype=torch.bool)
            mask[..., : cached + i + 1] = True
            trailing += not torch.equal(fn(q[:, :, i : i + 1], k[:, :, : cached + i + 18], v[:, :, : cached + i + 18],
                                           mask), alone[i])
        print(f"| {name} | {', '.join(cells)} | {trailing} of {most - 17} differ |")


def whole_model(dtype: str, widths: list[int]) -> None:
    model, tok = load(dtype=dtype)
    prompt = "Write a long story about a dragon who learns to bake bread."
    context, lengths = right_pad([encode_prompt(tok, prompt)], tok.pad_token_id, model.device)
    text = ("Once upon a time, in a land far away, there lived a dragon named Ember who loved the smell of warm "
            "bread and spices in the morning, and baked every day.")
    new = torch.tensor([tok(text)["input_ids"][:32]])
    linears = pack_linears(model)
    runtimes = {"plain torch (SDPA, F.linear)": Runtime(), "packed linear layers only": Runtime(linears=linears),
                "attention by rows only": Runtime(rows=True),
                "prepare(): packed from 1 row + attention by rows": Runtime(linears=linears, rows=True),
                "... with a call per row (prepare()'s fallback)": Runtime(linears=linears, rows=True, units_alone=True)}
    print(f"\nembedded model, {model.dtype}, 32 new tokens after a chat prompt, widths {widths}:")
    print("| runtime | rows differing (logits or cache) | max abs logit difference |")
    print("|---|---|---|")
    for name, runtime in runtimes.items():
        check = compare_widths(model, runtime, context, lengths, new, tuple(widths))
        print(f"| {name} | {check.differing} of {check.rows} | {check.max_abs:.3g} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtype", default="auto")
    p.add_argument("--widths", default="2,3,4,8,16,32")
    args = p.parse_args()
    widths = [int(w) for w in args.widths.split(",")]
    from mars_core.load import resolve_dtype

    dtype = resolve_dtype(args.dtype)
    print(f"machine: {machine_line(machine_info('cpu', dtype))}")
    linear_rows(dtype)
    attention_rows(dtype, widths)
    whole_model(args.dtype, widths)


if __name__ == "__main__":
    main()
