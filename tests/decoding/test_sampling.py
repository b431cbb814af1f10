import math

import torch

from mars_core.decoding.control import DecodeControl
from mars_core.decoding.sampling import (
    accept_prefix,
    cap_at_stop,
    confidence_of,
    first_argmax,
    greedy,
    select,
    top_p_filter,
)


def test_accept_prefix_stops_at_first_miss():
    conf = torch.tensor([[0.2, 0.95, 0.91, 0.5], [0.1, 0.3, 0.99, 0.99], [0.9, 0.9, 0.9, 0.9]])
    first = torch.zeros(3, dtype=torch.long)
    assert accept_prefix(conf, first, 0.9).tolist() == [3, 1, 4]
    # block decoding: slots before `first` are filled already, slot `first` is always accepted
    assert accept_prefix(conf, torch.tensor([1, 2, 3]), 0.9).tolist() == [3, 4, 4]


def test_threshold_one_is_exactly_one_token_even_when_softmax_rounds_to_one():
    conf = torch.ones(2, 4)  # a softmax can round to exactly 1.0
    assert accept_prefix(conf, torch.tensor([0, 2]), 1.0).tolist() == [1, 3]


def test_cap_at_stop_cuts_after_first_stop_in_run():
    tokens = torch.tensor([[5, 2, 7, 2], [5, 6, 7, 8], [2, 6, 7, 8]])
    start, end = torch.tensor([0, 0, 1]), torch.tensor([4, 4, 4])
    capped, hit = cap_at_stop(tokens, start, end, torch.tensor([2]))
    assert capped.tolist() == [2, 4, 4]  # row 2's stop token lies before its run
    assert hit.tolist() == [True, False, False]


def test_confidences():
    probs = torch.tensor([[0.7, 0.2, 0.1], [1 / 3, 1 / 3, 1 / 3]])
    tokens = torch.tensor([0, 2])
    assert torch.allclose(confidence_of(probs, tokens, "prob"), torch.tensor([0.7, 1 / 3]))
    assert torch.allclose(confidence_of(probs, tokens, "margin"), torch.tensor([0.5, 0.0]), atol=1e-6)
    ent = confidence_of(probs, tokens, "entropy")
    h = -(0.7 * math.log(0.7) + 0.2 * math.log(0.2) + 0.1 * math.log(0.1))
    assert ent[0].item() == pytest_approx(1 - h / math.log(3)) and abs(ent[1].item()) < 1e-6


def pytest_approx(x):
    import pytest

    return pytest.approx(x, abs=1e-6)


def test_top_p_keeps_the_nucleus():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    kept = top_p_filter(probs, 0.7)
    assert torch.allclose(kept, torch.tensor([[0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0]]))
    assert torch.equal(top_p_filter(probs, 1.0), probs)


def test_select_greedy_and_sampled():
    logits = torch.tensor([[[0.0, 5.0, 1.0]], [[3.0, 0.0, 0.0]]])
    tok, conf = select(logits, DecodeControl(temperature=0.0))
    assert tok.tolist() == [[1], [0]] and conf.shape == (2, 1)
    g = torch.Generator().manual_seed(0)
    many = torch.zeros(200, 1, 3)
    many[:, :, 0] = 1.0
    tok, _ = select(many, DecodeControl(temperature=1.0), g)
    share = (tok == 0).float().mean().item()
    assert 0.35 < share < 0.7  # e/(e+2) = 0.58: sampled, not argmax


def test_first_argmax_is_argmax_on_every_layout_and_dtype():
    """first_argmax (numpy's argmax on the CPU in float32, torch's max(-1) elsewhere) is torch.argmax: the first of
    equal maxima, a long tensor of the leading shape, on strided views and in every dtype."""
    gen = torch.Generator().manual_seed(1)
    x = (torch.randn(4, 6, 3000, generator=gen) * 3).round()  # rounded: many ties
    x[0, 0, [5, 6, 2999]] = 50.0
    for view in (x, x[:, ::2], x[:, :, ::3], x.transpose(0, 1), x[1:, 2]):
        for dtype in (torch.float32, torch.float64, torch.bfloat16):
            v = view.to(dtype)
            got = first_argmax(v)
            assert got.dtype == torch.long and torch.equal(got, v.argmax(-1)), (tuple(view.shape), dtype)
    assert first_argmax(x)[0, 0] == 5


def test_greedy_breaks_ties_as_argmax_does_and_reads_the_softmax():
    """greedy() takes first_argmax for speed; it must pick argmax's token (the first of equal maxima: transformers'
    generate breaks ties with argmax) in bf16 and fp32, at a vocabulary's width, with softmax's confidence."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 49152, generator=gen) * 4
    logits[0, 0, [7, 9000, 40000]] = 30.0  # a three-way tie
    logits[1, 2, [3, 4]] = 25.0
    logits[2, 4, -2:] = 40.0  # tied at the end of the row
    for dtype in (torch.float32, torch.bfloat16):
        x = logits.to(dtype)
        tokens, conf = greedy(x, "prob")
        want = x.float().argmax(-1)
        assert torch.equal(tokens, want) and tokens[0, 0] == 7 and tokens[2, 4] == 49150
        torch.testing.assert_close(conf, x.float().softmax(-1).gather(-1, want[..., None]).squeeze(-1))
        assert torch.equal(select(x, DecodeControl(temperature=0.0))[0], want)
