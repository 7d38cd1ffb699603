"""A user's own advantage estimator and surrogate, from a module outside the package, run
through the same loop, `rlvr audit` and `rlvr compare` as a built-in choice
(docs/extending.md)."""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path

import pytest
import yaml

from rlvr.cli import main
from rlvr.runlog.logger import read_metrics
from rlvr.train import run_training

MODULE = "rlvr_test_user_choices"
SOURCE = '''
import torch

from rlvr.algo import AdvantageBatch, Params, SurrogateOut

CALLS = {"advantage": 0, "surrogate": 0}


def sign_advantage(batch: AdvantageBatch, params: Params):
    """Â_i = sign(r_i − mean_g r) on every token of response i; no value targets."""
    CALLS["advantage"] += 1
    same = batch.group_ids[:, None] == batch.group_ids[None, :]  # (N, N)
    mean = (same * batch.rewards[None, :]).sum(-1) / same.sum(-1)
    return torch.sign(batch.rewards - mean)[:, None] * batch.response_mask, None


def doubled_pg(ratio, advantages, logprobs, params: Params):
    """ℓ = −2·sg(ρ)·Â·logπ, never clipped."""
    CALLS["surrogate"] += 1
    never = torch.zeros_like(ratio, dtype=torch.bool)
    return SurrogateOut(-2.0 * ratio.detach() * advantages * logprobs, never, never)
'''
CHOICES = {"advantage": f"{MODULE}:sign_advantage", "surrogate": f"{MODULE}:doubled_pg"}
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "audit_batch.json"


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / f"{MODULE}.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    module = importlib.import_module(MODULE)
    module.CALLS.update(advantage=0, surrogate=0)
    return module


def test_user_choices_train_two_steps(user_module, small_config):
    cfg = small_config(recipe="grpo", steps=2, **CHOICES)
    run_training(cfg)
    steps = [r for r in read_metrics(Path(cfg.out) / "metrics.jsonl") if r["step"] >= 1]
    assert [r["step"] for r in steps] == [1, 2]
    assert all(math.isfinite(r["loss/policy"]) for r in steps if "loss/policy" in r)
    # Both functions ran: one advantage call per rollout batch, surrogate per micro-batch.
    assert user_module.CALLS["advantage"] >= 2 and user_module.CALLS["surrogate"] >= 2
    recorded = yaml.safe_load((Path(cfg.out) / "config.yaml").read_text())
    assert {k: recorded[k] for k in CHOICES} == CHOICES


def test_user_choices_audit_hand_values(user_module, tmp_path, capsys):
    # grpo's example batch, on-policy (ρ = 1), seq_mean_token_mean with N_seq = 4:
    #   group 0: r = (1, 0), mean 0.5 → Â = (+1, −1); group 1: r = (1, 1) → Â = 0.
    #   ∂L/∂logπ = −2·w·Â: response 0 (2 tokens, w = 1/8): −2/8 = −0.25;
    #   response 1 (8 tokens, w = 1/32): +2/32 = +0.0625.
    data = json.loads(EXAMPLE.read_text())
    data["overrides"] = dict(CHOICES)
    path = tmp_path / "batch.json"
    path.write_text(json.dumps(data))
    assert main(["audit", str(path)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["advantages"][0] == [[1.0] * 2, [-1.0] * 8]
    assert result["grad"][0][0] == pytest.approx([-0.25] * 2, abs=1e-12)
    assert result["grad"][0][1] == pytest.approx([0.0625] * 8, abs=1e-12)
    assert result["grad"][1] == [[0.0] * 3, [0.0] * 2]


def test_user_choices_compare(user_module, tmp_path, capsys):
    matrix = {
        "base": {
            "task_options": {"digits": 2, "ops": "+"},
            "prompts_per_step": 4,
            "group_size": 4,
            "max_new_tokens": 14,
            "eval_size": 8,
            "eval_every": 1,
            "progress": False,
        },
        "recipes": ["grpo"],
        "overrides": {"builtin": {}, "mine": dict(CHOICES)},
        "seeds": [0],
        "budget": {"mode": "steps", "value": 1},
    }
    spec = tmp_path / "matrix.yaml"
    spec.write_text(yaml.safe_dump(matrix))
    out = tmp_path / "cmp"
    assert main(["compare", "--matrix", str(spec), "--out", str(out)]) == 0
    assert user_module.CALLS["surrogate"] >= 1
    report = (out / "report.md").read_text()
    assert f"`surrogate`: 'clip' → '{CHOICES['surrogate']}'" in report
