"""The report's per-condition table: nothing in it is selected on the eval items."""

from rlvr.compare.matrix import Cell
from rlvr.compare.report import summary_table
from rlvr.compare.results import CellResult


def _cell(seed: int, final: float, best: float) -> CellResult:
    evals = {"eval/accuracy": final, "eval/format_rate": 1.0, "eval/response_length": 12.0}
    summary = {
        "initial": {"eval/accuracy": 0.3},
        "final": evals,
        "best": {"step": 5, **evals, "eval/accuracy": best},
        "seconds": {"wall_s": 10.0},
        "generated_tokens": 100.0,
        "discarded_tokens": 0.0,
        "final_eval_items": [1.0, 0.0],
    }
    cell = Cell("grpo", "grpo", seed, {}, {})
    return CellResult(cell, [], [], summary, {})


def test_table_has_no_accuracy_chosen_on_the_eval_items():
    # Two seeds ending at 0.40 and 0.50 whose best evaluations (0.90) came earlier: only
    # the final accuracy may appear, 0.45 ± t(0.975, 1)·0.0707/√2 = 0.45 ± 0.635.
    table = summary_table({"grpo": [_cell(0, 0.40, 0.90), _cell(1, 0.50, 0.90)]})
    header = table.splitlines()[0]
    assert "best" not in header
    assert "0.900" not in table and "| 0.450 ± 0.635 |" in table
    # Before training, both seeds share the warm start: 0.300 with no spread.
    assert header.startswith("| condition | seeds | initial acc | final acc |")
    assert "| grpo | 2 | 0.300 ± 0.000 | 0.450 ± 0.635 |" in table
    later_best = summary_table({"grpo": [_cell(0, 0.40, 0.95), _cell(1, 0.50, 0.99)]})
    assert later_best == table
