"""`rlvr audit` on multi-turn episodes: observation tokens are context, never trained on.

examples/audit_episode.json: one group, r = (1, 0), two trajectories (P: a policy token,
O: an observation token, marked by `"observation"`):
    response 0: P P O O P     length 5, 3 policy tokens
    response 1: P O O O O P   length 6, 2 policy tokens
On-policy (old = ref = logπ: every ratio is 1, the KL and its gradient are 0).
group_norm: mean 0.5, unbiased std √0.5 → A = 0.5/(√0.5 + 1e-6) ≈ 0.7071, Â = (+A, −A) on
the policy tokens and 0 on the observation tokens. ∂L/∂logπ_t = −w_t·Â on a policy token.
"""

import copy
import json
import math
from pathlib import Path

import pytest
import torch

from rlvr.algo import RECIPES, get_recipe, policy_loss, prepare_batch
from rlvr.audit import format_audit, parse_batch, run_audit
from rlvr.cli import main

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "audit_episode.json"
A = 0.5 / (math.sqrt(0.5) + 1e-6)
OBS = [[0, 0, 1, 1, 0], [0, 1, 1, 1, 1, 0]]


def example(recipe: str = "grpo") -> dict:
    data = json.loads(EXAMPLE.read_text())
    data["recipe"] = recipe
    if RECIPES[recipe].needs_critic:
        for resp in data["groups"][0]["responses"]:
            resp["values"] = [0.0] * len(resp["logprobs"])
    return data


def spread(policy_grads: tuple[float, float]) -> list[list[float]]:
    """One value per response on its policy tokens, 0 on its observation tokens."""
    return [[0.0 if o else g for o in obs] for g, obs in zip(policy_grads, OBS, strict=True)]


def close(actual, expected, tol=1e-9):
    assert len(actual) == len(expected), (actual, expected)
    for a, e in zip(actual, expected, strict=True):
        if isinstance(e, list):
            close(a, e, tol)
        else:
            assert math.isclose(a, e, rel_tol=tol, abs_tol=tol), (a, e)


# Hand-worked ∂L/∂logπ per policy token of (response 0, response 1) on the example.
# Had the observation tokens been counted, every normaliser below would differ.
D = (2 / 3) / ((4 / 3) / math.sqrt(2) + 1e-6)  # dapo's Â after shaping (see its test)
W = 1 / (math.sqrt(0.3) + 1e-6)  # reinforce_pp's whitening scale (see below)
HAND_GRADS = {
    # seq_mean_token_mean, N_seq = 2, |y| = policy tokens (3, 2): −A/(2·3), +A/(2·2).
    # (Counting observations, |y| = (5, 6): −A/10, +A/12.)
    "grpo": (-A / 6, A / 4),
    # GSPO on-policy: s_i = 1, ∂s_i/∂logπ_t = 1/|y_i| over policy tokens, seq mean over 2
    # responses: −A/(2·3), +A/(2·2), as grpo.
    "gspo": (-A / 6, A / 4),
    # token_mean: 5 policy tokens in the batch (not 11): ∓A/5.
    "cispo": (-A / 5, A / 5),
    "minpro": (-A / 5, A / 5),
    "minpro_clip": (-A / 5, A / 5),
    # dapo: token_mean over 5 policy tokens; the overlong ramp reads the trajectory length:
    # L_max = 8, L_c = 3, soft start 5; response 1 has 6 tokens → R_len = (5 − 6)/3 = −1/3,
    # shaped r = (1, −1/3), mean 1/3, std = (4/3)/√2 → Â = ±(2/3)/((4/3)/√2 + 1e-6) = ±D.
    "dapo": (-D / 5, D / 5),
    # Dr. GRPO: Â = ±0.5, constant 1/(N_seq·L_budget) = 1/(2·8): ∓0.5/16.
    "dr_grpo": (-1 / 32, 1 / 32),
    # RLOO: Â = G/(G−1)·(r − mean) = ±1, seq_mean_token_sum 1/N_seq = 1/2: ∓1/2.
    "rloo": (-0.5, 0.5),
    # ScaleRL: x = ±0.5, batch std √0.5 → Â = ±A; prompt_mean: 1/(P·group tokens) = 1/5.
    "scalerl": (-A / 5, A / 5),
    # REINFORCE++: reward-to-go R = 1 on response 0's 3 policy tokens, 0 on response 1's 2;
    # whitened over those 5: mean 0.6, unbiased var (3·0.16 + 2·0.36)/4 = 0.3, so
    # Â = (0.4·W, −0.6·W); token_mean 1/5.
    "reinforce_pp": (-0.4 * W / 5, 0.6 * W / 5),
}


@pytest.mark.parametrize("recipe", sorted(HAND_GRADS))
def test_episode_hand_worked_gradients(recipe):
    result = run_audit(example(recipe))
    close(result["grad"][0], spread(HAND_GRADS[recipe]))
    assert result["metrics"]["rollout/trained_tokens"] == 5.0  # policy tokens only
    assert result["observation"] == [OBS]


def test_episode_example_file_from_the_cli(capsys):
    assert main(["audit", str(EXAMPLE)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["recipe"] == "grpo"
    close(result["advantages"][0], spread((A, -A)))  # Â is broadcast over policy tokens only
    close(result["grad"][0], spread((-A / 6, A / 4)))


def test_ppo_gae_skips_observation_tokens():
    # V ≡ 0, γ = 1, λ = 0.95, KL 0: the reward sits on the last policy token and GAE steps
    # over policy tokens only, so response 0's targets are 0.95², 0.95, 1 on its policy
    # tokens (counting its 2 observation tokens as steps would give 0.95⁴, 0.95³, 1).
    result = run_audit(example("ppo"))
    close(result["value_targets"][0], [[0.9025, 0.95, 0.0, 0.0, 1.0], [0.0] * 6])


def test_dapo_overlong_ramp_counts_the_whole_trajectory():
    # The budget bounds the trajectory (policy + observation tokens), so response 1's 6
    # tokens reach the ramp (R_len = −1/3) though it sampled only 2; without its span the
    # response has 2 tokens and no penalty.
    assert run_audit(example("dapo"))["shaped_rewards"] == pytest.approx([1.0, -1 / 3])
    assert run_audit(strip(example("dapo")))["shaped_rewards"] == [1.0, 0.0]


# ------------------------------------------------ the observation tokens' log-probs are inert


def off_policy_episodes() -> dict:
    """The example plus a second group, with π_old, π_ref and V far from π on every
    observation token (what a leak would read) and mildly off on the policy tokens."""
    data = example()
    data["groups"].append(copy.deepcopy(data["groups"][0]))
    data["groups"][1]["responses"][0]["reward"] = 0.5
    data["max_new_tokens"], data["overlong_cache"] = 16, 4  # no trajectory reaches the ramp
    for g, group in enumerate(data["groups"]):
        for i, resp in enumerate(group["responses"]):
            obs, lp = resp["observation"], resp["logprobs"]
            shift = 0.05 * (1 + g + i)
            resp["old_logprobs"] = [-0.01 if o else v - shift for o, v in zip(obs, lp, strict=True)]
            resp["ref_logprobs"] = [-9.0 if o else v + shift for o, v in zip(obs, lp, strict=True)]
            resp["values"] = [50.0 if o else 0.1 * t for t, o in enumerate(obs)]
            # The teacher (opd, opsd): far off on observation tokens, or null there.
            far = None if i else -9.0
            resp["teacher_logprobs"] = [
                far if o else v - 2 * shift for o, v in zip(obs, lp, strict=True)
            ]
    return data


def strip(data: dict) -> dict:
    """The same batch with every observation span removed from its responses."""
    data = copy.deepcopy(data)
    for group in data["groups"]:
        for resp in group["responses"]:
            keep = [not o for o in resp.pop("observation")]
            for key in ("logprobs", "old_logprobs", "ref_logprobs", "values", "teacher_logprobs"):
                if key in resp:
                    resp[key] = [v for v, k in zip(resp[key], keep, strict=True) if k]
    return data


def for_recipe(data: dict, recipe: str) -> dict:
    data = {**copy.deepcopy(data), "recipe": recipe}
    if not RECIPES[recipe].needs_critic:
        for group in data["groups"]:
            for resp in group["responses"]:
                resp.pop("values", None)
    return data


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_observation_tokens_get_exactly_zero_gradient(recipe):
    result = run_audit(for_recipe(off_policy_episodes(), recipe))
    for g, group in enumerate(result["observation"]):
        for i, obs in enumerate(group):
            grads = result["grad"][g][i]
            assert all(grads[t] == 0.0 for t, o in enumerate(obs) if o), (g, i, grads)
            assert all(result["advantages"][g][i][t] == 0.0 for t, o in enumerate(obs) if o)
    assert any(v != 0.0 for group in result["grad"] for resp in group for v in resp)


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_a_marked_span_equals_the_span_removed(recipe):
    # Removing the spans changes no policy token's gradient, the loss or any metric: no
    # normaliser, ratio (GSPO's mean, MinPRO's prefix minimum), KL, advantage (GAE,
    # whitening) or value target reads an observation token. This holds for dapo only
    # because no trajectory here reaches its overlong ramp (budget 16, cache 4: soft start
    # 12): the ramp reads the trajectory's length, observations included (test above), and
    # Dr. GRPO's constant reads the budget, given explicitly so both batches share it.
    marked = run_audit(for_recipe(off_policy_episodes(), recipe))
    removed = run_audit(for_recipe(strip(off_policy_episodes()), recipe))
    policy = lambda nested: [  # noqa: E731
        [
            [v for v, o in zip(resp, obs, strict=True) if not o]
            for resp, obs in zip(group, group_obs, strict=True)
        ]
        for group, group_obs in zip(nested, marked["observation"], strict=True)
    ]
    close(policy(marked["grad"]), removed["grad"], tol=1e-12)
    close(policy(marked["advantages"]), removed["advantages"], tol=1e-12)
    if "value_targets" in removed:
        close(policy(marked["value_targets"]), removed["value_targets"], tol=1e-12)
    assert math.isclose(marked["loss"], removed["loss"], rel_tol=1e-12, abs_tol=1e-15)
    assert marked["metrics"].keys() == removed["metrics"].keys()
    for key, value in removed["metrics"].items():
        assert math.isclose(marked["metrics"][key], value, rel_tol=1e-9, abs_tol=1e-12), key
    assert any(v != 0.0 for group in removed["grad"] for resp in group for v in resp)


def test_gspo_sequence_ratio_reads_policy_tokens_only():
    # Δ = +1 on every observation token, 0 on the policy tokens. Over policy tokens s_i = 1,
    # inside GSPO's band [1 − 3e-4, 1 + 4e-4], so the gradient is grpo's −A/6, +A/4.
    # Were the 2 observation tokens of response 0 in its mean, s_0 = exp(2/5) with Â > 0:
    # clipped, gradient 0.
    data = example("gspo")
    for resp, obs in zip(data["groups"][0]["responses"], OBS, strict=True):
        resp["old_logprobs"] = [
            v - 1.0 if o else v for v, o in zip(resp["logprobs"], obs, strict=True)
        ]
    result = run_audit(data)
    close(result["grad"][0], spread((-A / 6, A / 4)))
    assert result["metrics"]["clip/seq_frac"] == 0.0


@pytest.mark.parametrize("recipe", ["minpro", "minpro_clip"])
def test_minpro_prefix_minimum_skips_observation_tokens(recipe):
    # ρ = e^−2 on every observation token, 1 on the policy tokens. The prefix minimum runs
    # over policy tokens only, so every weight stays 1 and the gradient is ∓A/5; were the
    # span in the prefix, the last token of each response would get e^−2·A/5.
    data = example(recipe)
    for resp, obs in zip(data["groups"][0]["responses"], OBS, strict=True):
        resp["old_logprobs"] = [
            -0.0 if o else v for v, o in zip(resp["logprobs"], obs, strict=True)
        ]
        resp["logprobs"] = [
            v - 2.0 if o else v for v, o in zip(resp["old_logprobs"], obs, strict=True)
        ]
    close(run_audit(data)["grad"][0], spread((-A / 5, A / 5)))


def test_an_all_observation_response_contributes_and_counts_nothing():
    # A third response with no policy token, reward 0. Its reward still enters the group's
    # baseline (as in training: advantages read rewards, not masks): r = (1, 0, 0), mean
    # 1/3, unbiased var (4/9 + 1/9 + 1/9)/2 = 1/3 → Â = (2/3, −1/3)/(√(1/3) + 1e-6). It is
    # not a sequence of N_seq (2, not 3): grpo's gradient is −Â_0/(2·3), −Â_1/(2·2).
    data = example()
    data["groups"][0]["responses"].append(
        {"reward": 0.0, "logprobs": [-1.0, -1.0], "observation": [1, 1]}
    )
    result = run_audit(data)
    s = math.sqrt(1 / 3) + 1e-6
    close(result["grad"][0], [*spread((-(2 / 3) / s / 6, (1 / 3) / s / 4)), [0.0, 0.0]])
    assert result["metrics"]["rollout/trained_tokens"] == 5.0


# ------------------------------------------------------------- the loop's own derivation


def test_the_audit_prepares_episodes_as_the_training_loop_does():
    # Trainer._prepare: response_mask = rollout.loss_mask, lengths = rollout.lengths, from
    # a Rollout whose forced_mask holds the observation tokens. dapo: both masks matter.
    from rlvr.train.records.rollout_record import Rollout

    data = example("dapo")
    batch = parse_batch(data, needs_values=False)
    n = len(batch.rewards)
    rollout = Rollout(
        prompt_ids=[[1]] * n,
        response_ids=torch.zeros_like(batch.mask, dtype=torch.long),
        response_mask=batch.mask,
        sampler_logprobs=batch.logprobs,
        truncated=batch.truncated,
        group_ids=batch.group_ids,
        problem_uids=["p"] * n,
        texts=[""] * n,
        correct=batch.correct,
        formatted=torch.ones(n),
        rewards=batch.rewards,
        forced_mask=batch.observation,
    )
    recipe = get_recipe("dapo", overlong_cache=3)
    prepared = prepare_batch(
        recipe,
        rewards=rollout.rewards,
        correct=rollout.correct,
        truncated=rollout.truncated,
        response_mask=rollout.loss_mask,
        group_ids=rollout.group_ids,
        max_new_tokens=8,
        old_logprobs=batch.old_logprobs,
        ref_logprobs=batch.ref_logprobs,
        lengths=rollout.lengths,
    )
    logprobs = batch.logprobs.clone().requires_grad_(True)
    loss, _ = policy_loss(
        recipe,
        logprobs=logprobs,
        old_logprobs=batch.old_logprobs,
        advantages=prepared.advantages,
        loss_weights=prepared.loss_weights,
        response_mask=prepared.response_mask,
        ref_logprobs=batch.ref_logprobs,
    )
    loss.backward()
    result = run_audit(data)
    assert torch.equal(batch.loss_mask, rollout.loss_mask)
    assert torch.equal(batch.lengths, rollout.lengths)
    assert result["shaped_rewards"] == [round(float(r), 10) for r in prepared.shaped_rewards]
    rows = [logprobs.grad[i, :length].tolist() for i, length in enumerate(batch.shape[0])]
    close(result["grad"][0], rows, tol=1e-9)


# ------------------------------------------------------------------------ table and inputs


def test_table_marks_observation_tokens(capsys):
    assert main(["audit", str(EXAMPLE), "--table"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # −A/6 = −0.1179, +A/4 = +0.1768; len counts the whole trajectory.
    assert lines[3].split()[:4] == ["0", "0", "5", "1.000"]
    assert lines[3].endswith("-0.1179 ×2 | obs ×2 | -0.1179 ×1")
    assert lines[4].endswith("+0.1768 ×1 | obs ×4 | +0.1768 ×1")
    assert lines[5].startswith("obs: observation tokens")


def test_table_without_observations_is_unchanged():
    result = run_audit(json.loads((EXAMPLE.parent / "audit_batch.json").read_text()))
    assert "observation" not in result
    assert "obs" not in format_audit(result)


def _with_observation(value, response=1):
    data = example()
    data["groups"][0]["responses"][response]["observation"] = value
    return data


@pytest.mark.parametrize(
    ("data", "needles"),
    [
        (_with_observation([0, 1]), ["groups[0].responses[1].observation has 2 entries", "6"]),
        (_with_observation([0, 2, 0, 0, 0, 0]), ["groups[0].responses[1].observation[1]", "2"]),
        (_with_observation([0, 0.5, 0, 0, 0, 0]), ["observation[1]", "0.5"]),
        (_with_observation([0, "1", 0, 0, 0, 0]), ["observation[1]", "'1'"]),
        (_with_observation([0, 1.0, 0, 0, 0, 0]), ["observation[1]", "1.0"]),
        (_with_observation(None, response=0), ["groups[0].responses[0].observation", "list"]),
        (_with_observation("01"), ["groups[0].responses[1].observation", "list"]),
        ({**example(), "max_new_tokens": 5}, ["max_new_tokens", "(6 tokens, observations"]),
    ],
)
def test_bad_observation_fields_name_the_response(capsys, tmp_path, data, needles):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    assert main(["audit", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlvr: error:") and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, err


def test_observation_accepts_json_booleans():
    data = example()
    data["groups"][0]["responses"][0]["observation"] = [False, False, True, True, False]
    close(run_audit(data)["grad"][0], spread((-A / 6, A / 4)))
