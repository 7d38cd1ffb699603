"""`multinomial_one` draws the token `torch.multinomial(p, 1)` draws, from the same
generator, leaving it in the same state; its near-ties are re-raced with the C library's
log1p (rlvr/rollout/draw.py)."""

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


def test_a_near_tie_is_re_raced_with_exact_exponentials(monkeypatch):
    """Two tokens of equal probability have ratios within the margin only when their q do
    (never here: one winner per row, no re-race); with the margin widened to everything,
    every row re-races all its tokens with the C library's log1p, and the tokens are
    still torch's."""
    probs, calls = _probs(7, 16, 300), []
    race = draw._race
    monkeypatch.setattr(
        draw, "_race", lambda p, u, cols: calls.append(len(cols)) or race(p, u, cols)
    )
    want = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(7))
    assert torch.equal(draw.multinomial_one(probs, torch.Generator().manual_seed(7)), want)
    assert calls == []
    monkeypatch.setattr(draw, "MARGIN", 2.0)  # ratio ≥ −best: every token is close
    assert torch.equal(draw.multinomial_one(probs, torch.Generator().manual_seed(7)), want)
    assert calls == [300] * 16  # the tokens of probability 0 too, which never win


def test_the_race_by_hand():
    """u = 1 − e⁻¹ and 1 − e⁻² give q = −log1p(−u) = 1 and 2: with p = (0.3, 0.7) the ratios
    are 0.3 and 0.35 (token 1 wins), with p = (0.6, 0.4) 0.6 and 0.2 (token 0); equal
    ratios go to the first token, as argmax."""
    u = torch.tensor([1 - math.exp(-1), 1 - math.exp(-2)], dtype=torch.float64)
    assert draw._race(torch.tensor([0.3, 0.7]), u, [0, 1]) == 1
    assert draw._race(torch.tensor([0.6, 0.4]), u, [0, 1]) == 0
    assert (
        draw._race(
            torch.tensor([0.5, 0.5]), torch.tensor([0.25, 0.25], dtype=torch.float64), [0, 1]
        )
        == 0
    )


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
