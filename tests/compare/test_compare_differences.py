"""The report's difference check: a field a cell's config.yaml predates has its default
value, so a field added to rlvr later is no confound; a real difference still is one."""

from rlvr.compare.differences import config_differences, recorded
from rlvr.compare.matrix import Cell
from rlvr.compare.results import CellResult


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
