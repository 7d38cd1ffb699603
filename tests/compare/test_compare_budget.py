"""The budget line states what was measured equal: a steps budget with different
minibatch counts must not claim equal optimizer steps (issue 32)."""

from rlvr.compare.budget import budget_lines, optimizer_updates
from rlvr.compare.matrix import Budget, Cell
from rlvr.compare.results import CellResult


def _cell(label: str, seed: int, minibatches: int, steps: int = 3, logged: bool = True,
          tokens: float = 100.0) -> CellResult:  # fmt: skip
    records = [{"step": 0, "eval/accuracy": 0.3}]
    for step in range(1, steps + 1):
        record = {"step": step, "rollout/generated_tokens": tokens, "rollout/kept_groups": 8.0}
        if logged:
            record["train/optimizer_steps"] = float(minibatches)
        records.append(record)
    summary = {"generated_tokens": tokens * steps}
    config = {"num_minibatches": minibatches, "ppo_epochs": 1, "prompts_per_step": 8}
    return CellResult(Cell(label, "grpo", seed, {}, {}), [], records, summary, config)


def test_steps_budget_no_longer_claims_equal_optimizer_steps():
    assert "optimizer" not in Budget("steps", 100).describe()


def test_different_minibatch_counts_are_reported_unequal():
    # 3 steps × 2 minibatches = 6 updates against 3 × 8 = 24; steps and prompts are equal.
    groups = {"mb2": [_cell("mb2", 0, 2), _cell("mb2", 1, 2)], "mb8": [_cell("mb8", 0, 8)]}
    text = "\n".join(budget_lines(groups))
    assert "equal optimizer steps" not in text
    assert "training steps (3 per cell, measured)" in text
    assert "prompts trained per step (8.00 per cell, measured)" in text
    assert (
        "- **Not equal**: optimizer updates (measured, mean [min–max] over seeds): mb2 6; mb8 24"
        in text
    )
    assert "largest/smallest condition mean 4.00" in text


def test_equal_updates_are_stated_and_old_cells_fall_back_to_the_config():
    assert optimizer_updates(_cell("a", 0, 4, logged=False)) == (12.0, "from config")
    groups = {"a": [_cell("a", 0, 4, logged=False)], "b": [_cell("b", 0, 4)]}
    text = "\n".join(budget_lines(groups))
    assert "optimizer updates (12 per cell, from config and measured)" in text
    # Token totals 300 vs 360: unequal, with the spread of each condition.
    groups = {"a": [_cell("a", 0, 1), _cell("a", 1, 1, tokens=120.0)], "b": [_cell("b", 0, 1)]}
    assert "generated tokens (measured, mean [min–max] over seeds): a 330 [300–360]; b 300" in (
        "\n".join(budget_lines(groups))
    )
