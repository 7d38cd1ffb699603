"""`rlvr audit --table`: the audit's result as one line per response."""

from __future__ import annotations

from typing import Any


def format_audit(result: dict[str, Any]) -> str:
    """The gradient table: one line per response, Â and ∂L/∂logπ per token; observation
    tokens show as `obs`."""
    lines = [
        f"recipe {result['recipe']}   loss {result['loss']:.6f}   "
        f"kept groups {result['kept_groups']}",
        "",
    ]
    lines.append(
        f"{'group':>5} {'resp':>4} {'len':>3} {'reward':>7}  {'Â per token':<28}  ∂L/∂logπ per token"
    )
    observation = result.get("observation")
    row = 0
    for g, (advs, grads) in enumerate(zip(result["advantages"], result["grad"], strict=True)):
        for i, (adv, grad) in enumerate(zip(advs, grads, strict=True)):
            reward = result["shaped_rewards"][row]
            row += 1
            obs = observation[g][i] if observation else [0] * len(adv)
            lines.append(
                f"{g:>5} {i:>4} {len(adv):>3} {reward:>7.3f}  "
                f"{_per_token(adv, obs):<28}  {_per_token(grad, obs)}"
            )
    if observation:
        lines.append(
            "obs: observation tokens, context only: no loss and no count, gradient 0; "
            "len counts them (the budget does)"
        )
    lines += ["", "metrics: " + ", ".join(f"{k}={v:.4g}" for k, v in result["metrics"].items())]
    return "\n".join(lines)


def _per_token(values: list[float], observation: list[int]) -> str:
    """`_compact` per run of policy tokens, 'obs ×n' per run of observation tokens, runs
    joined by ' | '; a response without observation tokens is one run."""
    runs: list[str] = []
    start = 0
    for t in range(1, len(values) + 1):
        if t == len(values) or observation[t] != observation[start]:
            n = t - start
            runs.append(f"obs ×{n}" if observation[start] else _compact(values[start:t]))
            start = t
    return " | ".join(runs)


def _compact(values: list[float]) -> str:
    """All-equal values as 'v ×n', otherwise the list, to keep rows short."""
    if values and all(v == values[0] for v in values):
        return f"{values[0]:+.4f} ×{len(values)}"
    return " ".join(f"{v:+.4f}" for v in values)
