"""`rlvr audit` runs every second-generation recipe (issue 29) on the hand-worked batches,
and on-policy (ρ = 1 on every token) each reduces to the policy gradient it generalises:
sapo and gmpo to GRPO's clip without KL (same aggregation), dppo and kl_cov to plain
importance sampling under token_mean, clip_cov to PPO's clip unless a token is drawn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.audit import run_audit

ROOT = Path(__file__).resolve().parents[1]
ON_POLICY = json.loads((ROOT / "examples" / "audit_batch.json").read_text())
OFF_POLICY = json.loads((ROOT / "docs" / "audit" / "offpolicy.json").read_text())


def audit(batch, recipe, **overrides):
    return run_audit({**batch, "recipe": recipe, "overrides": overrides})


def flat(grad):
    return [g for group in grad for row in group for g in row]


@pytest.mark.parametrize(
    ("recipe", "control", "overrides"),
    [
        ("sapo", "sapo", {"surrogate": "clip"}),
        ("gmpo", "gmpo", {"surrogate": "clip", "clip_low": 0.2, "clip_high": 0.2}),
        ("dppo", "dppo", {"surrogate": "reinforce", "clip_low": 0.2, "clip_high": 0.2}),
        ("kl_cov", "kl_cov", {"surrogate": "reinforce"}),
        ("clip_cov", "clip_cov", {"surrogate": "clip"}),
    ],
)
def test_on_policy_each_reduces_to_its_base(recipe, control, overrides):
    ours, base = audit(ON_POLICY, recipe), audit(ON_POLICY, control, **overrides)
    # The audit computes in float64; two formulas of one gradient add ≤ 20 terms of size
    # ≤ 10 in other orders: 20·2⁻⁵²·10 = 4.4e-14 (rounding_testlib.reorder_atol, in float64).
    assert flat(ours["grad"]) == pytest.approx(flat(base["grad"]), abs=20 * 2**-52 * 10)
    assert any(g != 0 for g in flat(ours["grad"]))


@pytest.mark.parametrize("recipe", ["sapo", "gmpo", "clip_cov", "kl_cov", "dppo"])
def test_off_policy_each_differs_from_grpo_without_kl(recipe):
    ours = audit(OFF_POLICY, recipe)
    grpo = audit(OFF_POLICY, "grpo", kl=None, kl_coef=0.0)
    assert ours["recipe"] == recipe and ours["grad"] != grpo["grad"]
