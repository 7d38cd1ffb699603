"""The service comparison of `step_vs_trl.py --service`: the same GRPO step through
rlvr.service's primitives (step_vs_trl_service_side.py), run after the fp32 contestants
within each round. Its headline is `ratio-service X.XX` (TRL-default / service); the
summary adds rlvr's loop / service (below 1: the loop is faster) and the service's own
phases: sample, forward_backward (forward and backward), optim_step and the sampler sync."""

from __future__ import annotations

from step_vs_trl_runner import Comparison, paired
from step_vs_trl_service_side import median_phase

CONTESTANTS = ("service",)


def ratios(s: dict) -> tuple[float, float]:
    """(TRL-default / service, rlvr loop / service), ratios of median steps."""
    service = s["service"]["median"]
    return s["trl"]["median"] / service, s["rlvr"]["median"] / service


def headline(s: dict) -> list[str]:
    return [f"ratio-service {ratios(s)[0]:.2f}"]


def summary(size, loss, params, s, results) -> list[str]:
    trl, loop = ratios(s)
    times = results["service"]
    phases = ", ".join(
        f"{name} {median_phase(times, key):.3f}"
        for name, key in (
            ("sample", "generation"),
            ("forward_backward", "forward_backward"),
            ("optim_step", "optimizer"),
            ("sampler sync", "sync"),
        )
    )
    tokens = sorted({n for t in times for n in t["new_tokens"]})
    return [
        f"service: TRL-default/service {trl:.2f}x (paired {paired(results, 'trl', 'service'):.2f}x), "
        f"rlvr loop/service {loop:.2f}x (paired {paired(results, 'rlvr', 'service'):.2f}x)",
        f"service phases, s (median): {phases}; rows {sorted({t['rows'] for t in times})}, "
        f"new tokens per row {tokens}",
    ]


SERVICE = Comparison(CONTESTANTS, headline, summary)
