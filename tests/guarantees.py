"""The decoders' guarantee under a served runtime, checked one way wherever a test needs it: verified decoding is
one-token decoding, and a batch's answers are each prompt's answer alone."""

from __future__ import annotations

from mars_core import GenerationResult, generate


def one_token_everywhere(model, tokenizer, prompts: list[str], runtime, max_new_tokens: int = 16
                         ) -> tuple[GenerationResult, GenerationResult]:
    """One-token decoding of the prompts as a batch, verified decoding of them (B = 4) and each prompt alone under
    `runtime`, asserted token for token the same; (one-token, verified) results, for a test's further checks."""
    kw = dict(max_new_tokens=max_new_tokens, runtime=runtime)
    ar = generate(model, tokenizer, prompts, strategy="ar", **kw)
    verified = generate(model, tokenizer, prompts, strategy="verified", block_size=4, **kw)
    alone = [generate(model, tokenizer, p, strategy="ar", **kw).token_ids[0] for p in prompts]
    assert verified.token_ids == ar.token_ids == alone
    return ar, verified
