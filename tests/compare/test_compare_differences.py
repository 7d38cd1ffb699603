"""The report's difference check: ✔ only when exactly the compared fields differ; a field
a cell's config.yaml predates has its default value, so a field added to rlvr later is no
confound; a real difference still is one."""

from rlvr.compare.differences import (
    all_differences,
    config_differences,
    difference_check,
    recorded,
)
from rlvr.compare.matrix import Cell, spec_from_dict
from rlvr.compare.report import differences_section
from rlvr.compare.results import CellResult
from rlvr.train.config import resolve_config


def _result(label: str, config: dict, overrides: dict | None = None) -> CellResult:
    cell = Cell(label, "grpo", 0, overrides or {}, {})
    return CellResult(cell, [], [], {}, {"recipe": "grpo", "seed": 0, **config})


def test_a_field_the_older_cell_predates_takes_its_default():
    old = _result("a", {"lr": 1e-4})  # written before teacher_kl_coef existed
    new = _result("b", {"lr": 1e-4, "teacher_kl_coef": 0.0, "reward_errors": "drop"})
    assert recorded(old, "teacher_kl_coef") == 0.0  # grpo's value of the recipe field
    assert recorded(old, "reward_errors") == "drop"  # TrainConfig's default
    assert recorded(old, "tools") == []  # a default_factory field
    assert config_differences(new, old) == []


def test_a_real_difference_is_still_one():
    old = _result("a", {"lr": 1e-4})
    new = _result("b", {"lr": 2e-4, "teacher_kl_coef": 0.5})
    found = {(d.key, d.baseline_value, d.value, d.allowed) for d in config_differences(new, old)}
    assert found == {("lr", 1e-4, 2e-4, False), ("teacher_kl_coef", 0.0, 0.5, False)}


# --- the ✔/✘ check over whole matrices (issue 32) ---------------------------------------


def _matrix_results(data: dict) -> tuple[list[CellResult], object]:
    """Each cell of the spec with its fully resolved config, as config.yaml records it."""
    spec = spec_from_dict({"seeds": [0], **data})
    cells = spec.cells("/tmp/unused")
    return [CellResult(c, [], [], {}, resolve_config(c.config).to_dict()) for c in cells], spec


def _section(data: dict) -> tuple[str, list[str]]:
    results, spec = _matrix_results(data)
    diffs = all_differences(results, spec.baseline_label, spec.compares, spec.budget.per_cell_keys)
    return differences_section(diffs, spec.labels(), spec.baseline_label, spec.compares)


def test_one_override_is_the_only_difference():
    text, warnings = _section(
        {"recipes": ["grpo"], "overrides": {"sym": {}, "high": {"clip_high": 0.28}}}
    )
    assert "Only the compared fields differ between conditions. ✔" in text
    assert "`clip_high`: 0.2 → 0.28" in text and "✘" not in text and warnings == []


def test_a_matrix_differing_in_kl_does_not_print_the_tick():
    # gspo vs grpo, declared as a comparison of the ratio and its clip range: the recipes
    # also differ in the KL term (k3, β 0.04 vs none) and the zero-advantage skip.
    text, warnings = _section(
        {"recipes": ["grpo", "gspo"], "compares": ["ratio", "clip_low", "clip_high"]}
    )
    assert "✔" not in text and "✘ **More than the compared fields differ**" in text
    assert "gspo differs beyond the compared fields in `kl`, `kl_coef`, `zero_adv_skip`" in text
    assert "`kl_coef`: 0.04 → 0.0 (package)" in text
    assert warnings == []  # the recipes explain it: a package, not a stray confound
    # The same KL difference made by an override the comparison does not declare.
    text, _ = _section(
        {
            "recipes": ["grpo"],
            "overrides": {"a": {"clip_high": 0.2}, "b": {"clip_high": 0.28, "kl_coef": 0.0}},
            "compares": ["clip_high"],
        }
    )
    assert "✔" not in text and "b differs beyond the compared fields in `kl_coef`" in text


def test_undeclared_recipe_comparison_lists_every_field_and_is_not_ticked():
    results, spec = _matrix_results({"recipes": ["grpo", "dr_grpo"]})
    diffs = all_differences(results, "grpo")
    assert {d.key for d in diffs} == {"recipe", "advantage", "aggregation", "kl", "kl_coef"}
    ok, problems = difference_check(diffs, spec.labels(), "grpo", ())
    assert not ok and len(problems) == 1


def test_matched_kl_leaves_only_the_compared_fields():
    # kl_coef 0 in the base for both: the estimator's name (k3 vs none) no longer acts.
    text, _ = _section(
        {
            "base": {"kl_coef": 0.0},
            "recipes": ["grpo", "dr_grpo"],
            "compares": ["advantage", "aggregation"],
        }
    )
    assert "Only the compared fields differ between conditions. ✔" in text


def test_a_declared_field_that_does_not_differ_is_not_ticked():
    results, spec = _matrix_results(
        {
            "recipes": ["grpo"],
            "overrides": {"a": {}, "b": {"lr": 2e-4}},
            "compares": ["lr", "clip_high"],
        }
    )
    ok, problems = difference_check(
        all_differences(results, "a", spec.compares), spec.labels(), "a", spec.compares
    )
    assert not ok and problems == ["b does not differ in compared field(s) clip_high"]


def test_equal_updates_give_each_cell_its_steps_without_a_difference():
    # 2 vs 8 minibatches at 16 optimizer updates: 8 and 2 training steps; `steps` is the
    # budget's doing, so only the compared field is listed
    data = {
        "recipes": ["grpo"],
        "overrides": {"mb2": {"num_minibatches": 2}, "mb8": {"num_minibatches": 8}},
        "budget": {"mode": "updates", "value": 16},
        "compares": ["num_minibatches"],
    }
    results, _ = _matrix_results(data)
    assert [r.config["steps"] for r in results] == [8, 2]
    text, warnings = _section(data)
    assert "Only the compared fields differ between conditions. ✔" in text
    assert "`steps`" not in text and warnings == []
    text, _ = _section({**data, "budget": {"mode": "steps", "value": 4}})
    assert "Only the compared fields differ" in text  # equal steps: nothing else differs
