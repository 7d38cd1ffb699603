"""`rlvr audit` of distillation recipes: per-response teacher_logprobs, validated by name,
and the hand-worked batch of examples/audit_distill.json (docs/16-distillation.md)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from rlvr.audit import AuditInputError, run_audit
from rlvr.cli import main

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "audit_distill.json"


def example(recipe: str = "opd") -> dict:
    return {**json.loads(EXAMPLE.read_text()), "recipe": recipe}


def test_example_hand_worked():
    # gap = log π_S − log π_T on policy tokens: response 0: (−0.2, 1.0, 0.0); response 1
    # (tokens 1, 2 are observations): (−0.5, ·, ·, 1.0). Â = −gap; token_mean over 5 policy
    # tokens, on-policy reinforce: ∂L/∂logπ = −Â/5, L = −(1/5)·Σ Â·logπ = −0.95/5 = −0.19.
    result = run_audit(example())
    assert result["loss"] == pytest.approx(-0.19, abs=1e-12)
    advantages, grads = result["advantages"][0], result["grad"][0]
    assert advantages[0] == pytest.approx([0.2, -1.0, 0.0])
    assert advantages[1] == pytest.approx([0.5, 0.0, 0.0, -1.0])
    assert grads[0] == pytest.approx([-0.04, 0.2, 0.0])
    assert grads[1] == pytest.approx([-0.1, 0.0, 0.0, 0.2])
    assert result["metrics"]["distill/reverse_kl"] == pytest.approx(0.26)
    assert result["metrics"]["distill/reverse_kl_seq"] == pytest.approx(0.65)


def test_opsd_equals_opd_and_grpo_ignores_the_teacher():
    # opd and opsd differ only in the config's teacher; grpo (β = 0) reads no teacher: its
    # audit is the same as of the batch without teacher_logprobs.
    assert run_audit(example("opsd"))["grad"] == run_audit(example("opd"))["grad"]
    stripped = example("grpo")
    for resp in stripped["groups"][0]["responses"]:
        resp.pop("teacher_logprobs")
    assert run_audit(example("grpo")) == run_audit(stripped)


def _fails(data: dict, *needles: str) -> None:
    with pytest.raises(AuditInputError) as err:
        run_audit(data)
    message = str(err.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message


def test_missing_teacher_logprobs_are_named():
    data = example()
    data["groups"][0]["responses"][1].pop("teacher_logprobs")
    _fails(data, "groups[0].responses[1].teacher_logprobs is missing", "teacher_kl_coef")


def test_null_on_a_policy_token_is_refused():
    data = example()
    data["groups"][0]["responses"][0]["teacher_logprobs"][1] = None
    _fails(data, "groups[0].responses[0].teacher_logprobs[1] is null", "policy token")


@pytest.mark.parametrize(
    ("value", "needle"),
    [([-0.3, -2.0], "one log-prob per token (3"), ([-0.3, 0.5, -0.2], "[1] must be in")],
)
def test_bad_teacher_logprobs_are_named(value, needle):
    data = copy.deepcopy(example())
    data["groups"][0]["responses"][0]["teacher_logprobs"] = value
    _fails(data, "groups[0].responses[0].teacher_logprobs", needle)


def test_example_from_the_cli(capsys):
    assert main(["audit", str(EXAMPLE), "--table"]) == 0
    out = capsys.readouterr().out
    assert "recipe opd   loss -0.190000" in out
    assert "+0.5000 ×1 | obs ×2 | -1.0000 ×1" in out
