"""`rlvr audit` shows AgentOPSD's per-token advantages on a hand-built episode
(examples/audit_agent_opsd.json).

The example is the hand-worked batch of test_agent_opsd_turn_credit.py, written as JSON:
one group, rewards (1, 0), three turns each, observation tokens between them (P: policy,
O: observation):
    response 0: P P O P O P    turns [0,2) [3,4) [5,6); evidence (ln 3, −0.95·ln 3, ln 3)
    response 1: P O O P P O P  turns [0,1) [3,5) [6,7); evidence (0, 0, ln 3)
    Â/A = (1.0706807, 0.9, 1.0706807) and (1.0706507, 1.0706507, 0.9), A = ±0.5/0.5001.
On-policy (old = logπ): every ratio is 1, so with token_mean over the 8 policy tokens
∂L/∂logπ_t = −Â_t/8 on a policy token and exactly 0 on an observation token.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from rlvr.audit import run_audit
from rlvr.audit.batch import AuditInputError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "audit_agent_opsd.json"
A = 0.5 / (0.5 + 1e-4)
M0 = 0.5 + 0.5 * (1 + 0.2 * (1 / 6) / (1 / math.sqrt(18) + 1e-4))
M1 = 0.5 + 0.5 * (1 + 0.2 * (1 / 12) / (1 / math.sqrt(72) + 1e-4))
HAND = [
    [A * M0, A * M0, 0.0, A * 0.9, 0.0, A * M0],
    [-A * M1, 0.0, 0.0, -A * M1, -A * M1, 0.0, -A * 0.9],
]
# The JSON's log-probs are ln 0.25, ln 0.5, ln 0.75 rounded to 1e-10, so each turn's
# evidence is off by ≤ 2 tokens × 5e-11 = 1e-10; Â moves by ≤ |∂Â/∂e|·1e-10 with
# |∂Â/∂e| ≤ |A|·λ·δ·|∂z/∂e| ≤ 1·0.5·0.2·(0.25/0.118)·2 ≈ 0.5, and the audit rounds to
# 1e-10: 1e-9 bounds both.
TOL = 1e-9


def example() -> dict:
    return json.loads(EXAMPLE.read_text())


def test_the_example_shows_the_hand_worked_advantages_and_gradient():
    result = run_audit(example())
    assert result["recipe"] == "agent_opsd"
    for got, want in zip(result["advantages"][0], HAND, strict=True):
        assert got == pytest.approx(want, abs=TOL)
    for got, want in zip(result["grad"][0], HAND, strict=True):
        assert got == pytest.approx([-a / 8 for a in want], abs=TOL)
        assert all(g == 0.0 for g, a in zip(got, want, strict=True) if a == 0.0)
    metrics = result["metrics"]
    assert metrics["turn/weight_min"] == 0.8 and metrics["turn/turns_mean"] == 3.0
    assert metrics["turn/delta_belief_abs_mean"] == pytest.approx(1 / 6, abs=TOL)


def test_without_turns_each_response_is_one_turn():
    # One turn per response: w = 1, so Â = ±A on every policy token (the lab's GRPO).
    data = example()
    for resp in data["groups"][0]["responses"]:
        del resp["turns"]
    result = run_audit(data)
    assert result["advantages"][0][0] == pytest.approx([A, A, 0, A, 0, A], abs=1e-10)
    assert "turn/weight_dev_mean" in result["metrics"]
    assert result["metrics"]["turn/weight_dev_mean"] == 0.0


@pytest.mark.parametrize(
    ("turns", "message"),
    [
        ([[0, 3], [3, 4], [5, 6]], "token 2 is an observation token inside"),
        ([[0, 2], [5, 6]], "token 3 is a policy token outside every"),
        ([[0, 2], [1, 4]], r"turns\[1\] = \[1, 4\] must satisfy previous end ≤ start"),
        ([[0, 2], [3, 9]], "≤ 6"),
        ("all", r"must be a list of \[start, end\) token spans"),
    ],
)
def test_bad_turns_are_named(turns, message):
    data = example()
    data["groups"][0]["responses"][0]["turns"] = turns
    with pytest.raises(AuditInputError, match=message):
        run_audit(data)


def test_missing_teacher_logprobs_are_named():
    data = copy.deepcopy(example())
    del data["groups"][0]["responses"][1]["teacher_logprobs"]
    with pytest.raises(
        AuditInputError, match=r"responses\[1\]\.teacher_logprobs is missing.*turn_belief"
    ):
        run_audit(data)
