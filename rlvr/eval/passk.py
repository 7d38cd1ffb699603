"""Per-item sample metrics: avg@k, unbiased pass@k, maj@k.

Every metric is computed per eval item and then averaged over items, so its 95 % CI is
the Student-t interval over items (`rlvr.eval.significance.t_interval`): the items, not the
samples, are the independent units.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct (Chen et al. 2021,
    arXiv:2107.03374, Eq. 1): pass@k = 1 − C(n−c, k) / C(n, k), the probability that a
    random subset of k of the n samples holds at least one correct one."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 ≤ c ≤ n and 1 ≤ k ≤ n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def majority_correct(answers: Sequence[str | None], correct: Sequence[bool]) -> float:
    """maj@k of one item: 1.0 if the most frequent extracted answer is correct.

    Unformatted samples (answer None) do not vote; ties go to the answer seen first; an
    answer group counts as correct when most of its samples were judged correct (answers
    are grouped by their text with whitespace removed). 0.0 when nothing was extracted.
    """
    keys = [None if a is None else "".join(a.split()) for a in answers]
    votes = Counter(k for k in keys if k is not None)
    if not votes:
        return 0.0
    top = max(votes.values())
    winner = next(k for k in keys if k is not None and votes[k] == top)
    members = [c for k, c in zip(keys, correct, strict=True) if k == winner]
    return float(sum(members) * 2 > len(members))
