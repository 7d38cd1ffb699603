"""Matrix specs: labels, cells and errors that name the bad field."""

from __future__ import annotations

import pytest
from compare_testlib import tiny_spec

from rlvr.compare import Budget, spec_from_dict, spec_from_options
from rlvr.compare.matrix import parse_seeds


def test_cells_hold_every_condition_fixed_but_the_compared_one(tmp_path):
    cells = tiny_spec().cells(tmp_path)
    assert [c.name for c in cells] == ["grpo-seed0", "dr_grpo-seed0", "grpo-seed1", "dr_grpo-seed1"]

    def rest(cell):
        return {k: v for k, v in cell.config.items() if k not in {"recipe", "seed", "out"}}

    assert all(rest(cell) == rest(cells[0]) for cell in cells)
    assert cells[0].config["steps"] == 2 and cells[0].config["progress"] is False


def test_override_labels_and_yaml_form(tmp_path):
    spec = spec_from_dict({
        "base": {"eval_size": 16},
        "recipes": ["grpo"],
        "overrides": {"default": {}, "clip_high=0.28": {"clip_high": 0.28}},
        "seeds": 2,
        "budget": {"mode": "steps", "value": 3},
    })  # fmt: skip
    assert spec.labels() == ["default", "clip_high=0.28"]
    assert spec.seeds == (0, 1)
    cells = spec.cells(tmp_path)
    assert cells[1].config["clip_high"] == 0.28 and "clip_high" not in cells[0].config
    two = spec_from_dict({"recipes": ["grpo", "dapo"], "overrides": {"lr2": {"lr": 2e-4}}})
    assert two.labels() == ["grpo+lr2", "dapo+lr2"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"recipes": ["grpo"], "budget": {"mode": "flops"}}, "budget.mode='flops'"),
        ({"recipe": "grpo"}, "unknown matrix key"),
        ({"base": {"seed": 3}}, "base.seed"),
        ({"recipes": ["grpo"], "baseline": "dapo"}, "baseline='dapo'"),
        ({"overrides": {"x": {"seed": 1}}}, "overrides.x"),
        ({"budget": {"value": 0}}, "budget.value"),
        ({"overrides": {"x": {"steps": 5}}}, r"overrides.x sets \['steps'\]"),
    ],
)
def test_bad_specs_name_the_field(data, message):
    with pytest.raises(ValueError, match=message):
        spec_from_dict(data)


def test_unknown_recipe_names_the_cell(tmp_path):
    with pytest.raises(ValueError, match="cell nope-seed0: recipe='nope'"):
        spec_from_dict({"recipes": ["nope"]}).cells(tmp_path)


def test_parse_seeds():
    assert parse_seeds("3") == (0, 1, 2)
    assert parse_seeds("0,4,7") == (0, 4, 7)
    with pytest.raises(ValueError, match="--seeds"):
        parse_seeds("a,b")


def test_budget_from_options():
    base = {"steps": 100, "seed": 3, "out": "x", "eval_size": 16}
    steps = spec_from_options(train_config=base)
    assert (steps.budget.mode, steps.budget.value) == ("steps", 100)
    assert "seed" not in steps.base and steps.base["eval_size"] == 16
    assert spec_from_options(train_config=base, steps=7).budget.value == 7
    tokens = spec_from_options(train_config=base, tokens=5000, steps=40)
    assert tokens.budget == Budget("tokens", 5000, max_steps=40)
    with pytest.raises(ValueError, match=r"needs budget\.value"):
        spec_from_options(budget_mode="tokens")


def test_an_updates_budget_sets_each_cells_steps(tmp_path):
    spec = spec_from_dict({
        "base": {"prompts_per_step": 8},
        "recipes": ["grpo"],
        "overrides": {"mb2": {"num_minibatches": 2}, "mb4x2": {"num_minibatches": 4, "ppo_epochs": 2}},
        "budget": {"mode": "updates", "value": 200},
    })  # fmt: skip
    assert [c.config["steps"] for c in spec.cells(tmp_path)] == [100, 25]
    assert "equal optimizer updates: 200 per cell" in spec.budget.describe()
    odd = spec_from_dict({**spec.to_dict(), "budget": {"mode": "updates", "value": 30}})
    with pytest.raises(ValueError, match=r"cell mb4x2-seed0: budget.mode='updates': value 30 "):
        odd.cells(tmp_path)
    merged = spec_from_options(matrix=spec.to_dict(), updates=16)
    assert merged.budget == Budget("updates", 16)
    with pytest.raises(ValueError, match=r"--steps does not apply to budget.mode='updates'"):
        spec_from_options(matrix=spec.to_dict(), steps=3)
    with pytest.raises(ValueError, match=r"--updates does not apply to budget.mode='steps'"):
        spec_from_options(budget_mode="steps", updates=3)


def test_warm_seed_per_seed_varies_the_warm_start_with_the_seed(tmp_path):
    cells = tiny_spec(warm_seed="per_seed").cells(tmp_path)
    assert [(c.seed, c.config["warm_seed"]) for c in cells] == [(0, 0), (0, 0), (1, 1), (1, 1)]
    assert tiny_spec(warm_seed="per_seed").to_dict()["warm_seed"] == "per_seed"
    assert "warm_seed" not in tiny_spec().to_dict()  # shared: the base's, as before
    assert all("warm_seed" not in c.config for c in tiny_spec().cells(tmp_path))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"warm_seed": 3}, "warm_seed=3 is unknown; valid: shared, per_seed"),
        ({"warm_seed": "per_seed", "base": {"warm_seed": 1}}, "remove warm_seed from base"),
        ({"compares": ["clip_hi"]}, r"compares names unknown config field\(s\) \['clip_hi'\]"),
        ({"compares": 3}, "compares must be a list of config field names, got 3"),
    ],
)
def test_compares_and_warm_seed_errors_name_the_field(change, message):
    with pytest.raises(ValueError, match=message):
        tiny_spec(**change)
