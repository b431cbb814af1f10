"""How often prompt lookup's drafts match greedy decoding, by place in the chain, given the drafts before them matched.

    python benchmarks/lookup_odds.py [--weights q8_0] [--split heldout] [--prompts 18] [--max-new-tokens 64]

Decodes each prompt one token at a time on the embedded model's GGUF (llama.cpp), then runs prompt lookup after every
committed token, as verified decoding does, and counts, for each place 1..D of the chain it finds, how often that draft
is the next greedy token where every draft before it was. The table in docs/speed.md ("Prompt lookup's odds by place")
came from it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mars_core.decoding.lookup import lookup_rows  # noqa: E402
from mars_core.decoding.verified import VerifiedConfig  # noqa: E402
from mars_core.evaluation.bench_llamacpp import serve, torch_threads  # noqa: E402
from mars_core.evaluation.prompts import split_prompts  # noqa: E402
from mars_core.generate import encode_prompt, generate  # noqa: E402


def odds_by_place(prompt: list[int], answer: list[int], ngrams: tuple[int, ...], width: int
                  ) -> tuple[int, list[int], list[int]]:
    """(places where lookup found a chain, matched[a], reached[a]) over the answer: draft a+1 is reached where
    drafts 1..a matched and the answer goes on that far."""
    text, found = prompt + answer, 0
    matched, reached = [0] * width, [0] * width
    for end in range(len(prompt), len(text) - 1):  # after committing text[:end + 1]
        (drafts,), (count,) = lookup_rows([text[: end + 1]], [0], [end + 1], ngrams, width)
        found += count > 0
        for a in range(min(count, len(text) - end - 1)):
            reached[a] += 1
            if drafts[a] != text[end + 1 + a]:
                break
            matched[a] += 1
    return found, matched, reached


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--weights", default="q8_0", help="f32, bf16 or q8_0")
    p.add_argument("--split", default="heldout", help="heldout or never_trained")
    p.add_argument("--prompts", type=int, default=18)
    p.add_argument("--max-new-tokens", type=int, default=64)
    args = p.parse_args()
    config = VerifiedConfig()
    served = serve(None, args.weights)
    found = places = 0
    matched, reached = [0] * config.lookup_drafts, [0] * config.lookup_drafts
    for record in split_prompts(args.split, args.prompts):
        with torch_threads(1):
            answer = generate(served.engine, served.tokenizer, record["prompt"], strategy="ar", block_size=1,
                              threshold=1.0, max_new_tokens=args.max_new_tokens).token_ids[0]
        prompt = encode_prompt(served.tokenizer, record["prompt"])
        f, m, r = odds_by_place(prompt, answer, config.lookup_ngrams, config.lookup_drafts)
        found, places = found + f, places + len(answer) - 1
        matched, reached = [a + b for a, b in zip(matched, m)], [a + b for a, b in zip(reached, r)]
    print(f"{args.weights} {args.split}: a lookup found a chain at {found} of {places} places")
    for a, (m, r) in enumerate(zip(matched, reached)):
        print(f"  draft {a + 1}: {m}/{r} matched = {m / max(r, 1):.2f}")


if __name__ == "__main__":
    main()
