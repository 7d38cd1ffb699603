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
