"""`rlvr audit`: the objective a recipe really optimizes, on examples/audit_batch.json."""

import io
import json
import math
from pathlib import Path

import pytest

from rlvr.cli import main

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "audit_batch.json"

# GRPO on the example (on-policy: old = ref = logπ, so ρ = 1 and the KL gradient is 0):
#   group 0: r = (1, 0): mean 0.5, unbiased std √0.5 → a = 0.5/(√0.5 + 1e-6), Â = (+a, −a)
#   group 1: r = (1, 1): std 0 → Â = 0.
#   seq_mean_token_mean, N_seq = 4: w = 1/(4·2) for the 2-token response, 1/(4·8) for the
#   8-token one (truncation does not mask: grpo has no overlong filter).
#   ∂L/∂logπ = −w·Â: −a/8 on both tokens of response 0, +a/32 on the 8 tokens of response 1.
#   L = 2·(1/8)·(−a) + 8·(1/32)·a = 0.
A = 0.5 / (math.sqrt(0.5) + 1e-6)


def example() -> dict:
    return json.loads(EXAMPLE.read_text())


def run_cli(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def audit_json(capsys, data: dict, tmp_path, *extra):
    path = tmp_path / "batch.json"
    path.write_text(json.dumps(data))
    code, out, err = run_cli(capsys, ["audit", str(path), *extra])
    assert code == 0, err
    return json.loads(out)


def approx_nested(actual, expected, tol=1e-9):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        if isinstance(e, list):
            approx_nested(a, e, tol)
        else:
            assert math.isclose(a, e, abs_tol=tol), (a, e)


def test_audit_example_file_grpo_hand_values(capsys):
    code, out, err = run_cli(capsys, ["audit", str(EXAMPLE)])
    assert code == 0 and err == ""
    result = json.loads(out)
    assert result["recipe"] == "grpo"
    assert abs(result["loss"]) < 1e-12
    # group → response → token nesting, lengths as in the file.
    assert [[len(r) for r in g] for g in result["grad"]] == [[2, 8], [3, 2]]
    assert [[len(r) for r in g] for g in result["advantages"]] == [[2, 8], [3, 2]]
    approx_nested(result["advantages"], [[[A] * 2, [-A] * 8], [[0.0] * 3, [0.0] * 2]])
    approx_nested(result["grad"], [[[-A / 8] * 2, [A / 32] * 8], [[0.0] * 3, [0.0] * 2]])
    assert result["kept_groups"] == [0, 1]
    assert result["shaped_rewards"] == [1.0, 0.0, 1.0, 1.0]
    assert "loss/policy" in result["metrics"] and "clip/frac" in result["metrics"]


def test_audit_reads_stdin(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(EXAMPLE.read_text()))
    code, out, _ = run_cli(capsys, ["audit", "-"])
    assert code == 0
    approx_nested(json.loads(out)["grad"][0], [[-A / 8] * 2, [A / 32] * 8])


def test_audit_dapo_drops_uniform_group_with_zero_grads(capsys, tmp_path):
    # DAPO: group 1 is all correct → dropped; L_max = 8, L_c = 2: the 8-token response gets
    # R_len = −1 → shaped reward −1.
    result = audit_json(capsys, example(), tmp_path, "--recipe", "dapo")
    assert result["recipe"] == "dapo"
    assert result["kept_groups"] == [0]
    assert result["shaped_rewards"] == [1.0, -1.0, 1.0, 1.0]
    assert all(v == 0.0 for resp in result["grad"][1] for v in resp)
    assert all(v == 0.0 for resp in result["advantages"][1] for v in resp)
    assert all(v != 0.0 for resp in result["grad"][0] for v in resp)


def test_audit_ppo_reports_value_targets(capsys, tmp_path):
    data = example()
    data["recipe"] = "ppo"
    for group in data["groups"]:
        for resp in group["responses"]:
            resp["values"] = [0.0] * len(resp["logprobs"])
    result = audit_json(capsys, data, tmp_path)
    # V ≡ 0, γ = 1, λ = 0.95, KL = 0 (old = ref): the only δ is r on the last token, so
    # target = Â + 0 = 0.95^{|y|−1−t}·r: (0.95, 1), (0 ×8), (0.9025, 0.95, 1), (0.95, 1).
    expected = [[[0.95, 1.0], [0.0] * 8], [[0.9025, 0.95, 1.0], [0.95, 1.0]]]
    approx_nested(result["value_targets"], expected)
    assert "loss/value" in result["metrics"]


def test_audit_table(capsys):
    code, out, _ = run_cli(capsys, ["audit", str(EXAMPLE), "--table"])
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("recipe grpo") and "kept groups [0, 1]" in lines[0]
    assert "∂L/∂logπ" in out and "metrics:" in out
    rows = [
        line
        for line in lines
        if line.split()[:2] in (["0", "0"], ["0", "1"], ["1", "0"], ["1", "1"])
    ]
    assert len(rows) == 4
    assert "×8" in rows[1]  # eight equal per-token values are compacted


def _bad(**change):
    data = example()
    for key, value in change.items():
        data[key] = value
    return data


def _bad_response(mutate):
    data = example()
    mutate(data["groups"][0]["responses"][0])
    return data


def _write(tmp_path, data) -> str:
    path = tmp_path / "bad.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


BAD_INPUTS = {
    "unknown recipe": (_bad(recipe="grop"), "recipe"),
    "ragged old_logprobs": (
        _bad_response(lambda r: r.update(old_logprobs=[-0.5, -0.5, -0.5])),
        "groups[0].responses[0].old_logprobs",
    ),
    "NaN logprob": (
        _bad_response(lambda r: r.update(logprobs=[-0.5, float("nan")])),
        "groups[0].responses[0].logprobs[1]",
    ),
    "NaN reward": (_bad_response(lambda r: r.update(reward=float("nan"))), "reward"),
    "ppo without values": (_bad(recipe="ppo"), "values"),
    "missing reward": (_bad_response(lambda r: r.pop("reward")), "groups[0].responses[0].reward"),
    "unknown override": (_bad(overrides={"clip_hgh": 0.3}), "clip_hgh"),
    "short budget": (_bad(max_new_tokens=4), "max_new_tokens"),
    "no groups": ({"recipe": "grpo", "groups": []}, "groups"),
    "bad correct": (_bad_response(lambda r: r.update(correct=2)), "correct"),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_audit_bad_input_exits_2_naming_the_field(capsys, tmp_path, case):
    data, field = BAD_INPUTS[case]
    # json.dumps writes NaN as the bare token NaN, which json.loads accepts again.
    code, out, err = run_cli(capsys, ["audit", _write(tmp_path, data)])
    assert code == 2 and out == ""
    assert err.startswith("rlvr: error:") and err.count("\n") == 1, err
    assert field in err


def test_audit_invalid_json_and_missing_file(capsys, tmp_path):
    code, _, err = run_cli(capsys, ["audit", _write(tmp_path, '{"recipe": "grpo",')])
    assert code == 2 and "invalid JSON" in err and err.count("\n") == 1
    code, _, err = run_cli(capsys, ["audit", str(tmp_path / "missing.json")])
    assert code == 2 and "cannot read" in err and err.count("\n") == 1


def test_audit_overrides_not_an_object(capsys, tmp_path):
    code, _, err = run_cli(capsys, ["audit", _write(tmp_path, _bad(overrides="abc"))])
    assert code == 2 and "overrides" in err


def test_audit_nan_override(capsys, tmp_path):
    code, _, err = run_cli(
        capsys, ["audit", _write(tmp_path, _bad(overrides={"clip_high": float("nan")}))]
    )
    assert code == 2 and "clip_high" in err


# ------------------------------------------------------------------ MinPRO off-policy

OFF_POLICY = EXAMPLE.parent / "audit_minpro_offpolicy.json"
# examples/audit_minpro_offpolicy.json: two groups, each r = (1, 0) → Â = (+a, −a) with the
# same a as above; old logπ = −1 everywhere, so ρ = exp(logπ + 1) and token_mean gives every
# one of the 12 tokens the weight 1/12. r_t = ρ̲_t·ρ_t, ρ̲_t = min_{j<t} ρ_j, ρ̲_1 = 1:
#   g0 r0 (+a): ρ = (1, e^0.5, 1)   → r = (1, e^0.5 = 1.6487, 1)      a ratio above the band
#   g0 r1 (−a): ρ = (1, e^−0.5, 1)  → r = (1, e^−0.5 = 0.6065, 0.6065) below the band, and t=3
#                                      is pulled below it by the prefix minimum alone
#   g1 r0 (+a): ρ = (e^−2, 1, 1)    → r = e^−2 = 0.1353 on all three  an early small ratio
#   g1 r1 (−a): ρ = (e^−2, 1, 1)    → r = e^−2 on all three
# minpro (CISPO weight, bounds [0, 4]): ∂L/∂logπ_t = −r_t·Â/12 on every token.
# minpro_clip (PPO clip [0.8, 1.28]): −r_t·Â/12, or 0 where Â > 0 and r > 1.28 (g0 r0 t=2)
#   or Â < 0 and r < 0.8 (g0 r1 t=2, t=3; all of g1 r1).
E_HALF, E_MHALF, E_M2 = math.exp(0.5), math.exp(-0.5), math.exp(-2.0)
MINPRO_GRAD = [
    [[-A / 12, -E_HALF * A / 12, -A / 12], [A / 12, E_MHALF * A / 12, E_MHALF * A / 12]],
    [[-E_M2 * A / 12] * 3, [E_M2 * A / 12] * 3],
]
MINPRO_CLIP_GRAD = [
    [[-A / 12, 0.0, -A / 12], [A / 12, 0.0, 0.0]],
    [[-E_M2 * A / 12] * 3, [0.0] * 3],
]


def test_audit_minpro_off_policy_hand_values(capsys):
    code, out, err = run_cli(capsys, ["audit", str(OFF_POLICY), "--recipe", "minpro"])
    assert code == 0 and err == ""
    result = json.loads(out)
    approx_nested(result["grad"], MINPRO_GRAD)
    # L = Σ −w·Â·logπ/12 = (a/12)·[(2 + 0.5e^0.5) − (1 + 2.5e^−0.5) + 5e^−2 − 5e^−2]
    #   = (a/12)·(1 + 0.5e^0.5 − 2.5e^−0.5) = 0.018151.
    loss = A / 12 * (1 + 0.5 * E_HALF - 2.5 * E_MHALF)
    assert math.isclose(result["loss"], loss, rel_tol=1e-9)
    # The CISPO weight never leaves [0, 4] here: nothing is clipped.
    assert result["metrics"]["clip/frac"] == 0.0


def test_audit_minpro_clip_off_policy_hand_values(capsys):
    code, out, err = run_cli(capsys, ["audit", str(OFF_POLICY), "--recipe", "minpro_clip"])
    assert code == 0 and err == ""
    result = json.loads(out)
    assert result["recipe"] == "minpro_clip"
    approx_nested(result["grad"], MINPRO_CLIP_GRAD)
    # ℓ_t = max(−r_t·Â, −clip(r_t, 0.8, 1.28)·Â):
    #   g0 r0 (−a, −1.28a, −a); g0 r1 (a, 0.8a, 0.8a); g1 r0 −e^−2·a ×3; g1 r1 0.8a ×3
    #   L = (a/12)·(−3.28 + 2.6 − 3e^−2 + 2.4) = (a/12)·(1.72 − 3e^−2) = 0.077428.
    assert math.isclose(result["loss"], A / 12 * (1.72 - 3 * E_M2), rel_tol=1e-9)
    # 6 of 12 tokens clipped: 1 high (g0 r0 t=2), 5 low.
    assert math.isclose(result["metrics"]["clip/frac"], 0.5)
    assert math.isclose(result["metrics"]["clip/high_frac"], 1 / 12)
    assert math.isclose(result["metrics"]["clip/low_frac"], 5 / 12)


def test_audit_minpro_tables_show_where_the_two_forms_differ(capsys):
    rows = {}
    for recipe in ("minpro", "minpro_clip"):
        code, out, _ = run_cli(capsys, ["audit", str(OFF_POLICY), "--recipe", recipe, "--table"])
        assert code == 0 and out.splitlines()[0].startswith(f"recipe {recipe} ")
        rows[recipe] = [line.split("  ")[-1].strip() for line in out.splitlines()[3:7]]
    assert rows["minpro"] == [
        "-0.0589 -0.0972 -0.0589",
        "+0.0589 +0.0357 +0.0357",
        "-0.0080 ×3",
        "+0.0080 ×3",
    ]
    assert rows["minpro_clip"] == [
        "-0.0589 +0.0000 -0.0589",
        "+0.0589 +0.0000 +0.0000",
        "-0.0080 ×3",
        "+0.0000 ×3",
    ]


def test_audit_minpro_forms_agree_on_policy(capsys):
    # examples/audit_batch.json is on-policy (old = logπ): r = 1 inside both bands, so both
    # forms give −Â/N_tokens on every token (N = 2 + 8 + 3 + 2 = 15; group 1 has Â = 0).
    grads = {}
    for recipe in ("minpro", "minpro_clip"):
        code, out, _ = run_cli(capsys, ["audit", str(EXAMPLE), "--recipe", recipe])
        assert code == 0
        grads[recipe] = json.loads(out)["grad"]
    expected = [[[-A / 15] * 2, [A / 15] * 8], [[0.0] * 3, [0.0] * 2]]
    approx_nested(grads["minpro"], expected)
    approx_nested(grads["minpro_clip"], expected)


# ---------------------------------------------------------------- absurd inputs (issue 9)


def _fails_with_one_line(capsys, tmp_path, data, *needles):
    code, out, err = run_cli(capsys, ["audit", _write(tmp_path, data)])
    assert code == 2 and out == ""
    assert err.startswith("rlvr: error:") and err.count("\n") == 1, err
    assert len(err) < 400, err
    for needle in needles:
        assert needle in err, err
    return err


def test_audit_rejects_a_misspelled_response_field(capsys, tmp_path):
    # `old_logprob` (no s) used to be ignored, so the audit silently ran on-policy.
    data = _bad_response(lambda r: r.update(old_logprob=[-0.1, -0.1]))
    _fails_with_one_line(
        capsys, tmp_path, data, "groups[0].responses[0]", "'old_logprob'", "old_logprobs"
    )


@pytest.mark.parametrize(
    ("data", "where"),
    [
        (_bad(recipie="grpo"), "batch"),
        ({**example(), "groups": [{**example()["groups"][0], "resp": []}]}, "groups[0]"),
    ],
)
def test_audit_rejects_unknown_top_level_and_group_fields(capsys, tmp_path, data, where):
    _fails_with_one_line(capsys, tmp_path, data, where, "unknown field", "valid fields")


def test_audit_deeply_nested_json_is_one_line(capsys, tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    _fails_with_one_line(capsys, tmp_path, '{"recipe": "grpo", "groups": ' + deep + "}", "nested")
    # Nested but parseable: the message stays short instead of echoing the structure.
    nested = "[" * 500 + "-0.5" + "]" * 500
    text = json.dumps(example()).replace("[-0.5, -0.5]", nested, 1)
    _fails_with_one_line(capsys, tmp_path, text, "logprobs[0]", "must be a number")


@pytest.mark.parametrize(
    ("reward", "needle"),
    [
        ("1" + "0" * 400, "reward must be in"),
        ("1e308", "reward must be in"),
        ("-1e308", "reward must be in"),
        ("Infinity", "reward must be finite"),
        ("1" + "0" * 5000, "digits"),  # beyond Python's int parsing limit: no field to name
    ],
)
def test_audit_absurd_rewards_are_one_line(capsys, tmp_path, reward, needle):
    text = json.dumps(example()).replace('"reward": 1.0', f'"reward": {reward}', 1)
    _fails_with_one_line(capsys, tmp_path, text, needle)


def test_audit_caps_the_padded_size_with_a_clear_message(capsys, tmp_path):
    # 6 responses padded to a 100k-token response: 600,000 cells > 500,000.
    data = example()
    data["max_new_tokens"] = 100_000
    data["groups"][0]["responses"][0]["logprobs"] = [-0.5] * 100_000
    data["groups"].append(example()["groups"][1])
    _fails_with_one_line(capsys, tmp_path, data, "600,000", "500,000")


def test_audit_without_recipe_says_so(capsys, tmp_path):
    data = example()
    data.pop("recipe")
    err = _fails_with_one_line(capsys, tmp_path, data, "recipe is missing", "grpo", "--recipe")
    assert "None" not in err
