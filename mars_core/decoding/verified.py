"""Verified MARS decoding: the mask slots draft, the model's own next-token predictions check, in one forward.

Committed tokens c[0..n); drafts d_1..d_k for positions n..n+k-1, proposed by the previous forward's mask slots.
One forward feeds, under one explicit 4D mask (a tree):
    slots    [ pending | d_1 .. d_k | G_j | G_j' | ... | e_a H_a | e_a' H_a' | ... ]
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
where they are read: the k+1 verify positions and the g masks of the group each sample goes on with, in one pass
over the head's weights when the other groups' rows cost less than a second pass (read_logits).

Siblings: beside d_a, the tree may feed e_a, the second choice of the mask slot that proposed d_a (same position,
after c + d_1..d_{a-1}), with its own group H_a of g masks after it. Where d_{m+1} misses and e_{m+1} is AR's
token there, e_{m+1} counts as matched, the bonus is read at e_{m+1}'s slot (m+2 tokens committed) and H_{m+1}
proposes the next drafts. e_a is used with probability about c_1 ... c_{a-1} q2_a (q2_a: its probability at the
slot); the cache keeps the chain only, and a matched sibling is fed again next forward as a pending token beside
the bonus. Greedy mask chains only: lookup chains have no second choice, and sampling checks a chain.

Which groups to feed: with draft confidences c_1..c_k, exactly j drafts match with probability about
    P(m = j) = c_1 ... c_j (1 - c_{j+1})        P(m = k) = c_1 ... c_k
With the machine's cost curve t(batch, width) (layout.cost, else the runtime's: prepare() measures it),
plan_by_cost picks the draft cap and the floor that maximise expected committed tokens per second of forward (a
sibling at or above layout.sibling_floor is priced like a group: fed where its odds pass the floor), and a forward
where no tree pays is a plain one-token forward; without one, G_j is fed when P(m = j) >= layout.group_floor and
e_a when P(e_a is used) >= layout.sibling_floor.

A second draft source, prompt lookup (lookup.py): the tokens that followed the latest earlier occurrence of the
text's last 3 (else 2) tokens in the prompt and the answer so far, up to layout.lookup_drafts of them. Per sample,
the forward checks the chain with the longer expected run of matches, sum_i c_1 ... c_i, each chain cut where its
confidence falls below the threshold. Groups hang after whichever chain is checked.

Sampling (temperature > 0) keeps the AR distribution with the speculative-sampling rule: a draft x drawn from its
mask slot's distribution q is accepted with probability min(1, p(x)/q(x)); at the first rejection the token is
drawn from max(0, p - q) renormalised, after the last fed draft from p. Whether a draft is fed depends on q alone
(its confidence), never on the drawn x, so the rule stays exact. A greedy draft's q is a point mass.

Batches: drafts, groups and the cache's holes are per sample, positions explicit; the layout (how many draft
columns, which group columns) is the union over samples. The threshold in force when a forward ends decides which
of its drafts the next forward checks; the one host sync per forward returns that layout.

One forward is four phases, a function each: feed the tree (tree_inputs builds what is fed), verify (greedy or
speculative), choose the next chain (mask group or lookup, and the groups to hang after it), commit and crop. The
loop carries two small states: Answer (what is committed, what the cache holds) and Tree (what the coming forward
feeds). A caller that asks (DecodeSpec.record) gets each forward's Forward record: what was fed, down to the exact
mask, and what was decided; the app's walkthrough draws verified decoding from these.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import accumulate

import torch

from ..runtime.forward import head, hidden_states, new_cache
from .cache import left_pad
from .control import DecodeControl
from .lookup import expected_run, lookup_confidence, lookup_drafts
from .sampling import cap_at_stop, confidence_of, distribution, draw, greedy
from .spec import DecodeSpec, Step, TreeLayout, write_out


@dataclass
class Answer:
    """What is committed so far, per sample, and what the cache holds."""

    prompt: torch.Tensor  # [b, S] the left-padded prompts: lookup searches them, then `out`
    text_start: torch.Tensor  # [b] first real prompt slot
    out: torch.Tensor  # [b, max_new_tokens + D + 1] committed answer tokens (write_out's buffer)
    generated: torch.Tensor  # [b] answer tokens committed
    done: torch.Tensor  # [b] finished: stop token, max_new_tokens or a stop request
    length: torch.Tensor  # [b] n, tokens committed in the sequence (prompt and answer, pending ones included)
    valid: torch.Tensor  # [b, T] which cache slots hold real tokens
    draft_yield: torch.Tensor  # [] drafts matched per sample and forward when there were drafts (running mean)
    lookup_hits: torch.Tensor  # [b] prompt-lookup drafts matched so far
    lookup_tries: torch.Tensor  # [b] prompt-lookup drafts reached so far (matched, or the first miss of a chain)


@dataclass
class Tree:
    """What the coming forward feeds after the cache: [ pending | d_1 .. d_K | G_j for j in groups ]."""

    pending: torch.Tensor  # [b, P] committed tokens not yet cached (the bonus token; the prompt at prefill)
    pending_valid: torch.Tensor  # [b, P] real (not left padding, not a finished sample)
    drafts: torch.Tensor  # [b, K] d_1 .. d_K for positions n .. n+K-1
    fed: torch.Tensor  # [b, K] which drafts are real, per sample
    q: torch.Tensor | None  # [b, K, V] the drafts' own distributions (None: point masses, as greedy drafts are)
    looked: torch.Tensor  # [b] the drafts came from prompt lookup (else from the mask slots)
    groups: tuple[int, ...]  # the j of each G_j hung in this forward, the union over samples
    group_fed: torch.Tensor  # [b, D+1] G_j is real for sample i
    threshold: float  # the threshold that chose these drafts
    siblings: tuple[int, ...] = ()  # the a of each sibling e_a (with its group H_a) fed, the union over samples
    sibling_ids: torch.Tensor | None = None  # [b, K] e_a: the second choice of d_a's mask slot
    sibling_fed: torch.Tensor | None = None  # [b, K] e_a (and H_a) is real for sample i


@dataclass
class Chain:
    """The drafts proposed for the next forward, padded to D: only the first `count` per sample are checked."""

    tokens: torch.Tensor  # [b, D]
    conf: torch.Tensor  # [b, D] c_1 .. c_D (0 where nothing was proposed)
    q: torch.Tensor | None  # [b, D, V] their distributions when sampling (None: greedy)
    count: torch.Tensor  # [b] leading drafts kept: confidence >= threshold (set by next_chain)
    looked: torch.Tensor  # [b] prompt lookup's chain won over the mask slots'
    second: torch.Tensor | None = None  # [b, D] each mask slot's second choice (greedy mask chains only)
    second_p: torch.Tensor | None = None  # [b, D] its probability (0 where there is none)


@dataclass
class Forward:
    """One forward as a caller that asked for it sees it (DecodeSpec.record): what it fed, what it verified, and
    what it chose for the next forward. Teaching and debugging only; the decoder never reads it back."""

    tree: Tree  # what it fed
    ids: torch.Tensor  # [b, W] the tokens fed: pending, drafts, then the masks of each group
    positions: torch.Tensor  # [b, W] their positions
    mask: torch.Tensor  # [b, W, T+W] the boolean mask fed (True = attend): the cache's T slots, then the W fed
    m: torch.Tensor  # [b] drafts matched
    tokens: torch.Tensor  # [b, K+1] the token chosen at each verify slot: tokens[:, :m] the drafts, tokens[m] bonus
    confidence: torch.Tensor  # [b, K+1] their confidences
    proposed: Chain  # G_m's predictions, the mask slots' chain (before prompt lookup and the threshold)
    chain: Chain  # the drafts the next forward checks: the first count[i]; looked: prompt lookup's chain won
    group_fed: torch.Tensor  # [b, D+1] the groups G_j hung after them in the next forward
    odds: torch.Tensor  # [b, D+1] P(exactly j of those drafts match), the odds the groups were chosen by
    seconds: torch.Tensor | None  # seconds of a forward by tokens fed, the trees were sized by (None: fixed rules)
    by_sibling: torch.Tensor | None = None  # [b] the m-th matched token was the sibling e_m, not d_m
    sibling_fed: torch.Tensor | None = None  # [b, D] the siblings e_a (with H_a) fed beside the next drafts


@lru_cache(maxsize=64)
def tree_template(pending: int, drafts: int, groups: tuple[int, ...], g: int, siblings: tuple[int, ...] = ()
                  ) -> torch.Tensor:
    """Boolean [W, W] visibility among the fed slots: pending causal, drafts a chain after them, group G_j after
    the pending tokens and d_1..d_j, causal inside itself; sibling e_a beside d_a (after the pending tokens and
    d_1..d_{a-1}), its group H_a after e_a."""
    width = pending + drafts + len(groups) * g + len(siblings) * (1 + g)
    seen = torch.zeros(width, width, dtype=torch.bool)
    seen[:pending, :pending] = torch.ones(pending, pending, dtype=torch.bool).tril()
    d = slice(pending, pending + drafts)
    seen[d, :pending] = True
    seen[d, d] = torch.ones(drafts, drafts, dtype=torch.bool).tril()
    for c, j in enumerate(groups):
        s = slice(pending + drafts + c * g, pending + drafts + (c + 1) * g)
        seen[s, : pending + j] = True
        seen[s, s] = torch.ones(g, g, dtype=torch.bool).tril()
    for c, a in enumerate(siblings):
        e = pending + drafts + len(groups) * g + c * (1 + g)
        s = slice(e, e + 1 + g)  # e_a, then H_a's masks: a causal run after c + d_1..d_{a-1}
        seen[s, : pending + a - 1] = True
        seen[s, s] = torch.ones(1 + g, 1 + g, dtype=torch.bool).tril()
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


def widen(x: torch.Tensor, width: int, value: float) -> torch.Tensor:
    """x [b, k, ...] padded with `value` along dim 1 to `width`."""
    pad = torch.full((x.shape[0], width - x.shape[1], *x.shape[2:]), value, dtype=x.dtype, device=x.device)
    return torch.cat([x, pad], 1)


def to_host(*tensors: torch.Tensor) -> list[list[int]]:
    """The tensors' values as Python lists, in one device-to-host copy (one sync per forward)."""
    flat = torch.cat([t.reshape(-1).long() for t in tensors]).tolist()
    sizes = [t.numel() for t in tensors]
    return [flat[end - n : end] for end, n in zip(accumulate(sizes), sizes)]


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


def start(prompts: list[list[int]], spec: DecodeSpec, threshold: float, dev: torch.device, depth: int
          ) -> tuple[Answer, Tree]:
    """Nothing committed; the first forward is the prefill, with G_0 after the prompt to propose the first drafts."""
    b, g = len(prompts), spec.block_size - 1
    pending, pending_valid = left_pad(prompts, spec.pad_id, dev)
    none = torch.zeros(b, dtype=torch.long, device=dev)
    answer = Answer(prompt=pending, text_start=(~pending_valid).sum(1), generated=none, done=none.bool(),
                    out=torch.full((b, spec.max_new_tokens + depth + 1), spec.pad_id, dtype=torch.long, device=dev),
                    length=pending_valid.sum(1), valid=torch.zeros((b, 0), dtype=torch.bool, device=dev),
                    draft_yield=torch.tensor(1.0, device=dev), lookup_hits=torch.zeros(b, device=dev),
                    lookup_tries=torch.zeros(b, device=dev))
    tree = Tree(pending, pending_valid, drafts=pending[:, :0], fed=pending_valid[:, :0], q=None, looked=none.bool(),
                groups=(0,) if g > 0 and threshold < 1.0 else (), threshold=threshold,
                group_fed=torch.ones((b, depth + 1), dtype=torch.bool, device=dev))
    return answer, tree


def tree_inputs(answer: Answer, tree: Tree, g: int, mask_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What the forward over the tree feeds: ids [b, W], positions [b, W] and the boolean mask [b, W, T+W] (True =
    attend; the cache's T slots, then the W fed). Positions: pending n-P .. n-1, d_a n+a-1, mask t of G_j n+j+t,
    e_a n+a-1 and mask t of H_a n+a+t."""
    (b, P), K, dev = tree.pending.shape, tree.drafts.shape[1], tree.pending.device
    cols = torch.tensor(tree.groups, dtype=torch.long, device=dev)
    offsets = (cols[:, None] + torch.arange(g, device=dev)).reshape(-1)
    parts = [tree.pending, tree.drafts, torch.full((b, len(cols) * g), mask_id, device=dev)]
    places = [torch.arange(-P, K, device=dev), offsets]
    fed = [tree.pending_valid, tree.fed, tree.group_fed[:, cols].repeat_interleave(g, 1)]
    if tree.siblings:
        at = torch.tensor(tree.siblings, dtype=torch.long, device=dev) - 1  # e_a's column among the drafts
        masks = torch.full((b, len(at), g), mask_id, device=dev)
        parts.append(torch.cat([tree.sibling_ids[:, at, None], masks], 2).reshape(b, -1))
        places.append((at[:, None] + torch.arange(1 + g, device=dev)).reshape(-1))
        fed.append(tree.sibling_fed[:, at].repeat_interleave(1 + g, 1))
    ids = torch.cat(parts, 1)
    positions = answer.length[:, None] + torch.cat(places)
    template = tree_template(P, K, tree.groups, g, tree.siblings)
    return ids, positions, tree_mask(answer.valid, torch.cat(fed, 1), template)


# A forward's logits come from the head (V x H, here 49152 x 576: a fifth of the model's weights), whose cost is
# mostly one read of its weights: on the 2-core EPYC (fp32, packed) 5 ms for 1 to 8 rows, then about 0.25 ms a row.
# So the verify slots and every fed group's masks are read in one pass unless the rows no sample goes on with
# (the other groups') outnumber this; above it, a second pass reads G_m's rows alone.
SPARE_HEAD_ROWS = 16


def sibling_columns(tree: Tree, g: int) -> torch.Tensor:
    """[S] the column of each fed sibling e_a in the tree (its group H_a's g masks follow it)."""
    start = tree.pending.shape[1] + tree.drafts.shape[1] + len(tree.groups) * g
    return start + torch.arange(len(tree.siblings), device=tree.pending.device) * (1 + g)


def read_logits(head: Callable[[torch.Tensor], torch.Tensor], hidden: torch.Tensor, tree: Tree, g: int
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logits of the verify slots [b, K+1+S, V]: the last pending token's, the drafts', then each sibling's; of
    every slot from the last pending token on [b, W-P+1, V], or None): the groups' masks in the same pass when the
    rows no sample goes on with are few (SPARE_HEAD_ROWS), else mask_chain reads the group it needs."""
    P, K = tree.pending.shape[1], tree.drafts.shape[1]
    verify_cols = torch.cat([torch.arange(P - 1, P + K, device=hidden.device), sibling_columns(tree, g)])
    spare = (len(tree.groups) - 1 + len(tree.siblings)) * g  # rows past the verify slots and one group
    if (tree.groups or tree.siblings) and hidden.shape[0] * spare <= SPARE_HEAD_ROWS:
        logits = head(hidden[:, P - 1 :])
        return logits[:, verify_cols - (P - 1)], logits
    return head(hidden[:, verify_cols]), None


def verify(logits: torch.Tensor, tree: Tree, ctl, generator: torch.Generator | None
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(m, tokens [b, K+1], confidences, by_sibling [b]) from the verify slots' logits: slot P-1+a predicts
    position n+a, so greedy m is the leading run of d_a == argmax at slot P-2+a; tokens[m] is the bonus. Where
    d_{m+1} missed and its sibling e_{m+1} is that argmax, e_{m+1} counts as matched and the bonus is read at
    e_{m+1}'s slot (m+2 tokens). Sampling: the speculative rule instead of equality (no siblings are fed)."""
    K = tree.drafts.shape[1]
    if ctl.temperature == 0:
        chosen, sure = greedy(logits, ctl.confidence)  # every verify row's argmax and its confidence
        tokens, conf = chosen[:, : K + 1], sure[:, : K + 1]
        m = leading((tokens[:, :K] == tree.drafts) & tree.fed)
    else:
        p = distribution(logits, ctl)
        m, tokens = speculative(p[:, : K + 1], tree.drafts, tree.q, tree.fed, generator)
        conf = confidence_of(p[:, : K + 1], tokens, ctl.confidence)
    by_sibling = torch.zeros_like(m, dtype=torch.bool)
    if tree.siblings and ctl.temperature == 0:
        column = torch.full((K + 2,), -1, dtype=torch.long, device=m.device)  # depth a -> e_a's verify row
        column[list(tree.siblings)] = torch.arange(len(tree.siblings), device=m.device) + K + 1
        c, at = column[m + 1], m.clamp_max(K - 1)[:, None]
        by_sibling = ((m < K) & (c >= 0) & tree.sibling_fed.gather(1, at).squeeze(1)
                      & (tree.sibling_ids.gather(1, at) == tokens.gather(1, m[:, None])).squeeze(1))
        row = c.clamp_min(0)[:, None]
        after, after_conf = chosen.gather(1, row), sure.gather(1, row)  # [b, 1] the AR token after e_{m+1}
        slot = (m + 1).clamp_max(K)[:, None]
        tokens = tokens.scatter(1, slot, torch.where(by_sibling[:, None], after, tokens.gather(1, slot)))
        conf = conf.scatter(1, slot, torch.where(by_sibling[:, None], after_conf, conf.gather(1, slot)))
        m = m + by_sibling
    return m, tokens, conf, by_sibling


def commit(answer: Answer, tokens: torch.Tensor, m: torch.Tensor, spec: DecodeSpec) -> torch.Tensor:
    """Append tokens[:, :m+1] (cut at max_new_tokens and after a stop token) to the answer; returns end [b]."""
    zero = torch.zeros_like(m)
    end = torch.minimum(m + 1, spec.max_new_tokens - answer.generated)
    end, hit = cap_at_stop(tokens, zero, end, spec.stop_ids)
    end = torch.where(answer.done, 0, end)
    answer.done = answer.done | hit | (answer.generated + end >= spec.max_new_tokens)
    write_out(answer.out, answer.generated, tokens, zero, end)  # also advances generated
    return end


def mask_chain(head: Callable[[torch.Tensor], torch.Tensor], hidden: torch.Tensor, all_logits: torch.Tensor | None,
               tree: Tree, m: torch.Tensor, by_sibling: torch.Tensor, done: torch.Tensor, ctl, spec: DecodeSpec,
               depth: int) -> Chain:
    """The next drafts from the group each sample goes on with, G_m (or H_m where e_m matched): mask t predicts
    position n+m+1+t. The argmax, or a draw when sampling, with the argmax's confidence; confidence 0 where that
    group was not fed. Greedy chains also carry each slot's second choice and its probability (the siblings the
    next forward may feed). The group's logits are read from all_logits where read_logits computed them, else
    from its hidden rows."""
    b, g, dev = hidden.shape[0], spec.block_size - 1, hidden.device
    tokens = torch.full((b, depth), spec.pad_id, dtype=torch.long, device=dev)
    if not tree.groups and not tree.siblings:
        return Chain(tokens, torch.zeros((b, depth), device=dev), None, torch.zeros_like(m), torch.zeros_like(done))
    P, K = tree.pending.shape[1], tree.drafts.shape[1]
    index = torch.full((depth + 1,), -1, dtype=torch.long, device=dev)  # G_j -> its place among the fed groups
    if tree.groups:
        index[list(tree.groups)] = torch.arange(len(tree.groups), device=dev)
    start = P + K + index[m].clamp_min(0) * g  # the first mask of G_m among the fed slots
    has = (index[m] >= 0) & tree.group_fed.gather(1, m[:, None]).squeeze(1)
    if tree.siblings:  # H_m's masks follow e_m
        place = torch.zeros((depth + 1,), dtype=torch.long, device=dev)
        place[list(tree.siblings)] = sibling_columns(tree, g) + 1
        start, has = torch.where(by_sibling, place[m], start), has | by_sibling
    has = has & ~done
    rows = start[:, None] + torch.arange(g, device=dev)
    if all_logits is not None:
        logits = all_logits[torch.arange(b, device=dev)[:, None], rows - (P - 1)]  # indexing: 4x gather's speed
    else:
        logits = head(hidden.gather(1, rows[..., None].expand(-1, -1, hidden.shape[-1])))
    none = torch.zeros_like(m), torch.zeros_like(done)
    if ctl.temperature > 0:
        q = distribution(logits, ctl)
        conf = torch.where(has[:, None], confidence_of(q, logits.float().max(-1).indices, ctl.confidence), 0.0)
        return Chain(widen(draw(q, spec.generator), depth, spec.pad_id), widen(conf, depth, 0.0),
                     widen(q, depth, 0.0), *none)
    logits = logits.float()
    top = logits.max(-1).indices  # the first of equal maxima, as verify's greedy() takes
    q = logits.softmax(-1)
    conf = confidence_of(q, top, ctl.confidence)
    second = q.scatter(-1, top[..., None], -1.0).max(-1).indices  # the runner-up (topk(2) is ~10x slower here)
    second_p = torch.where(has[:, None], q.gather(-1, second[..., None]).squeeze(-1), 0.0)
    return Chain(widen(top, depth, spec.pad_id), widen(torch.where(has[:, None], conf, 0.0), depth, 0.0), None,
                 *none, widen(second, depth, spec.pad_id), widen(second_p, depth, 0.0))


def with_lookup(chain: Chain, answer: Answer, threshold: float, layout: TreeLayout, pad_id: int) -> Chain:
    """Per sample, the mask chain or prompt lookup's over the prompt and the answer so far, whichever promises
    the longer run of matches (each cut where its confidence falls below the threshold)."""
    b, depth = chain.tokens.shape
    count = leading(chain.conf >= threshold)
    if layout.lookup_drafts == 0:
        return Chain(chain.tokens, chain.conf, chain.q, count, chain.looked, chain.second, chain.second_p)
    text = torch.cat([answer.prompt, answer.out], 1)
    found, found_count = lookup_drafts(text, answer.text_start, answer.prompt.shape[1] + answer.generated,
                                       layout.lookup_ngrams, layout.lookup_drafts)
    found = widen(found, depth, pad_id)
    found_conf = lookup_confidence(found, chain.tokens, chain.conf, lookup_odds(answer, layout))
    found_count = torch.minimum(found_count, leading(found_conf >= threshold))
    looked = expected_run(found_conf, found_count) > expected_run(chain.conf, count)
    q = chain.q
    if q is not None:  # a lookup draft is a point mass
        point = torch.zeros_like(q).scatter_(-1, found[..., None], 1.0)
        q = torch.where(looked[:, None, None], point, q)
    pick = looked[:, None]
    second_p = None if chain.second_p is None else torch.where(pick, 0.0, chain.second_p)  # lookup has no second
    return Chain(torch.where(pick, found, chain.tokens), torch.where(pick, found_conf, chain.conf), q,
                 torch.where(looked, found_count, count), looked, chain.second, second_p)


LOOKUP_PRIOR = 4.0  # pseudo-drafts at layout.lookup_odds that a sample's own lookup record is added to


def lookup_odds(answer: Answer, layout: TreeLayout) -> torch.Tensor:
    """[b, 1] a lookup draft's chance of matching, given the ones before it matched, per sample: its own record of
    lookup drafts reached and matched, on a prior of LOOKUP_PRIOR drafts at layout.lookup_odds (a text that
    repeats itself, such as a table or a list, soon reads near 0.9; one that does not, lower)."""
    odds = (LOOKUP_PRIOR * layout.lookup_odds + answer.lookup_hits) / (LOOKUP_PRIOR + answer.lookup_tries)
    return odds[:, None]


def track_lookup(answer: Answer, tree: Tree, m: torch.Tensor) -> None:
    """Add this forward's lookup drafts to each sample's record: m matched of min(m + 1, k) reached."""
    k = tree.fed.sum(1)
    looked = tree.looked & (k > 0)
    answer.lookup_hits = answer.lookup_hits + torch.where(looked, m, 0)
    answer.lookup_tries = answer.lookup_tries + torch.where(looked, torch.minimum(m + 1, k), 0)


FLOORS = (2.0, 0.5, 0.35, 0.2, 0.1, 0.05, 0.0)  # group floors plan_by_cost tries, narrowest first (2.0: no group)
YIELD_WEIGHT = 0.3  # weight of the newest forward in the running mean of drafts matched
# What a fed group is worth now, per draft it is expected to get matched next forward: those drafts are checked
# next forward at that forward's width cost, and that forward's plan counts their commits again, so counting them
# whole here counts them twice. Half measured best (mars-bench, 2-core EPYC, fp32, packed layers; 1 / 0.5 / 0):
# batch 8 0.93x / 1.07x / 1.03x generate, batch 1 2.09x / 2.12x / 1.80x, never-trained 1.46x / 1.58x / 1.28x.
GROUP_YIELD_WEIGHT = 0.5


def seconds_by_width(spec: DecodeSpec, b: int, depth: int, dev: torch.device) -> torch.Tensor | None:
    """[W+1] seconds of a forward by tokens fed per sample, up to the widest tree, for this batch size (None: no
    cost-aware layout)."""
    curve = (spec.layout.cost or spec.runtime.cost) if spec.layout.use_cost else None
    if curve is None or spec.block_size == 1:
        return None
    g = spec.block_size - 1
    widest = 2 + depth + (depth + 1) * g + depth * (1 + g)  # two pending, the drafts, every group and sibling
    return torch.tensor(curve.at(b, range(widest + 1)), dtype=torch.float32, device=dev)


def sibling_odds(chain: Chain, count: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
    """[b, D]: P(e_a is used) = P(d_1..d_{a-1} match and the token at d_a's place is e_a) ~ c_1 ... c_{a-1} q2_a,
    for a <= count (0 elsewhere, and for lookup chains and sampling, which have no second choice)."""
    b, depth = chain.conf.shape
    if chain.second_p is None:
        return torch.zeros_like(chain.conf)
    reach = torch.cat([torch.ones_like(chain.conf[:, :1]), chain.conf[:, :-1].cumprod(-1)], 1)
    drafted = torch.arange(depth, device=count.device) < count[:, None]
    return torch.where(drafted & ~done[:, None], reach * chain.second_p, 0.0)


def plan_by_cost(conf: torch.Tensor, count: torch.Tensor, done: torch.Tensor, seconds: torch.Tensor,
                 draft_yield: torch.Tensor, g: int, sib: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(count [b], group_fed [b, D+1], sibling_fed [b, D]) for the draft cap K and floor f that maximise
        (sum_i [1 + sum_{a <= K_i} c_1 ... c_a] + sum_i sum_{a fed} s_ia (1 + w y r)
         + w y r sum_i sum_{j fed} P_i(m = j)) / t(1 + K + |groups| g + |siblings| (1 + g))
    over K = 0..D and f in FLOORS, with K_i = min(K, count_i), s_ia = P(sibling e_a is used) (sibling_odds; it
    commits one token more and its group proposes the next drafts), G_j fed when P_i(m = j) >= f and e_a when
    s_ia >= f, y the drafts a fed group's proposals are expected to get matched (draft_yield), w =
    GROUP_YIELD_WEIGHT and t the cost curve at this batch size; r = t(1) / t(1 + g) prices those drafts in the
    forwards that will check them (about 1 at batch 1 on a CPU, 0.5 at batch 8). K = 0 with no group is a plain
    one-token forward, so a tree is fed only where it is expected to commit more tokens per second than that."""
    b, depth = conf.shape
    live = ~done
    steps = torch.arange(depth + 1, device=conf.device)
    capped = torch.minimum(count[None, :], steps[:, None])  # [K, b]
    run = torch.cat([torch.zeros_like(conf[:, :1]), conf.cumprod(-1)], 1).cumsum(-1)  # run[i, a] = sum_{l<=a} c_1..c_l
    tokens = ((1 + run.gather(1, capped.T)).T * live).sum(-1)  # [K] expected commits, over live samples
    odds = group_odds(conf.repeat(depth + 1, 1), capped.reshape(-1)).view(depth + 1, b, depth + 1)  # [K, b, j]
    eligible = (steps <= capped[..., None]) & live[:, None]
    floors = torch.tensor(FLOORS, device=conf.device)
    fed = eligible[:, None] & (odds[:, None] >= floors[None, :, None, None])  # [K, f, b, j]
    sib = torch.zeros_like(conf) if sib is None else sib
    sib_fed = ((steps[:-1] < capped[..., None])[:, None] & (sib[None, None] >= floors[None, :, None, None])
               & (sib > 0))  # [K, f, b, a]
    width = 1 + (capped * live).amax(-1)[:, None] + fed.any(2).sum(-1) * g + sib_fed.any(2).sum(-1) * (1 + g)
    checking = seconds[1] / seconds[min(1 + g, len(seconds) - 1)]  # a group's drafts are checked at that width
    # a group's proposals are worth at least one matched draft: the running yield moves only in forwards that check
    # drafts, so a low one would otherwise stop every group, and with them every later draft, for good
    proposals = GROUP_YIELD_WEIGHT * checking * draft_yield.clamp_min(1.0)
    gain = (tokens[:, None] + proposals * (odds[:, None] * fed).sum((-2, -1))
            + (1 + proposals) * (sib * sib_fed).sum((-2, -1)))
    best = (gain / seconds[width]).flatten().argmax()  # the first of equals: fewer drafts, fewer branches
    k, f = best // len(FLOORS), best % len(FLOORS)
    return capped[k], fed[k, f], sib_fed[k, f]


def next_chain(chain: Chain, answer: Answer, threshold: float, spec: DecodeSpec, seconds: torch.Tensor | None
               ) -> tuple[Chain, torch.Tensor, torch.Tensor]:
    """The drafts the next forward checks, [b, D+1] which groups hang after them and [b, D] which siblings beside
    them: by cost where there is a cost curve (plan_by_cost), else G_j is fed when j <= count and P(exactly j
    drafts match) >= the group floor, e_a when P(it is used) >= the sibling floor. At threshold 1 no draft is
    worth checking: a plain one-token forward."""
    b, depth = chain.tokens.shape
    if threshold >= 1.0 or spec.block_size == 1:
        none = torch.zeros(b, dtype=torch.bool, device=chain.tokens.device)
        return (Chain(chain.tokens, chain.conf, chain.q, none.long(), none), none[:, None].expand(b, depth + 1),
                none[:, None].expand(b, depth))
    chain = with_lookup(chain, answer, threshold, spec.layout, spec.pad_id)
    floor = spec.layout.sibling_floor
    sib = sibling_odds(chain, chain.count, answer.done) if floor is not None else torch.zeros_like(chain.conf)
    sib = torch.where(sib >= (floor or 0.0), sib, 0.0)  # below the sibling floor neither rule feeds one
    if seconds is not None:
        count, group_fed, sibling_fed = plan_by_cost(chain.conf, chain.count, answer.done, seconds,
                                                     answer.draft_yield, spec.block_size - 1, sib)
        return replace(chain, count=count), group_fed, sibling_fed
    likely = group_odds(chain.conf, chain.count) >= spec.layout.group_floor
    steps = torch.arange(depth + 1, device=chain.tokens.device)
    return chain, (steps <= chain.count[:, None]) & likely & ~answer.done[:, None], sib > 0


def track_yield(answer: Answer, tree: Tree, m: torch.Tensor) -> None:
    """Update the running mean of drafts matched per sample in forwards that checked drafts (no host sync)."""
    checked = tree.fed.any(1)
    n = checked.sum()
    mean = (m * checked).sum() / n.clamp_min(1)
    answer.draft_yield = torch.where(n > 0, (1 - YIELD_WEIGHT) * answer.draft_yield + YIELD_WEIGHT * mean,
                                     answer.draft_yield)


def crop(cache, answer: Answer, tree: Tree, m: torch.Tensor, by_sibling: torch.Tensor, kept: int, g: int) -> None:
    """The cache keeps the pending tokens and the first `kept` drafts (the most any sample matched on the chain;
    the others' unmatched ones stay as holes) and drops the rest, siblings included (a matched sibling is fed again
    as a pending token); the answer's sequence grows by m+1."""
    P, K = tree.pending.shape[1], tree.drafts.shape[1]
    width = P + K + len(tree.groups) * g + len(tree.siblings) * (1 + g)
    if width > P + kept:
        cache.crop(-(width - P - kept))
    matched = tree.fed & (torch.arange(K, device=m.device) < (m - by_sibling.long())[:, None])
    answer.valid = torch.cat([answer.valid, tree.pending_valid, matched[:, :kept]], 1)
    answer.length = answer.length + m + 1


def grow(tokens: torch.Tensor, m: torch.Tensor, by_sibling: torch.Tensor, any_sibling: bool, chain: Chain,
         groups: tuple[int, ...], group_fed: torch.Tensor, siblings: tuple[int, ...], sibling_fed: torch.Tensor,
         done: torch.Tensor, drafts: int, threshold: float) -> Tree:
    """The next tree: the bonus token pending (after the matched sibling, where one matched: it was not cached),
    the chain's first `drafts` tokens (the longest count), its groups and siblings."""
    live = ~done
    pending, pending_valid = tokens.gather(1, m[:, None]), live[:, None]
    if any_sibling:
        pending = torch.cat([tokens.gather(1, (m - 1).clamp_min(0)[:, None]), pending], 1)
        pending_valid = torch.cat([(by_sibling & live)[:, None], pending_valid], 1)
    second = None if chain.second is None else chain.second[:, :drafts]
    return Tree(pending=pending, pending_valid=pending_valid, drafts=chain.tokens[:, :drafts],
                fed=(torch.arange(drafts, device=m.device) < chain.count[:, None]) & live[:, None],
                q=None if chain.q is None else chain.q[:, :drafts], looked=chain.looked, groups=groups,
                group_fed=group_fed & live[:, None], threshold=threshold, siblings=siblings,
                sibling_ids=second, sibling_fed=sibling_fed[:, :drafts] & live[:, None] if siblings else None)


def checked_path(tree: Tree, m: torch.Tensor, by_sibling: torch.Tensor) -> torch.Tensor:
    """[b, K] the drafts checked along the branch each sample took: d_1..d_K, with e_m in d_m's place where the
    sibling matched (what the stream reports as this forward's drafts)."""
    if not tree.siblings:
        return tree.drafts
    at = (m - 1).clamp(0, tree.drafts.shape[1] - 1)[:, None]
    took = by_sibling[:, None] & (torch.arange(tree.drafts.shape[1], device=m.device) == at)
    return torch.where(took, tree.sibling_ids.gather(1, at), tree.drafts)


@torch.inference_mode()
def verified_decode(
    model: torch.nn.Module, prompts: list[list[int]], spec: DecodeSpec, control: DecodeControl
) -> Generator[Step, torch.Tensor | None, None]:
    """Yield one Step per forward. send() a bool [b] tensor to stop samples (stop strings)."""
    g = spec.block_size - 1
    depth = max(g, spec.layout.lookup_drafts) if g > 0 else 0  # D: the longest draft chain a forward may check
    cache, ctl = new_cache(model), control.snapshot()

    def logits_of(rows: torch.Tensor) -> torch.Tensor:  # the head, under the runtime's kernels
        return head(model, rows, spec.runtime)

    answer, tree = start(prompts, spec, ctl.threshold, model.device, depth)
    seconds = seconds_by_width(spec, len(prompts), depth, model.device)
    while not control.stopped:
        ids, positions, mask = tree_inputs(answer, tree, g, spec.mask_id if g > 0 else spec.pad_id)
        hidden = hidden_states(model, ids, positions.clamp_min(0), mask, cache, spec.runtime)
        logits, all_logits = read_logits(logits_of, hidden, tree, g)
        m, tokens, conf, by_sibling = verify(logits, tree, ctl, spec.generator)
        end = commit(answer, tokens, m, spec)
        track_yield(answer, tree, m)
        track_lookup(answer, tree, m)
        proposed = mask_chain(logits_of, hidden, all_logits, tree, m, by_sibling, answer.done, ctl, spec, depth)
        ctl = control.snapshot()  # the threshold in force now chooses what the next forward checks
        chain, group_fed, sibling_fed = next_chain(proposed, answer, ctl.threshold, spec, seconds)
        if spec.record is not None:  # a caller that asked sees what was fed and decided (no cost otherwise)
            spec.record(Forward(tree, ids, positions, mask, m, tokens, conf, proposed, chain, group_fed,
                                group_odds(chain.conf, chain.count), seconds, by_sibling, sibling_fed))
        done, chained, counts, hung, beside, took = to_host(  # the one host sync
            answer.done, m - by_sibling.long(), chain.count, group_fed.any(0), sibling_fed.any(0), by_sibling.any())
        stop = yield Step(tokens, conf, torch.zeros_like(m), end, [bool(d) for d in done], tree.threshold,
                          answer.out, answer.generated, drafts=checked_path(tree, m, by_sibling),
                          drafted=tree.fed.sum(1), matched=torch.minimum(m, end), looked_up=tree.looked)
        if stop is not None:
            answer.done = answer.done | stop.to(answer.done.device)
        if bool(answer.done.all()):
            return
        crop(cache, answer, tree, m, by_sibling, max(chained), g)
        groups = tuple(j for j, any_fed in enumerate(hung) if any_fed)
        siblings = tuple(a + 1 for a, any_fed in enumerate(beside) if any_fed)
        tree = grow(tokens, m, by_sibling, bool(took[0]), chain, groups, group_fed, siblings, sibling_fed, answer.done,
                    max(counts), ctl.threshold)
