"""`rlvr audit` with the sampler's log-probs (issue 43): the recipe's rollout correction
acts as in training, rejection taking tokens out of the mask before the advantages."""

from __future__ import annotations

import copy
import math
import warnings

import pytest

from rlvr.audit import AuditInputError, run_audit

# One group: response 0 (4 tokens, reward 1), response 1 (2 tokens, reward 0), on-policy
# at log π = −1; the sampler gave token 2 of response 0 a log-prob 1 lower, so its
# ρ = π_old/π_sampler = e ≈ 2.72 lies outside token_rs's band [0.5, 2]: rejected.
BATCH = {
    "recipe": "grpo",
    "overrides": {
        "kl": None,
        "kl_coef": 0.0,
        "aggregation": "token_mean",
        "rollout_correction": "token_rs",
        "rc_lower": 0.5,
    },
    "groups": [
        {
            "responses": [
                {"logprobs": [-1.0] * 4, "reward": 1, "sampler_logprobs": [-1, -1, -2, -1]},
                {"logprobs": [-1.0] * 2, "reward": 0, "sampler_logprobs": [-1, -1]},
            ]
        }
    ],
}
ADV = 0.5 / (math.sqrt(0.5) + 1e-6)  # Â = ±(r − mean)/(std + ε), unbiased std of (1, 0)


def test_rejected_token_leaves_the_audit_as_it_leaves_training():
    """Token-mean over the 5 kept tokens: L = (3·(−Â) + 2·Â)/5 = −Â/5 = −0.141421; each kept
    token's gradient is −Â/5 (response 0) or +Â/5 (response 1), the rejected one's 0."""
    result = run_audit(BATCH)
    # the audit rounds to 10 decimals; float64 arithmetic is exact far below that
    assert result["loss"] == pytest.approx(-ADV / 5, abs=1e-9)
    g = ADV / 5
    expected = [[[-g, -g, 0.0, -g], [g, g]]]
    assert result["grad"] == [[pytest.approx(row, abs=1e-9) for row in expected[0]]]
    assert result["advantages"][0][0][2] == 0.0  # no advantage on the rejected token
    assert result["metrics"]["rollout/rejected_token_frac"] == pytest.approx(1 / 6)
    assert result["metrics"]["rollout/mismatch_max_abs_log_ratio"] == pytest.approx(1.0)


def test_without_sampler_logprobs_no_correction_acts():
    """All 6 tokens count: L = (4·(−Â) + 2·Â)/6 = −Â/3."""
    batch = copy.deepcopy(BATCH)
    for response in batch["groups"][0]["responses"]:
        del response["sampler_logprobs"]
    result = run_audit(batch)
    assert result["loss"] == pytest.approx(-ADV / 3, abs=1e-9)
    assert "rollout/rejected_token_frac" not in result["metrics"]


def test_sampler_logprobs_for_some_responses_only_are_refused():
    batch = copy.deepcopy(BATCH)
    del batch["groups"][0]["responses"][1]["sampler_logprobs"]
    with pytest.raises(AuditInputError, match="sampler_logprobs: given for 1 of 2 responses"):
        run_audit(batch)
    batch["groups"][0]["responses"][1]["sampler_logprobs"] = [-1.0]
    with pytest.raises(AuditInputError, match=r"responses\[1\].sampler_logprobs has 1 entries"):
        run_audit(batch)


def test_dppo_measures_against_the_sampler_when_given():
    """π = e^−1 = 0.368 everywhere, μ = e^−2 = 0.135 on token 2 of response 0: π − μ =
    0.233 > δ = 0.15 with Â > 0, so that token is masked (no gradient); no fallback
    warning, since the anchor is given."""
    batch = {**BATCH, "recipe": "dppo", "overrides": {}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = run_audit(batch)
    assert result["grad"][0][0][2] == 0.0
    assert result["grad"][0][0][0] != 0.0
