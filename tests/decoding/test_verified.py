"""Verified MARS decoding: exactly greedy AR (transformers' generate), the no-cache reference, batches, sampling."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from mars_core import DecodeControl, TreeLayout, generate, stream
from mars_core.decoding import verified
from mars_core.decoding.lookup import expected_run, lookup_rows
from mars_core.runtime import CostCurve, Runtime

from reference import reference_verified
from test_decoders import PROMPTS, encode, hf_greedy
from trained import ANSWERS, mars_trained

NEW_PROMPTS = ["Count from one to ten, please", "List three colours and a fruit"]  # near the toy task, not in it


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def trained(request, tokenizer):
    return mars_trained(request.param, tokenizer)


def drafts_matched(model, tokenizer, prompts, **kw) -> int:
    return sum(sum(e.matched) for e in stream(model, tokenizer, prompts, strategy="verified", **kw))


@pytest.mark.parametrize("block_size", [2, 4, 8])
@pytest.mark.parametrize("threshold", [1.0, 0.9, 0.5, 0.1])
def test_verified_equals_hf_generate(trained, tokenizer, block_size, threshold):
    prompts = PROMPTS + NEW_PROMPTS + list(ANSWERS)[:2]
    want = hf_greedy(trained, tokenizer, prompts, 40)
    # the default runtime (prepare()'s), trees by the fixed rules so that drafts are fed wherever they are confident
    kw = dict(strategy="verified", block_size=block_size, threshold=threshold, max_new_tokens=40,
              layout=TreeLayout(use_cost=False))
    batched = generate(trained, tokenizer, prompts, **kw)
    alone = [generate(trained, tokenizer, p, **kw).token_ids[0] for p in prompts]
    assert alone == want
    assert batched.token_ids == want
    if threshold == 1.0:
        assert batched.tokens_per_forward == 1.0
    else:  # drafts were really checked and accepted: the test is not a disguised AR run
        assert drafts_matched(trained, tokenizer, prompts, block_size=block_size, threshold=threshold,
                              max_new_tokens=40, layout=TreeLayout(use_cost=False)) > 20
        assert batched.tokens_per_forward > 1.3


@pytest.mark.parametrize("spare", [-1, 10**6], ids=["second-pass", "one-pass"])
def test_one_head_pass_or_two_keep_the_answer(trained, tokenizer, monkeypatch, spare):
    """read_logits reads the groups' masks in the verify slots' pass (few spare rows) or in a second pass: greedy
    AR's tokens either way, and the count of head passes shows which path ran."""
    monkeypatch.setattr(verified.tree, "SPARE_HEAD_ROWS", spare)
    prompts = PROMPTS + NEW_PROMPTS
    passes = []
    hook = trained.get_output_embeddings().register_forward_hook(lambda *_: passes.append(1))
    try:
        out = generate(trained, tokenizer, prompts, strategy="verified", block_size=4, threshold=0.3,
                       max_new_tokens=40, layout=TreeLayout(use_cost=False))  # the fixed rules: groups are fed
    finally:                                                                      # whatever this machine's curve says
        hook.remove()
    assert out.token_ids == hf_greedy(trained, tokenizer, prompts, 40)
    assert out.tokens_per_forward > 1.3  # groups were fed and used
    if spare < 0:
        assert len(passes) > out.forwards + 5  # a second pass wherever a group was fed
    else:
        assert len(passes) == out.forwards


@pytest.mark.parametrize("lookup", [0, 7])
@pytest.mark.parametrize("floor", [0.0, TreeLayout().group_floor, 0.6])
@pytest.mark.parametrize("threshold", [0.9, 0.5, 0.3])
def test_cached_equals_no_cache_reference(trained, tokenizer, floor, threshold, lookup):
    """Same tokens and the same number of forwards as recomputing everything each step (the cache holds real
    tokens only), whichever groups the floor lets through, with and without prompt-lookup drafts."""
    check_against_reference(trained, tokenizer, TreeLayout(group_floor=floor, lookup_drafts=lookup), threshold)


@pytest.mark.parametrize("sibling_floor", [None, 0.0, 0.3])
@pytest.mark.parametrize("threshold", [0.5, 0.1])
def test_siblings_match_the_reference(trained, tokenizer, sibling_floor, threshold):
    """Siblings (each draft's second choice, fed with its group) or none: the reference's tokens and forwards."""
    check_against_reference(trained, tokenizer, TreeLayout(sibling_floor=sibling_floor), threshold)


def test_siblings_commit_more_per_forward_and_keep_the_answer(trained, tokenizer):
    """Feeding every sibling: some are AR's token where the draft beside them missed (a token more each), the
    answers are generate's, batched (pending tokens of different lengths) and one by one, and forwards are fewer."""
    prompts = PROMPTS + NEW_PROMPTS + list(ANSWERS)
    want = hf_greedy(trained, tokenizer, prompts, 40)
    kw = dict(strategy="verified", threshold=0.3, max_new_tokens=40)
    records, every_sibling = [], TreeLayout(sibling_floor=0.0, use_cost=False)
    every = generate(trained, tokenizer, prompts, layout=every_sibling, record=records.append, **kw)
    chain = generate(trained, tokenizer, prompts, layout=TreeLayout(sibling_floor=None, use_cost=False), **kw)
    alone = [generate(trained, tokenizer, p, layout=every_sibling, **kw).token_ids[0] for p in prompts]
    assert every.token_ids == chain.token_ids == alone == want
    assert sum(int(r.by_sibling.sum()) for r in records) >= 3
    assert any(r.tree.pending.shape[1] == 2 for r in records[1:])  # a matched sibling is fed again as pending
    assert every.tokens_per_forward > chain.tokens_per_forward


def check_against_reference(model, tokenizer, layout: TreeLayout, threshold: float) -> None:
    stop, layout = {tokenizer.eos_token_id}, replace(layout, use_cost=False)  # the reference's fixed rules
    for text in PROMPTS + NEW_PROMPTS + list(ANSWERS)[3:]:
        got = generate(model, tokenizer, text, strategy="verified", threshold=threshold, max_new_tokens=30,
                       layout=layout)
        want, forwards = reference_verified(model, encode(tokenizer, text), 4, threshold, 30,
                                            tokenizer.mask_token_id, stop, layout.group_floor, layout.lookup_drafts,
                                            layout.lookup_ngrams, layout.lookup_odds, layout.sibling_floor)
        assert got.token_ids[0] == want
        assert got.forwards == forwards


def test_a_random_model_is_exact_too(model, tokenizer):
    """Drafts from an untrained model are mostly wrong: every one is rejected and the answer is still AR's."""
    want = hf_greedy(model, tokenizer, PROMPTS, 24)
    got = generate(model, tokenizer, PROMPTS, strategy="verified", threshold=0.05, max_new_tokens=24)
    assert got.token_ids == want


def test_threshold_one_feeds_one_token_per_forward(trained, tokenizer):
    """τ = 1: no draft is worth checking, so no masks are fed either: every forward after the prefill is [b, 1]."""
    widths = []
    hook = trained.get_decoder().register_forward_pre_hook(
        lambda m, a, kw: widths.append(kw["input_ids"].shape[1]), with_kwargs=True)
    try:
        r = generate(trained, tokenizer, PROMPTS, strategy="verified", threshold=1.0, max_new_tokens=24)
    finally:
        hook.remove()
    assert len(widths) == r.forwards > 10
    assert widths[1:] == [1] * (len(widths) - 1)


def test_pruning_narrows_the_tree(trained, tokenizer):
    """Groups unlikely to be used are not fed: narrower forwards than feeding every group, same answer."""
    def widths_and_result(floor):
        widths = []
        hook = trained.get_decoder().register_forward_pre_hook(
            lambda m, a, kw: widths.append(kw["input_ids"].shape[1]), with_kwargs=True)
        try:
            return widths, generate(trained, tokenizer, list(ANSWERS), strategy="verified", threshold=0.3,
                                    max_new_tokens=40,
                                    layout=TreeLayout(group_floor=floor, lookup_drafts=0, sibling_floor=None,
                                                      use_cost=False))
        finally:
            hook.remove()

    every, full = widths_and_result(0.0)
    pruned, lean = widths_and_result(0.1)
    assert lean.token_ids == full.token_ids
    assert sum(pruned[1:]) < sum(every[1:])
    assert max(every[1:]) == 1 + 3 + 4 * 3  # pending, 3 drafts, 4 groups of 3 masks


def test_stream_events_say_what_was_drafted_and_matched(trained, tokenizer):
    events = list(stream(trained, tokenizer, list(ANSWERS)[4], strategy="verified", threshold=0.3,
                         max_new_tokens=40))
    assert events[0].drafts == [[]] and events[0].matched == [0]  # the prefill checks nothing
    for e in events:
        ids, drafts, m = e.token_ids[0], e.drafts[0], e.matched[0]
        assert ids[:m] == drafts[:m]  # the matched drafts are the first committed tokens
        assert len(ids) <= m + 1  # then at most the bonus token
        if m < len(drafts) and len(ids) == m + 1:
            assert ids[m] != drafts[m]  # the bonus replaced the first draft that did not match
    assert sum(e.matched[0] for e in events) > 10


def test_lookup_drafts_the_text_that_repeats(trained, tokenizer):
    """The fox answer says its sentence twice: the second time, prompt lookup drafts it from the first, the drafts
    are accepted, and the answer is still exactly AR's. Without lookup the same answer takes more forwards. Both by the
    fixed rules: trees sized by the cost curve this machine timed made the count of forwards a matter of timing (12
    and 12 in one CI run)."""
    text = list(ANSWERS)[4]
    want = hf_greedy(trained, tokenizer, [text], 40)[0]
    events = list(stream(trained, tokenizer, text, strategy="verified", threshold=0.5, max_new_tokens=40,
                         layout=TreeLayout(use_cost=False)))
    assert [t for e in events for t in e.token_ids[0]] == want
    looked = [e for e in events if e.draft_source[0] == "lookup"]
    assert looked and max(len(e.token_ids[0]) for e in looked) > 4  # more than B = 4 tokens in one forward
    alone = generate(trained, tokenizer, text, strategy="verified", threshold=0.5, max_new_tokens=40,
                     layout=TreeLayout(use_cost=False, lookup_drafts=0))
    assert alone.token_ids[0] == want and alone.forwards > len(events)


def test_lookup_finds_the_latest_longest_match():
    seq = torch.tensor([[9, 9, 1, 2, 3, 4, 5, 1, 2, 3, 6, 7, 1, 2, 3],    # "1 2 3": the latest earlier match wins
                        [9, 9, 5, 1, 2, 8, 8, 4, 2, 0, 0, 0, 0, 0, 0],    # text ends at 9: "4 2" -> only "2" matches
                        [0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0]])   # no repeat at all
    start, end = torch.tensor([2, 2, 5]), torch.tensor([15, 9, 13])
    drafts, count = lookup_rows(seq.tolist(), start.tolist(), end.tolist(), (3, 2), 4)
    assert count == [4, 0, 0]
    assert drafts[0] == [6, 7, 1, 2]
    drafts, count = lookup_rows(seq.tolist(), start.tolist(), end.tolist(), (3, 2, 1), 4)
    assert count == [4, 4, 0]  # a 1-gram "2" at position 4: what follows it, up to the text's end
    assert drafts[1] == [8, 8, 4, 2]


def test_stop_and_max_new_tokens(trained, tokenizer):
    free = generate(trained, tokenizer, list(ANSWERS)[4], strategy="ar", max_new_tokens=30).token_ids[0]
    cut = generate(trained, tokenizer, list(ANSWERS)[4], strategy="verified", threshold=0.3, max_new_tokens=13)
    assert cut.token_ids[0] == free[:13]
    stop = free[7]
    old = trained.generation_config.eos_token_id
    trained.generation_config.eos_token_id = stop
    try:
        got = generate(trained, tokenizer, list(ANSWERS)[4], strategy="verified", threshold=0.3, max_new_tokens=30)
        assert got.token_ids[0] == free[: free.index(stop) + 1]
    finally:
        trained.generation_config.eos_token_id = old


def test_threshold_changed_mid_run_keeps_the_answer(trained, tokenizer):
    control = DecodeControl(threshold=1.0)
    want = hf_greedy(trained, tokenizer, [list(ANSWERS)[4]], 40)[0]
    ids, taus = [], []
    for e in stream(trained, tokenizer, list(ANSWERS)[4], strategy="verified", max_new_tokens=40, control=control):
        ids += e.token_ids[0]
        taus.append(e.threshold)
        control.threshold = 0.2 if e.forward < 6 else 1.0
    assert ids == want
    assert 0.2 in taus and taus[0] == 1.0


# ----------------------------------------------------------------------------- sampling


def exact_next(model, prefixes: list[list[int]], temperature: float) -> torch.Tensor:
    """p(next token | prefix) at a temperature, one row per prefix (plain causal forwards, no cache)."""
    with torch.no_grad():
        logits = model(torch.tensor(prefixes)).logits[:, -1].float()
    return (logits / temperature).softmax(-1)


def chi_square_p(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """p-value of Pearson's goodness-of-fit test, categories with an expected count < 5 pooled into one."""
    from scipy.stats import chi2

    n = counts.sum()
    expected = probs * n
    big = expected >= 5
    obs = torch.cat([counts[big], counts[~big].sum()[None]])
    exp = torch.cat([expected[big], expected[~big].sum()[None]])
    keep = exp > 0
    stat = (((obs - exp) ** 2)[keep] / exp[keep]).sum().item()
    return float(chi2.sf(stat, int(keep.sum()) - 1))


def pit_p(probs: torch.Tensor, tokens: list[int]) -> float:
    """p-value of a KS test that u = F(t - 1) + V p(t) (V uniform) is uniform: true exactly when each token t was
    drawn from its row of probs (the randomised probability integral transform of a discrete variable)."""
    from scipy.stats import kstest

    t = torch.tensor(tokens)[:, None]
    below = (probs.cumsum(-1) - probs).gather(1, t).squeeze(1)
    u = below + torch.rand(len(tokens), generator=torch.Generator().manual_seed(0)) * probs.gather(1, t).squeeze(1)
    return float(kstest(u.numpy(), "uniform").pvalue)


def test_sampling_keeps_the_ar_distribution(tokenizer):
    """Speculative sampling over the mask slots' drafts: the tokens follow the model's own AR distribution. The first
    token and the marginal of the second by chi-square tests against the exact probabilities; the 2nd and 3rd
    tokens (checked as drafts, accepted or replaced) against their exact conditionals by a PIT test. Plain torch's
    forward (Runtime()): 1000 rows a forward, which the invariant runtime feeds in calls of 32 rows."""
    model = mars_trained("qwen2", tokenizer, steps=40)  # half-trained: drafts often right, often not
    text = list(ANSWERS)[0]
    prompt = encode(tokenizer, text)
    temperature, batch, runs, accepted, rejected = 1.0, 1000, [], 0, 0
    for seed in range(16):
        ids = [[] for _ in range(batch)]
        for e in stream(model, tokenizer, [text] * batch, strategy="verified", threshold=0.05,
                        temperature=temperature, max_new_tokens=3, seed=seed, layout=TreeLayout(use_cost=False),
                        runtime=Runtime()):
            accepted += sum(e.matched)
            rejected += sum(len(d) > m for d, m in zip(e.drafts, e.matched))
            for row, new in zip(ids, e.token_ids):
                row += new
        runs += ids
    assert accepted > 4000 and rejected > 2000  # both branches of the rule ran many times
    vocab = len(tokenizer)
    stops = torch.tensor(sorted({tokenizer.eos_token_id, model.generation_config.eos_token_id}))
    p1 = exact_next(model, [prompt], temperature)[0]
    go_on = p1.clone()
    go_on[stops] = 0  # a run that stopped after one token has no second token
    p2 = (go_on / go_on.sum()) @ exact_next(model, [prompt + [t] for t in range(vocab)], temperature)
    count = lambda tokens: torch.bincount(torch.tensor(tokens), minlength=vocab).float()  # noqa: E731
    assert chi_square_p(count([r[0] for r in runs]), p1) > 1e-3
    assert chi_square_p(count([r[1] for r in runs if len(r) > 1]), p2) > 1e-3
    for k in (1, 2):  # each later token against its exact conditional, given the tokens drawn before it
        rows = [r for r in runs if len(r) > k]
        assert len(rows) > 8000
        assert pit_p(exact_next(model, [prompt + r[:k] for r in rows], temperature), [r[k] for r in rows]) > 1e-3


# ----------------------------------------------------------------------------- layout by cost

FLAT = CostCurve.from_function(lambda b, w: 0.01)  # width is free: the widest useful tree
STEEP = CostCurve.from_function(lambda b, w: 0.01 * (1 + 0.3 * (w - 1)))  # each token fed costs 30% of a forward
STEP = CostCurve.from_function(lambda b, w: 0.01 * (1.0 if w <= 2 else 1.9 + 0.05 * w))  # a kernel switch at 3
NOTHING_PAYS = CostCurve.from_function(lambda b, w: 0.01 * w**2)
BY_BATCH = CostCurve.from_function(lambda b, w: 0.01 * (1 + 0.02 * b * w), batch_sizes=(1, 16))


def fed_widths(model, tokenizer, prompts, **kw) -> tuple[list[int], object]:
    """Tokens fed per sample in every forward after the prefill, and the result."""
    widths = []
    hook = model.get_decoder().register_forward_pre_hook(
        lambda m, a, k: widths.append(k["input_ids"].shape[1]), with_kwargs=True)
    try:
        result = generate(model, tokenizer, prompts, strategy="verified", max_new_tokens=40, **kw)
    finally:
        hook.remove()
    return widths[1:], result


@pytest.mark.parametrize("curve", [FLAT, STEEP, STEP, NOTHING_PAYS, BY_BATCH], ids=["flat", "steep", "step",
                                                                                  "nothing-pays", "by-batch"])
@pytest.mark.parametrize("threshold", [0.3, 0.05])
def test_every_layout_keeps_the_answer(trained, tokenizer, curve, threshold):
    """The layout decides what is checked, never what is committed: AR's answer, batched and one by one."""
    prompts = PROMPTS + NEW_PROMPTS + list(ANSWERS)
    want = hf_greedy(trained, tokenizer, prompts, 40)
    kw = dict(threshold=threshold, layout=TreeLayout(cost=curve))
    assert fed_widths(trained, tokenizer, prompts, **kw)[1].token_ids == want
    assert [fed_widths(trained, tokenizer, p, **kw)[1].token_ids[0] for p in prompts] == want


def test_expensive_width_feeds_narrower_trees(trained, tokenizer):
    prompts = list(ANSWERS)
    runs = {name: [fed_widths(trained, tokenizer, p, threshold=0.05, layout=TreeLayout(cost=c)) for p in prompts]
            for name, c in (("flat", FLAT), ("steep", STEEP), ("step", STEP))}
    fed = {name: sum(sum(w) for w, _ in r) / sum(len(w) for w, _ in r) for name, r in runs.items()}
    assert fed["steep"] < fed["flat"] and fed["step"] < fed["flat"]
    assert max(max(w) for w, _ in runs["flat"]) >= 1 + 3 + 2 * 3  # free width: drafts and several groups
    tpf = {name: sum(r.generated_tokens for _, r in rs) / sum(r.forwards for _, r in rs) for name, rs in runs.items()}
    assert tpf["flat"] > 1.5 and tpf["steep"] > 1.2  # narrower, yet still drafting


def test_siblings_are_priced_by_cost(trained, tokenizer):
    """By cost, a sibling is fed where its odds pay for its width (1 + g tokens): some where width is free, fewer
    where each token fed costs 30% of a forward; with siblings off, none at all."""
    def siblings_fed(curve, floor=0.1):
        records = []
        for p in list(ANSWERS) + NEW_PROMPTS:
            generate(trained, tokenizer, p, strategy="verified", threshold=0.05, max_new_tokens=40,
                     layout=TreeLayout(cost=curve, sibling_floor=floor), record=records.append)
        return sum(int(r.tree.sibling_fed.sum()) for r in records if r.tree.siblings)

    flat, steep = siblings_fed(FLAT), siblings_fed(STEEP)
    assert flat > steep and flat > 0
    assert siblings_fed(FLAT, None) == 0


def test_where_no_tree_pays_every_forward_is_one_token(trained, tokenizer):
    widths, result = fed_widths(trained, tokenizer, list(ANSWERS), threshold=0.05,
                                layout=TreeLayout(cost=NOTHING_PAYS))
    assert widths == [1] * len(widths) and len(widths) > 10
    assert result.tokens_per_forward == 1.0


def test_a_batch_gets_narrower_trees_where_width_costs_by_batch(trained, tokenizer):
    layout = TreeLayout(cost=BY_BATCH)
    alone = [fed_widths(trained, tokenizer, p, threshold=0.05, layout=layout)[0] for p in list(ANSWERS)[:4]]
    together, _ = fed_widths(trained, tokenizer, list(ANSWERS)[:4], threshold=0.05, layout=layout)
    assert sum(together) / len(together) < sum(map(sum, alone)) / sum(map(len, alone))


@pytest.mark.parametrize("fed_rows_only", [True, False], ids=["rows-kernel", "every-row"])
def test_width_is_priced_for_the_samples_still_decoding(trained, tokenizer, monkeypatch, fed_rows_only):
    """Where a forward computes only the rows it feeds (Runtime.fed_rows_only: the rows kernel), a finished sample's
    rows cost nothing, so each tree is priced on the curve at the samples still decoding; elsewhere at the batch it
    began as. The answers stay AR's either way."""
    monkeypatch.setattr(Runtime, "fed_rows_only", property(lambda self: fed_rows_only))
    prompts, records = PROMPTS + list(ANSWERS)[:3], []
    result = generate(trained, tokenizer, prompts, strategy="verified", threshold=0.05, max_new_tokens=40,
                      layout=TreeLayout(cost=BY_BATCH), record=records.append)
    assert result.token_ids == hf_greedy(trained, tokenizer, prompts, 40)
    live = [int(r.tree.pending_valid.any(1).sum()) for r in records]  # samples decoding when the plan was made
    assert live[0] == len(prompts) and min(live) < len(prompts)  # some finished while others went on
    for r, n in zip(records, live):
        priced_at = n if fed_rows_only else len(prompts)
        assert r.seconds.tolist() == pytest.approx(BY_BATCH.at(priced_at, range(len(r.seconds))))


def test_a_sample_a_stop_string_ends_is_priced_as_finished_from_the_next_plan(trained, tokenizer, monkeypatch):
    """A stop string ends a sample after the forward's host read (the caller sends the stop): on the rows kernel the
    next plan already prices width for the samples left, as when a sample ends by a stop token or its length. The
    texts are one-token decoding's with the same stop strings."""
    monkeypatch.setattr(Runtime, "fed_rows_only", property(lambda self: True))
    prompts, records, stop = list(ANSWERS)[:4], [], ["blue"]  # "List three colours" ends early at "blue"
    kw = dict(max_new_tokens=40, stop_strings=stop)
    result = generate(trained, tokenizer, prompts, strategy="verified", threshold=0.05,
                      layout=TreeLayout(cost=BY_BATCH), record=records.append, **kw)
    assert result.texts == generate(trained, tokenizer, prompts, strategy="ar", **kw).texts  # cut before "blue"
    assert result.texts[1] == "red, green, " and len(result.token_ids[1]) < 20 < len(result.token_ids[0])
    live = [int(r.tree.pending_valid.any(1).sum()) for r in records]
    assert live[0] == len(prompts) and len(prompts) - 1 in live
    for r, n in zip(records, live):
        assert r.seconds.tolist() == pytest.approx(BY_BATCH.at(n, range(len(r.seconds))))


CHEAP = CostCurve.from_function(lambda b, w: 0.01 * (1 + 0.15 * (w - 1)))  # half of STEEP's price of width


def test_live_cost_prices_width_by_the_decodes_own_forwards(trained, tokenizer, monkeypatch):
    """Runtime.live_cost: each forward after the prefill is timed, and the plan reads width at what the forwards
    cost. Forwards that cost what STEEP says, under a curve that prices width at half that: the record's seconds
    move to STEEP's shape, the trees are narrower than the curve alone makes them, and the answer is AR's."""
    from mars_core.decoding.verified import decode

    clock, forward = [0.0], decode.fed_then

    def costed(model, cache, ids, *args, **kw):  # the forward takes what STEEP says of its width, on our own clock
        clock[0] += STEEP.at(1, [ids.shape[1]])[0]
        return forward(model, cache, ids, *args, **kw)

    monkeypatch.setattr(decode, "fed_then", costed)
    monkeypatch.setattr(decode, "perf_counter", lambda: clock[0])
    prompts, records = list(ANSWERS), []
    kw = dict(threshold=0.05, layout=TreeLayout(cost=CHEAP))
    live = [fed_widths(trained, tokenizer, p, runtime=Runtime(live_cost=True), record=records.append, **kw)
            for p in prompts]
    as_timed = [fed_widths(trained, tokenizer, p, **kw) for p in prompts]
    assert [r.token_ids[0] for _, r in live] == hf_greedy(trained, tokenizer, prompts, 40)
    assert records[0].seconds[4] / records[0].seconds[1] == pytest.approx(1.45)  # each decode starts from the curve
    assert max(float(r.seconds[4] / r.seconds[1]) for r in records) > 1.7  # and moves to STEEP's 1.9
    mean = [sum(sum(w) for w, _ in runs) / sum(len(w) for w, _ in runs) for runs in (live, as_timed)]
    assert mean[0] < mean[1]


def test_the_fixed_rules_apply_without_a_curve_or_when_asked(trained, tokenizer):
    """use_cost=False ignores the curve: the same trees as no curve at all (group floor and threshold only)."""
    plain = fed_widths(trained, tokenizer, list(ANSWERS), threshold=0.3, runtime=Runtime())[0]
    fixed = fed_widths(trained, tokenizer, list(ANSWERS), threshold=0.3,
                       layout=TreeLayout(cost=NOTHING_PAYS, use_cost=False))[0]
    assert plain == fixed and max(plain) > 1


@pytest.mark.parametrize("layout", [TreeLayout(use_cost=False), TreeLayout(cost=STEEP)], ids=["fixed-rules", "by-cost"])
def test_the_record_is_what_each_forward_fed_and_chose(trained, tokenizer, layout):
    """DecodeOptions.record sees every forward: the mask it holds is the mask the model got, its ids and positions
    what was fed; the next forward checks the drafts and hangs the groups it chose; the answer is unchanged."""
    text = list(ANSWERS)[4]
    got, records = [], []
    hook = trained.get_decoder().register_forward_pre_hook(
        lambda m, a, k: got.append((k["input_ids"], k["position_ids"], k["attention_mask"])), with_kwargs=True)
    try:
        events = list(stream(trained, tokenizer, text, strategy="verified", threshold=0.3, max_new_tokens=40,
                             layout=layout, record=records.append))
    finally:
        hook.remove()
    assert len(records) == len(events) == len(got)
    assert [t for e in events for t in e.token_ids[0]] == generate(
        trained, tokenizer, text, strategy="verified", threshold=0.3, max_new_tokens=40, layout=layout).token_ids[0]
    for r, (ids, positions, mask), e in zip(records, got, events):
        cached, width = int(r.cached[0]), ids.shape[1]  # one sample: every column fed, at slot cached + column
        assert bool(r.fed.all()) and bool(mask[0, 0, :, :cached].all()) and not mask[0, 0, :, cached + width:].any()
        assert torch.equal(mask[0, 0, :, cached : cached + width], r.seen[0]) and torch.equal(r.ids, ids)
        assert torch.equal(r.positions.clamp_min(0), positions)
        assert int(r.m[0]) == e.matched[0] and r.tree.drafts[0, : int(r.tree.fed[0].sum())].tolist() == e.drafts[0]
        assert r.odds.shape == r.group_fed.shape and torch.allclose(r.odds.sum(1), torch.ones(1))
        # the numbers the choice was made by, so a reader never recomputes them: the mask chain's kept drafts (those
        # at or above the threshold, left to right), the expected runs, the floors a cost plan tried
        kept, conf = int(r.mask_kept[0]), r.proposed.conf[0].tolist()
        assert all(c >= 0.3 for c in conf[:kept]) and (kept == len(conf) or conf[kept] < 0.3)
        assert torch.allclose(r.chain_run, expected_run(r.chain.conf, r.chain.count))
        assert r.sibling_odds.shape == r.chain.conf.shape and (r.floors is None) == (r.seconds is None)
    for before, after in zip(records, records[1:]):  # what one forward chose is what the next one fed
        count = int(before.chain.count[0])
        assert after.tree.drafts[0, :count].tolist() == before.chain.tokens[0, :count].tolist()
        assert after.tree.groups == tuple(j for j, fed in enumerate(before.group_fed[0].tolist()) if fed)
    assert any(int(r.m[0]) > 0 for r in records) and (records[0].seconds is None) == (layout.cost is None)
    if layout.cost is None:  # width is free of cost: several groups hang, and the repeated sentence is looked up
        assert any(len(r.tree.groups) > 1 for r in records) and any(r.chain.from_lookup[0] for r in records)


@pytest.mark.parametrize("threshold", [1.0, 0.5, 0.1])
def test_verified_equals_hf_generate_with_packed_linears(trained, tokenizer, threshold):
    """prepare() packs linear layers for oneDNN on x86 CPUs: verified decoding still gives generate's answer there."""
    from mars_core.runtime.linear import pack_linears

    runtime = Runtime(linears=pack_linears(trained))
    if not runtime.linears:
        pytest.skip("no oneDNN packing on this machine")
    prompts = PROMPTS + NEW_PROMPTS + list(ANSWERS)[:2]
    want = hf_greedy(trained, tokenizer, prompts, 40)
    got = generate(trained, tokenizer, prompts, strategy="verified", threshold=threshold, max_new_tokens=40,
                   runtime=runtime)
    assert got.token_ids == want
    assert [generate(trained, tokenizer, p, strategy="verified", threshold=threshold, max_new_tokens=40,
                     runtime=runtime).token_ids[0] for p in prompts] == want


def test_lookup_odds_follow_each_samples_own_record():
    """A lookup chain's odds start at layout.lookup_odds and move with what the sample's own lookup drafts did:
    drafts that all match raise them, a first miss lowers them; chains of mask drafts leave them alone."""
    from types import SimpleNamespace

    from mars_core.decoding.verified import LOOKUP_PRIOR, lookup_odds, track_lookup

    layout = TreeLayout()
    answer = SimpleNamespace(lookup_hits=torch.zeros(3), lookup_tries=torch.zeros(3))
    assert lookup_odds(answer, layout).squeeze(1).tolist() == pytest.approx([layout.lookup_odds] * 3)
    fed = torch.tensor([[True] * 5, [True] * 5, [True] * 5])
    tree = SimpleNamespace(fed=fed, from_lookup=torch.tensor([True, True, False]))
    for _ in range(3):
        track_lookup(answer, tree, torch.tensor([5, 1, 5]))  # all 5 matched / 1 matched, then a miss / mask drafts
    assert answer.lookup_hits.tolist() == [15, 3, 0] and answer.lookup_tries.tolist() == [15, 6, 0]
    odds = lookup_odds(answer, layout).squeeze(1).tolist()
    prior = LOOKUP_PRIOR * layout.lookup_odds
    assert odds == pytest.approx([(prior + 15) / (LOOKUP_PRIOR + 15), (prior + 3) / (LOOKUP_PRIOR + 6),
                                  layout.lookup_odds])
    assert odds[0] > 0.9 and odds[1] < layout.lookup_odds


def test_sampled_drafts_keep_ar_s_distribution_where_lookup_could_replace_them():
    """With sampling, whether prompt lookup's drafts replace the mask chain must not depend on the mask drafts drawn:
    a chain kept only for some draws is not drawn from q any more, and speculative checking then skews the answer.
    The drafter here is the model itself (q = p) and lookup proposes token 1 after [1, 1, 1]: the first token
    committed is distributed as p, over 40,000 samples (the skewed choice gave token 1 0.25 against p's 0.5)."""
    from mars_core.decoding.commit import Committed
    from mars_core.decoding.sampling import confidence_of, draw, first_argmax
    from mars_core.decoding.verified.chain import Chain, with_lookup
    from mars_core.decoding.verified.config import VerifiedConfig
    from mars_core.decoding.verified.verify import DecodeState, speculative

    torch.manual_seed(0)
    b, vocab, depth = 40_000, 6, 7
    first = torch.tensor([0.2, 0.5, 0.15, 0.1, 0.05, 0.0])  # argmax 1 at 0.5: below lookup's odds
    later = torch.tensor([0.2, 0.2, 0.15, 0.15, 0.15, 0.15])
    p = torch.stack([first] + [later] * depth)  # the model's distributions at positions n .. n + D
    q = p[:depth].expand(b, depth, vocab).clone()
    tokens = draw(q.reshape(-1, vocab)).view(b, depth)
    chain = Chain(tokens, confidence_of(q, first_argmax(q), "prob"), q, torch.zeros(b, dtype=torch.long),
                  torch.zeros(b, dtype=torch.bool))
    answer = Committed(out=torch.full((b, 20), 5), generated=torch.zeros(b, dtype=torch.long),
                       done=torch.zeros(b, dtype=torch.bool))
    state = DecodeState(prompts=[[1, 1, 1, 1]] * b, answer=answer, length=torch.full((b,), 4),
                        draft_yield=torch.tensor(1.0), lookup_hits=torch.zeros(b), lookup_tries=torch.zeros(b))
    chosen = with_lookup(chain, state, 0.3, VerifiedConfig(), 5)
    k = int(chosen.count.max())
    fed = torch.arange(k)[None] < chosen.count[:, None]
    _, committed = speculative(p[None, : k + 1].expand(b, -1, -1), chosen.tokens[:, :k], chosen.q[:, :k], fed, None)
    got = torch.bincount(committed[:, 0], minlength=vocab).float() / b
    assert (got - first).abs().max() < 0.02, got.tolist()  # 8 standard errors


@pytest.mark.parametrize("room", [0, 1])
def test_a_verified_request_the_context_holds_never_feeds_past_it(trained, tokenizer, room, monkeypatch):
    """check_request reserves what a verified forward may feed past the answer: its drafts (prompt lookup's 7 at
    B = 4) and the masks hung after them. A context one short of that is refused up front; one that holds it is
    never passed by a fed position (the fox's answer repeats itself: lookup drafts)."""
    from mars_core.decoding.strategies import STRATEGIES
    from mars_core.generate import encode_prompt

    prompt, new = "Tell me about the fox", 40
    ctx = len(encode_prompt(tokenizer, prompt)) + new + STRATEGIES["verified"].headroom(4) - 1 + room
    monkeypatch.setattr(trained.config, "max_position_embeddings", ctx)
    records = []
    run = lambda: generate(trained, tokenizer, prompt, strategy="verified", threshold=0.3,  # noqa: E731
                           max_new_tokens=new, record=records.append)
    if not room:
        with pytest.raises(ValueError, match="prompt too long"):
            run()
        return
    with pytest.raises(ValueError, match="prompt too long"):  # a layout of more lookup drafts: more room asked
        generate(trained, tokenizer, prompt, strategy="verified", max_new_tokens=new,
                 layout=TreeLayout(lookup_drafts=12))
    run()
    assert any(bool(r.tree.from_lookup.any()) for r in records)
    assert max(int(r.positions.masked_fill(~r.fed, -1).max()) for r in records) < ctx
