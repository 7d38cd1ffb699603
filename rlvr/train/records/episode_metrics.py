"""The `env/` metrics of a step's multi-turn episodes (docs/metrics.md), computed once."""

from __future__ import annotations

from rlvr.envs.budgets import ENDINGS


def episode_metrics(episodes: list | None) -> dict[str, float]:
    """Turns, tool calls and their outcomes, observation tokens, environment failures and
    time, and why episodes ended, over every generated episode. {} for one-turn tasks.
    A rate over tool calls is left out when there was no call (a rate of nothing is not 0)."""
    if not episodes:
        return {}
    n = len(episodes)
    calls = sum(e.tool_calls for e in episodes)
    attempts = calls + sum(e.invalid_calls for e in episodes)
    metrics = {
        "env/turns": sum(e.turns for e in episodes) / n,
        "env/tool_calls": calls / n,
        "env/observation_tokens": sum(e.observation_tokens for e in episodes) / n,
        "env/observations_cut": float(sum(e.observations_cut for e in episodes)),
        "env/failed_frac": sum(e.env_failed is not None for e in episodes) / n,
        "env/turn_reward": sum(e.turn_reward for e in episodes) / n,
        "time/env_s": sum(e.env_seconds for e in episodes),
        **{f"env/ended_{end}": sum(e.ended_by == end for e in episodes) / n for end in ENDINGS},
    }
    if attempts:
        metrics["env/valid_call_rate"] = calls / attempts
    if calls:
        errors = sum(e.tool_errors for e in episodes)
        timeouts = sum(e.tool_timeouts for e in episodes)
        metrics["env/tool_error_rate"] = errors / calls
        metrics["env/tool_timeout_rate"] = timeouts / calls
        metrics["env/tool_success_rate"] = (calls - errors - timeouts) / calls
        metrics["env/tool_latency_s"] = metrics["time/env_s"] / calls
    return metrics
