"""Verified MARS decoding: the mask slots draft, the model's own next-token predictions check, in one forward.

Committed tokens c[0..n); drafts d_1..d_k for positions n..n+k-1, proposed by the previous forward's mask slots.
One forward feeds, under one explicit 4D mask (a tree), the pending tokens, the drafts, a group G_j of g = B-1 masks
after c + d_1..d_j for some j, and optionally siblings e_a (d_a's second choice) with their groups H_a. With m
drafts matching, it commits d_1..d_m plus the bonus token (the AR prediction after them): exactly what greedy AR
produces; G_m's predictions are the next drafts. What is fed is a choice that never changes the answer: by the
machine's cost curve (plan_by_cost) or by fixed floors (VerifiedConfig). Sampling keeps the AR distribution with
the speculative-sampling rule. docs/speed.md has the measurements behind its choices.

The rooms, in the order a forward runs them:
    config.py  VerifiedConfig (TreeLayout): how trees are shaped; read by verified decoding alone
    tree.py    Tree, what is fed: ids, positions, what sees what (feed.tree_template), the logits read
    verify.py  DecodeState; verification (greedy, speculative), the commit, what the cache keeps
    chain.py   the next drafts (mask_chain, with_lookup) and the tree they are fed in (next_chain, next_tree)
    plan.py    which drafts, groups and siblings pay for their width: a pure function of confidences and the cost
               curve (plan_by_cost, group_odds, sibling_odds, FLOORS), and whether any width pays at all (width_pays:
               where none does, verified decoding is one-token decoding; tree_price: the least tree's price there);
               it never imports tree.py
    pace.py    Pace: the curve's price of width, moved by the decode's own timed forwards (Runtime.live_cost)
    record.py  Forward, what a caller that asks (DecodeOptions.record) sees of each forward
    decode.py  verified_decode, the loop
"""

from .chain import LOOKUP_PRIOR, lookup_odds, track_lookup
from .config import TreeLayout, VerifiedConfig
from .decode import draft_depth, verified_decode
from .plan import one_token_only, tree_price
from .record import Forward

__all__ = ["Forward", "LOOKUP_PRIOR", "TreeLayout", "VerifiedConfig", "draft_depth", "lookup_odds", "one_token_only",
           "track_lookup", "tree_price", "verified_decode"]
