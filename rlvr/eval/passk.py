"""Per-item sample metrics: avg@k, unbiased pass@k, maj@k, and the interval of a rate.

Every metric is computed per eval item and then averaged over items: the items, not the
samples, are the independent units. A rate (a mean of per-item values in [0, 1]) gets the
Wilson score interval over items (`wilson_interval`), which stays inside [0, 1] where the
normal (Wald) or Student-t interval of a rate near 0 or 1 goes below 0 or above 1.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from statistics import NormalDist

from rlvr.eval.significance import Interval


def wilson_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """Wilson score interval (Wilson 1927, JASA 22:209) of the mean p̂ of n values in [0, 1]:
    (p̂ + z²/2n ± z·√(p̂(1−p̂)/n + z²/4n²)) / (1 + z²/n), z = Φ⁻¹((1 + c)/2).

    For 0/1 values (one sample per item) it is the textbook interval. For values inside
    [0, 1] (avg@k of k > 1 samples) p̂(1−p̂) bounds their variance, so the interval is
    conservative; it never leaves [0, 1], unlike p̂ ± z·√(p̂(1−p̂)/n)."""
    n = len(values)
    if n == 0:
        raise ValueError("wilson_interval needs at least one value")
    if any(not 0.0 <= v <= 1.0 for v in values):
        raise ValueError(f"wilson_interval takes rates in [0, 1], got {min(values)}…{max(values)}")
    p = math.fsum(values) / n
    z = NormalDist().inv_cdf((1 + confidence) / 2)
    shrink = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / shrink
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / shrink
    low = 0.0 if p == 0 else max(0.0, centre - half)  # exact ends: equal in exact arithmetic
    high = 1.0 if p == 1 else min(1.0, centre + half)
    return Interval(p, low, high, n)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct (Chen et al. 2021,
    arXiv:2107.03374, Eq. 1): pass@k = 1 − C(n−c, k) / C(n, k), the probability that a
    random subset of k of the n samples holds at least one correct one."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 ≤ c ≤ n and 1 ≤ k ≤ n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def majority_correct(
    answers: Sequence[str | None],
    correct: Sequence[bool],
    equivalent: Callable[[int, int], bool] | None = None,
) -> float:
    """maj@k of one item: 1.0 if the most voted answer is correct.

    Answers are grouped into classes by `answer_classes` (same text up to whitespace, or
    `equivalent(i, j)` of samples i and j, the task's verifier deciding that ``1/2`` and
    ``0.5`` are one answer); each class gets one vote per sample. Unformatted samples
    (answer None) do not vote; ties go to the class seen first; a class counts as correct
    when most of its samples were judged correct. 0.0 when nothing was extracted.
    """
    classes = answer_classes(answers, equivalent)
    votes = Counter(c for c in classes if c is not None)
    if not votes:
        return 0.0
    top = max(votes.values())
    winner = min(c for c, n in votes.items() if n == top)  # classes are numbered as first seen
    members = [ok for c, ok in zip(classes, correct, strict=True) if c == winner]
    return float(sum(members) * 2 > len(members))


def answer_classes(
    answers: Sequence[str | None], equivalent: Callable[[int, int], bool] | None = None
) -> list[int | None]:
    """The class of every sample's answer (None: no answer), numbered 0, 1, … as first
    seen. Equal texts (whitespace removed) share a class; a new text joins the first class
    whose representative (its first sample) `equivalent` says is the same answer."""
    keys = [None if a is None else "".join(a.split()) for a in answers]
    class_of: dict[str, int] = {}
    representatives: list[int] = []  # first sample of each class
    for i, key in enumerate(keys):
        if key is None or key in class_of:
            continue
        same = (c for c, r in enumerate(representatives) if equivalent and equivalent(i, r))
        class_of[key] = next(same, len(representatives))
        if class_of[key] == len(representatives):
            representatives.append(i)
    return [None if k is None else class_of[k] for k in keys]
