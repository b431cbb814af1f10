"""Verified MARS decoding: the mask slots draft, the model's own next-token predictions check, in one forward.

Committed tokens c[0..n); drafts d_1..d_k for positions n..n+k-1, proposed by the previous forward's mask slots.
One forward feeds, under one explicit 4D mask (a tree):
    slots    [ pending | d_1 .. d_k | G_j | G_j' | ... ]
    pending  the committed tokens not yet cached (the last step's bonus token; the prompt at prefill)
    d_a      position n+a-1: sees the cache, the pending tokens and d_1 .. d_{a-1}
    G_j      g = B-1 mask tokens at positions n+j .. n+j+g-1 hanging after c + d_1..d_j: they see that prefix
             and the earlier masks of their own group only (j = 0..k; a group unlikely to be used is not fed)
Verify left to right: the prediction read at the last pending token is the exact AR token for position n; it is
compared with d_1, the prediction read at d_1 with d_2, and so on. With m drafts matching, commit d_1..d_m plus
the bonus token (the AR prediction after them): m+1 tokens, exactly what greedy AR produces. The next drafts are
G_m's predictions (mask t predicts position n+m+1+t: the right shift of training), kept left to right while their
confidence >= threshold: the threshold only prunes drafts, it never changes the answer. The cache keeps the
pending tokens and d_1..d_m (a prefix of what was fed; their keys/values saw real tokens only) and crops the rest
with crop(-r). If G_m was not fed, the next forward carries no drafts and hangs G_0 only. Logits are computed only
where they are read: the k+1 verify positions, then the g masks of the group each sample goes on with.

Which groups to feed: with draft confidences c_1..c_k, exactly j drafts match with probability about
    P(m = j) = c_1 ... c_j (1 - c_{j+1})        P(m = k) = c_1 ... c_k
and G_j is fed when P(m = j) >= GROUP_FLOOR: width goes where it is likely to pay.

A second draft source, prompt lookup: the tokens that followed the latest earlier occurrence of the text's last
3 (else 2) tokens in the prompt and the answer so far, up to LOOKUP_DRAFTS of them. A lookup token's confidence is
the mask draft's where both propose the same token (at least that likely), at most 1 - the mask draft's where they
differ, and LOOKUP_ODDS past the mask drafts. Per sample, the forward checks the chain with the longer expected run
of matches, sum_i c_1 ... c_i, each chain cut where its confidence falls below the threshold. Groups hang after
whichever chain is checked.

Sampling (temperature > 0) keeps the AR distribution with the speculative-sampling rule: a draft x drawn from its
mask slot's distribution q is accepted with probability min(1, p(x)/q(x)); at the first rejection the token is
drawn from max(0, p - q) renormalised, after the last fed draft from p. Whether a draft is fed depends on q alone
(its confidence), never on the drawn x, so the rule stays exact. A greedy draft's q is a point mass.

Batches: drafts, groups and the cache's holes are per sample, positions explicit; the layout (how many draft
columns, which group columns) is the union over samples. The threshold in force when a forward ends decides which
of its drafts the next forward checks; the one host sync per forward returns that layout.
"""

from __future__ import annotations

from collections.abc import Generator
from functools import lru_cache

import torch

from ..attention import as_model_mask
from .cache import left_pad, new_cache
from .control import DecodeControl
from .sampling import cap_at_stop, confidence_of, distribution, draw
from .spec import DecodeSpec, Step, write_out

GROUP_FLOOR = 0.1  # feed G_j when P(exactly j drafts match) >= this; measured in benchmarks/verified_layout.py
LOOKUP_DRAFTS = 7  # longest prompt-lookup chain checked in one forward (0: mask drafts only)
LOOKUP_NGRAMS = (3, 2)  # n-gram sizes matched, the longest that matches wins
LOOKUP_ODDS = 0.6  # a lookup draft's assumed chance of matching (it has no confidence of its own)


@lru_cache(maxsize=64)
def tree_template(pending: int, drafts: int, groups: tuple[int, ...], g: int) -> torch.Tensor:
    """Boolean [W, W] visibility among the fed slots: pending causal, drafts a chain after them, group G_j after
    the pending tokens and d_1..d_j, causal inside itself."""
    width = pending + drafts + len(groups) * g
    seen = torch.zeros(width, width, dtype=torch.bool)
    seen[:pending, :pending] = torch.ones(pending, pending, dtype=torch.bool).tril()
    d = slice(pending, pending + drafts)
    seen[d, :pending] = True
    seen[d, d] = torch.ones(drafts, drafts, dtype=torch.bool).tril()
    for c, j in enumerate(groups):
        s = slice(pending + drafts + c * g, pending + drafts + (c + 1) * g)
        seen[s, : pending + j] = True
        seen[s, s] = torch.ones(g, g, dtype=torch.bool).tril()
    return seen


def tree_mask(valid: torch.Tensor, fed_valid: torch.Tensor, template: torch.Tensor) -> torch.Tensor:
    """[b, W, T+W]: every fed slot sees the valid cache slots, and the fed slots its template allows and that are
    real. Each slot always sees itself, so no row is empty (an all-masked row gives NaN in SDPA)."""
    b, width = fed_valid.shape
    template = template.to(valid.device)
    fed = (template[None] & fed_valid[:, None, :]) | torch.eye(width, dtype=torch.bool, device=valid.device)
    return torch.cat([valid[:, None, :].expand(b, width, -1), fed], -1)


def leading(ok: torch.Tensor) -> torch.Tensor:
    """Length of the leading run of True per row."""
    return ok.long().cumprod(-1).sum(-1)


def group_odds(conf: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """[b, g+1]: P(exactly j of the first count[i] drafts match), the confidences read as independent odds."""
    c = torch.where(torch.arange(conf.shape[1], device=conf.device) < count[:, None], conf, 0.0)
    ones = torch.ones_like(c[:, :1])
    return torch.cat([ones, c.cumprod(-1)], 1) * (1 - torch.cat([c, 0 * ones], 1))


def lookup_drafts(seq: torch.Tensor, start: torch.Tensor, end: torch.Tensor, ngrams: tuple[int, ...],
                  width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompt lookup per row of seq [b, S] (text in start..end-1): the `width` tokens that followed the latest
    earlier occurrence of the row's last n tokens, for the longest n in ngrams that occurs. (drafts, count)."""
    b, size = seq.shape
    after = torch.full((b,), -1, dtype=torch.long, device=seq.device)  # where the continuation starts
    for n in sorted(ngrams):  # a longer match overrides a shorter one
        if size <= n:
            continue
        last = seq.gather(1, (end[:, None] - n + torch.arange(n, device=seq.device)).clamp(0, size - 1))
        at = torch.arange(size - n + 1, device=seq.device)
        hit = (seq.unfold(1, n, 1) == last[:, None, :]).all(-1) & (at >= start[:, None]) & (at + n < end[:, None])
        pos = torch.where(hit & (end - start > n)[:, None], at, -1).max(-1).values
        after = torch.where(pos >= 0, pos + n, after)
    count = torch.where(after >= 0, (end - after).clamp(0, width), 0)
    idx = (after.clamp_min(0)[:, None] + torch.arange(width, device=seq.device)).clamp_max(size - 1)
    return seq.gather(1, idx), count


def lookup_confidence(found: torch.Tensor, drafts: torch.Tensor, conf: torch.Tensor) -> torch.Tensor:
    """Confidence of each lookup token [b, D]: the mask draft's where the two agree, at most 1 - it where they
    differ, LOOKUP_ODDS where no mask draft says anything (conf 0 there)."""
    odds = torch.full_like(conf, LOOKUP_ODDS)
    return torch.where(found == drafts, torch.maximum(conf, odds), torch.minimum(odds, 1 - conf))


def expected_run(conf: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Expected number of leading matches, sum_i c_1 ... c_i over the first count[i] drafts."""
    c = torch.where(torch.arange(conf.shape[1], device=conf.device) < count[:, None], conf, 0.0)
    return c.cumprod(-1).sum(-1)


def widen(x: torch.Tensor, width: int, value: float) -> torch.Tensor:
    """x [b, k, ...] padded with `value` along dim 1 to `width`."""
    pad = torch.full((x.shape[0], width - x.shape[1], *x.shape[2:]), value, dtype=x.dtype, device=x.device)
    return torch.cat([x, pad], 1)


def speculative(p: torch.Tensor, drafts: torch.Tensor, q: torch.Tensor | None, fed: torch.Tensor,
                generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Speculative sampling over K drafts: (accepted count m [b], tokens [b, K+1] = accepted drafts, then the
    token drawn at slot m). p [b, K+1, V] is the model's distribution at each verify slot; q [b, K, V] the
    drafts' own (None: greedy drafts, a point mass each)."""
    b, k1, vocab = p.shape
    if q is None:
        q = torch.zeros(b, k1 - 1, vocab, device=p.device).scatter_(-1, drafts[..., None], 1.0)
    q = torch.cat([q * fed[..., None], torch.zeros_like(p[:, :1])], 1)  # nothing to subtract after the last draft
    p_d = p[:, :-1].gather(-1, drafts[..., None]).squeeze(-1)
    q_d = q[:, :-1].gather(-1, drafts[..., None]).squeeze(-1)
    u = torch.rand(p_d.shape, generator=generator, device=p.device)
    m = leading((u * q_d <= p_d) & fed)  # accept x with probability min(1, p(x)/q(x))
    at = m[:, None, None].expand(-1, 1, vocab)
    rest = (p.gather(1, at) - q.gather(1, at)).clamp_min(0).squeeze(1)  # residual max(0, p - q) at slot m
    rest = torch.where(rest.sum(-1, keepdim=True) > 0, rest, p.gather(1, at).squeeze(1))
    y = draw(rest / rest.sum(-1, keepdim=True), generator)
    slots = torch.arange(k1, device=p.device)
    padded = torch.cat([drafts, y[:, None]], 1)
    return m, torch.where(slots < m[:, None], padded, y[:, None])


@torch.inference_mode()
def verified_decode(
    model: torch.nn.Module, prompts: list[list[int]], spec: DecodeSpec, control: DecodeControl
) -> Generator[Step, torch.Tensor | None, None]:
    """Yield one Step per forward. send() a bool [b] tensor to stop samples (stop strings)."""
    dev, b, g = model.device, len(prompts), spec.block_size - 1
    look = LOOKUP_DRAFTS if g > 0 else 0
    D = max(g, look)  # the longest draft chain a forward may check
    body, head = model.get_decoder(), model.get_output_embeddings()
    mask_id = spec.mask_id if g > 0 else spec.pad_id
    pending, pending_valid = left_pad(prompts, spec.pad_id, dev)  # prefill is the first step's pending run
    prompt, text_start = pending, (~pending_valid).sum(1)  # the text lookup searches: prompt, then answer
    length = pending_valid.sum(1)  # committed tokens per sample, the pending ones included
    valid = torch.zeros((b, 0), dtype=torch.bool, device=dev)  # which cache slots hold real tokens
    drafts = torch.zeros((b, 0), dtype=torch.long, device=dev)
    fed = torch.zeros((b, 0), dtype=torch.bool, device=dev)  # which draft slots are real, per sample
    draft_q: torch.Tensor | None = None  # the drafts' distributions (None: greedy drafts)
    out = torch.full((b, spec.max_new_tokens + D + 1), spec.pad_id, dtype=torch.long, device=dev)
    generated = torch.zeros(b, dtype=torch.long, device=dev)
    done = torch.zeros(b, dtype=torch.bool, device=dev)
    zero = torch.zeros(b, dtype=torch.long, device=dev)
    ctl = control.snapshot()
    tau = ctl.threshold  # the threshold that chose the drafts the coming forward checks
    groups = (0,) if g > 0 and tau < 1.0 else ()  # prefill: G_0 after the prompt proposes the first drafts
    group_fed = torch.ones((b, D + 1), dtype=torch.bool, device=dev)
    drafted_by = torch.zeros(b, dtype=torch.bool, device=dev)  # the checked drafts came from prompt lookup
    cache = new_cache(model)
    while True:
        if control.stopped:
            return
        P, K = pending.shape[1], drafts.shape[1]
        cols = torch.tensor(groups, dtype=torch.long, device=dev)
        offsets = (cols[:, None] + torch.arange(g, device=dev)).reshape(-1)  # group j, mask t -> n + j + t
        ids = torch.cat([pending, drafts, torch.full((b, len(groups) * g), mask_id, device=dev)], 1)
        positions = length[:, None] + torch.cat([torch.arange(-P, K, device=dev), offsets])
        fed_valid = torch.cat([pending_valid, fed, group_fed[:, cols].repeat_interleave(g, 1)], 1)
        mask = tree_mask(valid, fed_valid, tree_template(P, K, groups, g))
        hidden = body(input_ids=ids, position_ids=positions.clamp_min(0), attention_mask=as_model_mask(mask, model),
                      past_key_values=cache, use_cache=True).last_hidden_state

        # verify: the prediction at slot P-1+a is the AR token for position n+a, drafts d_1.. are checked in order
        logits = head(hidden[:, P - 1 : P + K])
        p = distribution(logits, ctl)
        if ctl.temperature == 0:
            tokens = logits.float().argmax(-1)
            m = leading((tokens[:, :K] == drafts) & fed)
        else:
            m, tokens = speculative(p, drafts, draft_q, fed, spec.generator)
        conf = confidence_of(p, tokens, ctl.confidence)
        end = torch.minimum(m + 1, spec.max_new_tokens - generated)
        end, hit = cap_at_stop(tokens, zero, end, spec.stop_ids)
        end = torch.where(done, 0, end)
        done = done | hit | (generated + end >= spec.max_new_tokens)
        write_out(out, generated, tokens, zero, end)

        # the next drafts: the predictions of the group each sample goes on with (G_m), if it was fed
        column = torch.full((D + 1,), -1, dtype=torch.long, device=dev)
        column[cols] = torch.arange(len(groups), device=dev)
        has = (column[m] >= 0) & group_fed.gather(1, m[:, None]).squeeze(1) & ~done
        nxt = torch.full((b, g), spec.pad_id, dtype=torch.long, device=dev)
        nxt_conf = torch.zeros((b, g), device=dev)
        nxt_q = None
        if groups:
            rows = P + K + column[m].clamp_min(0)[:, None] * g + torch.arange(g, device=dev)
            group_logits = head(hidden.gather(1, rows[..., None].expand(-1, -1, hidden.shape[-1])))
            q = distribution(group_logits, ctl)
            top = group_logits.float().argmax(-1)
            nxt = top if ctl.temperature == 0 else draw(q, spec.generator)
            nxt_q = None if ctl.temperature == 0 else q
            nxt_conf = torch.where(has[:, None], confidence_of(q, top, ctl.confidence), 0.0)

        # the next forward's layout, with the threshold in force now: drafts while confident, groups while likely
        checked_with, ctl = tau, control.snapshot()
        tau = ctl.threshold
        nxt, nxt_conf = widen(nxt, D, spec.pad_id), widen(nxt_conf, D, 0.0)
        looked = torch.zeros(b, dtype=torch.bool, device=dev)
        if tau < 1.0 and g > 0:
            count = leading(nxt_conf >= tau)
            if look:  # prompt lookup over the prompt and the answer so far, where its chain promises more
                found, found_count = lookup_drafts(torch.cat([prompt, out], 1), text_start,
                                                   prompt.shape[1] + generated, LOOKUP_NGRAMS, look)
                found = widen(found, D, spec.pad_id)
                found_conf = lookup_confidence(found, nxt, nxt_conf)
                found_count = torch.minimum(found_count, leading(found_conf >= tau))
                looked = expected_run(found_conf, found_count) > expected_run(nxt_conf, count)
                nxt = torch.where(looked[:, None], found, nxt)
                nxt_conf = torch.where(looked[:, None], found_conf, nxt_conf)
                count = torch.where(looked, found_count, count)
                if nxt_q is not None:  # a lookup draft is a point mass
                    point = torch.zeros(b, D, nxt_q.shape[-1], device=dev).scatter_(-1, nxt[..., None], 1.0)
                    nxt_q = torch.where(looked[:, None, None], point, widen(nxt_q, D, 0.0))
            likely = group_odds(nxt_conf, count) >= GROUP_FLOOR
            group_fed = (torch.arange(D + 1, device=dev) <= count[:, None]) & likely & ~done[:, None]
        else:  # no draft is worth checking: plain one-token forwards from here on
            count, group_fed = zero, torch.zeros((b, D + 1), dtype=torch.bool, device=dev)
        host = torch.cat([done.long(), m, count, group_fed.any(0).long()]).tolist()  # the one host sync
        dones, ms, counts = host[:b], host[b : 2 * b], host[2 * b : 3 * b]
        groups = tuple(j for j in range(D + 1) if host[3 * b + j])
        stop = yield Step(tokens, conf, zero, end, [bool(d) for d in dones], checked_with, out, generated,
                          drafts=drafts, drafted=fed.sum(1), matched=torch.minimum(m, end), looked_up=drafted_by)
        if stop is not None:
            done = done | stop.to(dev)
            group_fed &= ~done[:, None]
        if bool(done.all()):
            return
        kept = max(ms)  # the fed slots that stay in the cache: pending, then the matched drafts (holes elsewhere)
        if ids.shape[1] > P + kept:
            cache.crop(-(ids.shape[1] - P - kept))
        valid = torch.cat([valid, pending_valid, (fed & (torch.arange(K, device=dev) < m[:, None]))[:, :kept]], 1)
        length = length + m + 1
        pending, pending_valid = tokens.gather(1, m[:, None]), ~done[:, None]
        most = max(counts)
        drafts = nxt[:, :most]
        fed = (torch.arange(most, device=dev) < count[:, None]) & ~done[:, None]
        draft_q = None if nxt_q is None else nxt_q[:, :most]
        drafted_by = looked
