"""AgentOPSD's turn credit (rlvr/algo/advantages/turn_credit.py), worked by hand.

The hand-worked batch: one group, rewards (1, 0), three agent turns each.
    A = ±0.5/(0.5 + 1e-4) = ±0.99980004 (population std 0.5, the lab's ε = 1e-4)
    b_0 = mean r = 0.5, so logit b_0 = 0 and b_k = σ(c_k).
Trajectory 0 (A > 0), evidence e = (ln 3, −0.95·ln 3, ln 3):
    c = (ln 3, 0.95·ln 3 − 0.95·ln 3 = 0, 0.95·0 + ln 3 = ln 3) → b = (0.75, 0.5, 0.75)
    Δb = (0.25, −0.25, 0.25); o = +Δb; mean 1/12; centred (1/6, −1/3, 1/6);
    std = √((1/36 + 4/36 + 1/36)/3) = 1/√18 = 0.2357023
    z = (1/6, −1/3)/(0.2357023 + 1e-4) = (0.7068069, −1.4136138)
    w = (1.1413614, clip(0.7172772) = 0.8, 1.1413614)   ← the clamp acts on turn 2
    Â/A = 0.5 + 0.5·w = (1.0706807, 0.9, 1.0706807)
Trajectory 1 (A < 0), evidence e = (0, 0, ln 3):
    c = (0, 0, ln 3) → b = (0.5, 0.5, 0.75); Δb = (0, 0, 0.25); o = −Δb = (0, 0, −0.25)
    mean −1/12; centred (1/12, 1/12, −1/6); std = √((1 + 1 + 4)/144/3) = 1/√72 = 0.1178511
    z = (0.7065073, 0.7065073, −1.4130146) → w = (1.1413015, 1.1413015, 0.8)
    Â/A = (1.0706507, 1.0706507, 0.9): every Â stays negative (sign kept); the turn the
    teacher liked in a failed trajectory is blamed least.
Each turn's evidence is Σ over its tokens of log π_T − log π_S; an observation token
between turns (turn id 0) holds garbage log-probs that must not be read.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from pathlib import Path

import pytest
import torch

from rlvr.algo import get_recipe, prepare_batch, selection_metrics
from rlvr.algo.advantages.turn_credit import (
    agent_opsd_advantages,
    belief_changes,
    sequence_advantages,
    turn_evidence,
)

LN3 = math.log(3.0)
A = 0.5 / (0.5 + 1e-4)
W0 = 1 + 0.2 * (1 / 6) / (1 / math.sqrt(18) + 1e-4)
W1 = 1 + 0.2 * (1 / 12) / (1 / math.sqrt(72) + 1e-4)
# float64: each expected value is a few (≤ 20) operations on numbers ≤ 10 in another
# order than the code's, so the two sides differ by ≤ 20·2.2e-16·10 ≈ 5e-14: 1e-12 holds.
TOL = 1e-12


def hand_batch() -> dict[str, torch.Tensor]:
    """Rows of 8 tokens: turn ids, student log-probs, teacher log-probs (see the docstring).
    Row 0: turns 1,1 | obs | 2 | obs | 3 | pad pad.  Row 1: 1 | obs obs | 2,2 | obs | 3 | pad.
    """
    q, h, t = math.log(0.25), math.log(0.5), math.log(0.75)
    turn_ids = torch.tensor([[1, 1, 0, 2, 0, 3, 0, 0], [1, 0, 0, 2, 2, 0, 3, 0]])
    mask = (turn_ids > 0).double()
    student = torch.tensor(
        [[q, h, -7.0, t, -7.0, q, -3.0, -3.0], [h, -7.0, -7.0, h, t, -7.0, q, -3.0]],
        dtype=torch.float64,
    )
    teacher = student.clone()
    teacher[0, 0] = t  # + ln 3 (0.25 → 0.75); token 1 (0.5 → 0.5) adds 0
    teacher[0, 3] = t - 0.95 * LN3  # −0.95·ln 3
    teacher[0, 5] = t  # + ln 3
    teacher[1, 6] = t  # + ln 3; turns 1 and 2 of row 1 add 0
    # Observation and padding tokens hold garbage the turn credit must not read.
    teacher[0, [2, 4, 6, 7]] = 0.0
    teacher[1, [1, 2, 5, 7]] = -50.0
    return {"turn_ids": turn_ids, "mask": mask, "student": student, "teacher": teacher}


def test_sequence_advantage_and_initial_belief_are_the_labs():
    # Population std 0.5 (the lab's np.std, ddof 0; group_norm's would be √0.5); b_0 is the
    # group's mean reward, clamped to [ε, 1 − ε]; a constant group gets A = 0.
    adv, belief = sequence_advantages(
        torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1])
    )
    torch.testing.assert_close(adv, torch.tensor([A, -A, 0.0, 0.0], dtype=torch.float64))
    torch.testing.assert_close(belief, torch.tensor([0.5, 0.5, 1 - 1e-4, 1 - 1e-4]).double())


def test_evidence_sums_each_turns_policy_tokens_only():
    b = hand_batch()
    evidence, present = turn_evidence(b["student"], b["teacher"], b["turn_ids"], b["mask"])
    expected = torch.tensor([[LN3, -0.95 * LN3, LN3], [0.0, 0.0, LN3]], dtype=torch.float64)
    torch.testing.assert_close(evidence, expected, rtol=0, atol=TOL)
    assert present.all()


def test_belief_recursion_by_hand():
    evidence = torch.tensor([[LN3, -0.95 * LN3, LN3], [0.0, 0.0, LN3]], dtype=torch.float64)
    present = torch.ones(2, 3, dtype=torch.bool)
    deltas = belief_changes(evidence, present, torch.tensor([0.5, 0.5]).double(), 0.95)
    expected = torch.tensor([[0.25, -0.25, 0.25], [0.0, 0.0, 0.25]], dtype=torch.float64)
    torch.testing.assert_close(deltas, expected, rtol=0, atol=TOL)
    # The decay matters: with γ = 1, c_2 = ln 3 − 0.95·ln 3 = 0.05·ln 3, so b_2 ≠ 0.5.
    undecayed = belief_changes(evidence, present, torch.tensor([0.5, 0.5]).double(), 1.0)
    assert undecayed[0, 1] > -0.25 + 0.01


def test_three_turn_advantages_by_hand_clamped_and_sign_kept():
    b = hand_batch()
    adv, metrics = agent_opsd_advantages(
        torch.tensor([1.0, 0.0]),
        torch.tensor([7, 7]),
        b["student"],
        b["teacher"],
        b["turn_ids"],
        b["mask"],
    )
    m0, m1 = 0.5 + 0.5 * W0, 0.5 + 0.5 * W1
    expected = torch.tensor(
        [
            [A * m0, A * m0, 0, A * 0.9, 0, A * m0, 0, 0],
            [-A * m1, 0, 0, -A * m1, -A * m1, 0, -A * 0.9, 0],
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(adv, expected, rtol=0, atol=TOL)
    assert math.isclose(m0, 1.0706807, abs_tol=1e-7) and math.isclose(m1, 1.0706507, abs_tol=1e-7)
    weights = [W0, 0.8, W0, W1, W1, 0.8]
    assert metrics["turn/weight_min"] == 0.8  # both clamps reached the bound exactly
    assert math.isclose(metrics["turn/weight_max"], W0, rel_tol=TOL)
    assert math.isclose(metrics["turn/weight_mean"], sum(weights) / 6, rel_tol=TOL)
    dev = sum(abs(w - 1) for w in weights) / 6
    assert math.isclose(metrics["turn/weight_dev_mean"], dev, rel_tol=TOL)
    assert math.isclose(metrics["turn/delta_belief_abs_mean"], 1.0 / 6, rel_tol=TOL)  # 4 × 0.25
    evidence = (LN3 + 0.95 * LN3 + LN3 + LN3) / 6
    assert math.isclose(metrics["turn/evidence_abs_mean"], evidence, rel_tol=TOL)
    assert metrics["turn/turns_mean"] == 3.0


@pytest.mark.parametrize("seed", range(20))
def test_multiplier_stays_in_the_band_and_never_flips_the_sign(seed):
    # Whatever the teacher says (gaps up to ±20 nats per token), Â/A ∈ [1 − λδ, 1 + λδ] =
    # [0.9, 1.1] on every policy token, and 0 where A = 0 (the constant group 1).
    gen = torch.Generator().manual_seed(seed)
    turn_ids = torch.randint(0, 6, (6, 12), generator=gen)
    mask = (turn_ids > 0).double()
    student = -3 * torch.rand(6, 12, generator=gen, dtype=torch.float64)
    teacher = student + 20 * torch.randn(6, 12, generator=gen, dtype=torch.float64)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    group_ids = torch.tensor([0, 0, 0, 0, 1, 1])
    adv, _ = agent_opsd_advantages(rewards, group_ids, student, teacher, turn_ids, mask)
    seq, _ = sequence_advantages(rewards, group_ids)
    ratio = adv / seq[:, None]
    on = (mask > 0) & (seq != 0)[:, None]
    # 1e-12: the multiplier 0.5 + 0.5·w is exact to a few ε of float64.
    assert ratio[on].min() >= 0.9 - 1e-12 and ratio[on].max() <= 1.1 + 1e-12
    assert (torch.sign(adv[on]) == torch.sign(seq[:, None].expand_as(adv)[on])).all()
    assert (adv[mask == 0] == 0).all() and (adv[4:] == 0).all()


def test_one_turn_is_the_labs_grpo_and_an_absent_turn_takes_no_part():
    # One turn: o has one entry, z = 0, w = 1, so Â = A on every token.
    b = hand_batch()
    one = (b["mask"] > 0).long()
    adv, _ = agent_opsd_advantages(
        torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), b["student"], b["teacher"], one, b["mask"]
    )
    torch.testing.assert_close(
        adv, torch.tensor([[A], [-A]], dtype=torch.float64) * b["mask"], rtol=0, atol=0
    )
    # Row 0's turn 2 rejected (its token out of the mask): turns 1 and 3 remain, with
    # c = (ln 3, 0.95·ln 3 + ln 3); the result equals that of a row without turn 2.
    mask = b["mask"].clone()
    mask[0, 3] = 0
    rewards, groups = torch.tensor([1.0, 0.0]), torch.tensor([0, 0])
    with_gap, _ = agent_opsd_advantages(
        rewards, groups, b["student"], b["teacher"], b["turn_ids"], mask
    )
    renumbered = b["turn_ids"].clone()
    renumbered[0, 5] = 2
    without, _ = agent_opsd_advantages(
        rewards, groups, b["student"], b["teacher"], renumbered, mask
    )
    torch.testing.assert_close(with_gap, without, rtol=0, atol=0)


def test_prepare_batch_runs_the_recipe_and_logs_its_turn_metrics():
    b = hand_batch()
    prepared = prepare_batch(
        get_recipe("agent_opsd"),
        rewards=torch.tensor([1.0, 0.0]),
        correct=torch.tensor([1.0, 0.0]),
        truncated=torch.tensor([False, False]),
        response_mask=b["mask"],
        group_ids=torch.tensor([0, 0]),
        max_new_tokens=8,
        old_logprobs=b["student"],
        teacher_logprobs=b["teacher"],
        turn_ids=b["turn_ids"],
    )
    m0 = 0.5 + 0.5 * W0
    assert math.isclose(float(prepared.advantages[0, 0]), A * m0, rel_tol=TOL)
    metrics = selection_metrics(prepared, torch.tensor([0, 0]))
    assert metrics["turn/weight_min"] == 0.8 and metrics["turn/turns_mean"] == 3.0


def test_recipe_fields_are_checked():
    with pytest.raises(ValueError, match="turn_weight_bound must be in"):
        get_recipe("agent_opsd", turn_weight_bound=1.0)
    with pytest.raises(ValueError, match=r"turn_lambda=0\.7 shape AgentOPSD.s turn credit"):
        get_recipe("grpo", turn_lambda=0.7)
    with pytest.raises(ValueError, match="turn_decay must be in"):
        get_recipe("agent_opsd", turn_decay=0.0)
    recipe = get_recipe("agent_opsd")
    assert recipe.needs_teacher and not get_recipe("grpo").needs_teacher
    assert (recipe.clip_low, recipe.clip_high, recipe.advantage) == (0.2, 0.24, "turn_belief")
    with pytest.raises(ValueError, match="needs the teacher's teacher_logprobs"):
        prepare_batch(
            recipe,
            rewards=torch.tensor([1.0, 0.0]),
            correct=torch.tensor([1.0, 0.0]),
            truncated=torch.tensor([False, False]),
            response_mask=torch.ones(2, 3),
            group_ids=torch.tensor([0, 0]),
            max_new_tokens=3,
        )


LAB = Path(
    os.environ.get(
        "RLVR_AGENTIC_RL_LAB", Path(__file__).resolve().parents[2].parent / "shared/agentic-rl-lab"
    )
)
LAB_ADVANTAGES = LAB / "09-AgentOPSD" / "advantages.py"


@pytest.mark.skipif(not LAB_ADVANTAGES.exists(), reason=f"the lab is not at {LAB}")
def test_equals_the_labs_reshape_turn_advantages():
    # The lab's own functions (numpy and floats), token by token, on ragged groups.
    spec = importlib.util.spec_from_file_location("lab_agentopsd_advantages", LAB_ADVANTAGES)
    lab = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = lab  # its dataclasses look their module up
    spec.loader.exec_module(lab)
    gen = torch.Generator().manual_seed(3)
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0])
    group_ids = torch.tensor([0, 0, 0, 0, 1, 1, 1, 2, 2])
    turns = [[3, 2, 4], [2, 2], [1, 1, 1, 1, 1], [5], [2, 3], [4, 1, 1], [2, 2, 2], [1, 2], [3]]
    width = max(sum(t) + 2 * len(t) for t in turns)
    turn_ids = torch.zeros(len(turns), width, dtype=torch.long)
    for i, lengths in enumerate(turns):
        start = 0
        for k, n in enumerate(lengths):
            turn_ids[i, start : start + n] = k + 1
            start += n + 2  # two observation tokens after each turn
    mask = (turn_ids > 0).double()
    student = -2 * torch.rand(mask.shape, generator=gen, dtype=torch.float64)
    teacher = student + 0.5 * torch.randn(mask.shape, generator=gen, dtype=torch.float64)
    adv, _ = agent_opsd_advantages(rewards, group_ids, student, teacher, turn_ids, mask)
    for g in group_ids.unique().tolist():
        rows = (group_ids == g).nonzero().squeeze(-1).tolist()
        seq, belief = lab.group_sequence_advantages(rewards[rows].tolist(), epsilon=1e-4)
        for i, a in zip(rows, seq, strict=True):
            gaps = teacher[i] - student[i]
            evidence = [float(gaps[turn_ids[i] == k + 1].sum()) for k in range(len(turns[i]))]
            credit = lab.reshape_turn_advantages(a, belief, evidence)
            for k, turn in enumerate(credit.turns):
                ours = adv[i][turn_ids[i] == k + 1]
                # float64 both; the sums run in other orders: ≤ 20·ε·|A| ≈ 1e-14.
                torch.testing.assert_close(
                    ours, torch.full_like(ours, turn.advantage), rtol=0, atol=1e-12
                )
