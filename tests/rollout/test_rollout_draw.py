"""`multinomial_one` draws the token `torch.multinomial(p, 1)` draws, from the same
generator, leaving it in the same state: bounds on the exponentials settle most rows, the
rest are raced with the C library's log1p (rlvr/rollout/draw.py)."""

import math

import pytest
import torch

from rlvr.rollout import draw

pytestmark = pytest.mark.skipif(draw.LOG1P is None, reason="no C library log1p to load")


def _probs(seed: int, rows: int, vocab: int) -> torch.Tensor:
    """Softmax rows at several temperatures, some with tokens cut to probability 0 (as
    top-k and top-p leave them)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=g) * torch.linspace(0.5, 8, rows)[:, None]
    logits[: rows // 3, vocab // 2 :] = float("-inf")
    return logits.softmax(-1)


def test_the_same_tokens_and_generator_state_as_torch():
    """200 batches of 32 rows × 4,096 tokens (26 million exponentials): every token equal,
    and the generator where torch's leaves it (the next draws equal)."""
    for seed in range(200):
        probs = _probs(seed, 32, 4096)
        ours, theirs = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        got = draw.multinomial_one(probs, ours)
        want = torch.multinomial(probs, 1, generator=theirs)
        assert got.dtype == want.dtype == torch.int64 and got.shape == (32, 1)
        assert torch.equal(got, want), seed
        assert torch.equal(torch.rand(3, generator=ours), torch.rand(3, generator=theirs))


def test_unnormalised_large_and_tiny_weights(monkeypatch):
    """torch.multinomial takes weights that do not sum to 1: rows scaled up to 1e30 (their
    ratios near float32's largest), down to 1e-20, and to 1e-38 (subnormal weights, whose
    ratios the bounds cannot settle: only there every token of a row is raced) draw
    torch's tokens."""
    whole = []
    real = draw._race_all
    monkeypatch.setattr(draw, "_race_all", lambda p, u: whole.append(1) or real(p, u))
    for seed, scale in enumerate([1e30, 1e-20, 1e-38]):
        probs = _probs(seed, 32, 4096) * scale
        ours, theirs = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        want = torch.multinomial(probs, 1, generator=theirs)
        assert torch.equal(draw.multinomial_one(probs, ours), want), scale
        assert (len(whole) > 0) == (scale == 1e-38), scale


def test_most_rows_are_settled_by_the_bounds(monkeypatch):
    """Where the token with the largest p/u leads by more than its 1/(1 − u) slack no
    logarithm is taken; over 50 batches of softmax rows most rows are settled so, and
    widening the margin to everything races every token of every row (those of
    probability 0 too, which never win) with torch's tokens all the same."""
    calls = []
    real = draw._race
    monkeypatch.setattr(
        draw, "_race", lambda p, u, cols: calls.append(len(cols)) or real(p, u, cols)
    )
    for seed in range(50):
        probs = _probs(seed, 32, 4096)
        want = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(seed))
        assert torch.equal(draw.multinomial_one(probs, torch.Generator().manual_seed(seed)), want)
    assert len(calls) < 50 * 32 / 4 and all(n >= 2 for n in calls)
    calls.clear()
    probs = _probs(7, 16, 300)
    want = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(7))
    monkeypatch.setattr(draw, "MARGIN", 2.0)  # threshold ≤ 0: every token contends
    assert torch.equal(draw.multinomial_one(probs, torch.Generator().manual_seed(7)), want)
    assert calls == [300] * 16


def test_the_leader_can_lose_the_race():
    """p = (0.6, 0.4), u = (0.6, 0.45): p/u = 1.0 and 0.889, so token 0 leads with the
    bound 1.0·(1 − 0.6) = 0.4, which token 1's 0.889 reaches; the exact ratios are
    0.6/−ln 0.4 = 0.6548 and 0.4/−ln 0.55 = 0.6691: token 1 wins. With u = (0.1, 0.9)
    token 0's bound 5·0.9 = 4.5 is out of token 1's reach (0.444): token 0, no race."""
    p = torch.tensor([[0.6, 0.4], [0.6, 0.4]])
    u = torch.tensor([[0.6, 0.45], [0.1, 0.9]], dtype=torch.float64)
    assert draw.race(p, u).tolist() == [[1], [0]]


def test_a_draw_of_zero_wins_as_torch_s_argmax_picks():
    """u = 0 gives q = −log1p(−0) = 0 however log1p is computed: a ratio of inf where p > 0
    (it wins; the first of two), NaN where p = 0 (argmax takes NaN as the largest)."""
    p = torch.tensor([[0.3, 0.7, 0.0], [0.2, 0.3, 0.5], [0.0, 1.0, 0.0]])
    u = torch.tensor([[0.5, 0.0, 0.5], [0.9, 0.0, 0.0], [0.0, 0.5, 0.5]], dtype=torch.float64)
    assert draw.race(p, u).tolist() == [[1], [1], [0]]


def test_the_race_by_hand():
    """u = 1 − e⁻¹ and 1 − e⁻² give q = −log1p(−u) = 1 and 2: with p = (0.3, 0.7) the ratios
    are 0.3 and 0.35 (token 1 wins), with p = (0.6, 0.4) 0.6 and 0.2 (token 0); equal
    ratios go to the first token, as argmax."""
    u = torch.tensor([1 - math.exp(-1), 1 - math.exp(-2)], dtype=torch.float64)
    both = torch.tensor([0, 1])
    assert draw._race(torch.tensor([0.3, 0.7]), u, both) == 1
    assert draw._race(torch.tensor([0.6, 0.4]), u, both) == 0
    quarter = torch.tensor([0.25, 0.25], dtype=torch.float64)
    assert draw._race(torch.tensor([0.5, 0.5]), quarter, both) == 0


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ([0.5, float("nan")], "contains either `inf`, `nan` or element < 0"),
        ([0.5, float("inf")], "contains either `inf`, `nan` or element < 0"),
        ([0.5, -0.1], "contains either `inf`, `nan` or element < 0"),
        ([0.0, 0.0], r"sum of probabilities <= 0"),
    ],
)
def test_invalid_probabilities_fail_as_torch_does(row, message):
    probs = torch.tensor([[0.2, 0.8], row])
    with pytest.raises(RuntimeError, match=message):
        torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(0))
    generator = torch.Generator().manual_seed(0)
    with pytest.raises(RuntimeError, match=message):
        draw.multinomial_one(probs, generator)
    assert torch.equal(
        torch.rand(2, generator=generator),
        torch.rand(2, generator=torch.Generator().manual_seed(0)),
    )


def test_what_it_does_not_draw_goes_to_torch(monkeypatch):
    """float64 probabilities, one row as a 1-d tensor, or no C log1p: torch.multinomial."""
    seen = []
    real = torch.multinomial
    monkeypatch.setattr(
        torch,
        "multinomial",
        lambda p, n, generator: seen.append(p.shape) or real(p, n, generator=generator),
    )
    generator = torch.Generator().manual_seed(0)
    draw.multinomial_one(torch.tensor([[0.5, 0.5]], dtype=torch.float64), generator)
    draw.multinomial_one(torch.tensor([0.5, 0.5]), generator)
    monkeypatch.setattr(draw, "LOG1P", None)
    draw.multinomial_one(torch.tensor([[0.5, 0.5]]), generator)
    assert seen == [(1, 2), (2,), (1, 2)]
