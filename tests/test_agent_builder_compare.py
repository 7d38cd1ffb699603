"""The comparison report's episodes table (issue 42, the trial's §3d: "the report has no
env/* column although one condition is multi-turn"), worked by hand."""

from __future__ import annotations

from rlvr.compare.matrix import Cell
from rlvr.compare.report_episodes import env_section, env_table
from rlvr.compare.results import COLUMNS, CellResult


def _cell(label: str, seed: int, turns: list[float] | None, eval_turns=None) -> CellResult:
    records = [{"step": 0, "eval/accuracy": 0.5}]
    for step, value in enumerate(turns or [0.0, 0.0], start=1):
        records.append({"step": step, **({"env/turns": value} if turns else {})})
    summary = {
        "final": {"eval/accuracy": 0.5, **({"eval/turns": eval_turns} if eval_turns else {})}
    }
    cell = Cell(label=label, recipe="grpo", seed=seed, overrides={}, config={})
    return CellResult(cell, [], records, summary, {})


def test_each_condition_gets_its_episode_means():
    groups = {
        "one_turn": [_cell("one_turn", 0, None), _cell("one_turn", 1, None)],
        # seed 0: turns 1 and 2 → 1.5; seed 1: 2 and 3 → 2.5; condition: 2.0
        "agent": [_cell("agent", 0, [1.0, 2.0], 1.75), _cell("agent", 1, [2.0, 3.0], 2.25)],
    }
    rows = env_table(groups).splitlines()
    assert rows[0].startswith("| condition | turns | tool_calls | valid_call_rate |")
    assert rows[0].endswith("| ended_budget | eval turns |")
    assert rows[2] == "| one_turn | — | — | — | — | — | — | — | — |"
    assert rows[3] == "| agent | 2.000 | — | — | — | — | — | — | 2.00 |"  # eval: (1.75 + 2.25)/2
    assert env_section(groups)[0] == "## Episodes per condition"
    assert "env/turns" in COLUMNS  # results.csv carries them too


def test_a_one_turn_comparison_has_no_episode_section():
    assert env_section({"a": [_cell("a", 0, None)]}) == []
