"""TEMPO's signals (Dots, "TEMPO: Test-Time-Scaled Value Estimation with Macro-Step Policy
Optimization", blog 2025; no arXiv paper yet): an agent plays a K-turn segment from a saved
state, a generative critic writes the value V̂ of where it stopped, and

    Rₙ = rₙ + (1 − dₙ)·V̂ₙ          the segment's return (TD bootstrap; MC when it ended)
    G  = (1/N)·Σₙ Rₙ                the value target of the segment's start state
    Aₙ = Rₙ − G                     the agent's advantage (group mean only, no std)
    r̂ₖ = −|V̂ₖ − G| / R_max         the critic's reward for its k-th estimate of the start

Pure functions of floats, as agentic-rl-lab's 09-tempo computes them (`tempo.py`,
`critic.py`; tests/algo/test_tempo_signals.py runs the lab's functions on the same inputs).
A critic's malformed answer has no value: it is rewarded −R_max (the group's worst) and
counted; an endpoint whose estimates all failed is worth 0 (the lab's pessimistic choice).
"""

from __future__ import annotations

import math
import re

R_MAX = 1.0
"""The span of the return left from any state: rewards are 0/1 (`won`), so 1 (the lab's)."""
VALUE = re.compile(r"<value>\s*([0-9]*\.?[0-9]+)\s*</value>", re.IGNORECASE)
"""The critic's answer, as the lab's `VALUE_PATTERN` (critic.py): no sign, no exponent."""


def parse_value(text: str) -> float | None:
    """V̂ from the last ``<value>x</value>`` of `text`, clipped to [0, 1]; None when there is
    none (the answer is malformed: the caller's fallback applies and counts it)."""
    found = VALUE.findall(text)
    if not found:
        return None
    value = float(found[-1])
    return min(1.0, max(0.0, value)) if math.isfinite(value) else None


def endpoint_value(values: list[float | None]) -> tuple[float, int]:
    """(V̂ of a segment's end = the mean of its parsed estimates, how many failed); 0.0 when
    every estimate failed (the lab's `endpoint_value`: no evidence, no bootstrap)."""
    parsed = [v for v in values if v is not None]
    failed = len(values) - len(parsed)
    return (sum(parsed) / len(parsed) if parsed else 0.0), failed


def segment_returns(rewards: list[float], values: list[float], ended: list[bool]) -> list[float]:
    """Rₙ = rₙ + (1 − dₙ)·V̂ₙ: a segment that stopped at its boundary bootstraps the critic's
    V̂ of its end (TD); one whose game ended (dₙ = 1) has no future and keeps its reward (MC)."""
    if not len(rewards) == len(values) == len(ended):
        raise ValueError(
            f"segment_returns: {len(rewards)} rewards, {len(values)} values and {len(ended)} "
            "ended flags must be one per segment"
        )
    return [r + (0.0 if d else v) for r, v, d in zip(rewards, values, ended, strict=True)]


def value_target(returns: list[float]) -> float:
    """G = (1/N)·Σₙ Rₙ: what the N segments from one start say it is worth."""
    if not returns:
        raise ValueError("value_target: a start state needs at least one segment")
    return sum(returns) / len(returns)


def mean_centered(rewards: list[float]) -> list[float]:
    """Aᵢ = xᵢ − mean(x) in one group (GRPO's without the std, as the lab's agent and critic)."""
    mean = value_target(rewards)
    return [x - mean for x in rewards]


def critic_rewards(
    values: list[float | None], target: float, r_max: float = R_MAX
) -> tuple[list[float], list[float]]:
    """(r̂ₖ = −|V̂ₖ − G| / R_max, the errors |V̂ₖ − G| / R_max) of K estimates of one state;
    an estimate that failed to parse (None) has error 1 and reward −1, the worst a parsed
    one can score (the lab's fallback, −R_max, is the same at its R_max = 1)."""
    if r_max <= 0:
        raise ValueError(f"critic_rewards: r_max={r_max!r} must be > 0")
    errors = [1.0 if v is None else abs(v - target) / r_max for v in values]
    return [-e for e in errors], errors
