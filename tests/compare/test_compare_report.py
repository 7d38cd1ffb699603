"""The report's per-condition table: nothing in it is selected on the eval items."""

from rlvr.compare.matrix import Cell
from rlvr.compare.report import summary_table
from rlvr.compare.results import CellResult


def _cell(seed: int, final: float, best: float, initial: float = 0.3) -> CellResult:
    evals = {"eval/accuracy": final, "eval/format_rate": 1.0, "eval/response_length": 12.0}
    summary = {
        "initial": {"eval/accuracy": initial},
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
    # Before training both seeds scored 0.300; the gains are 0.10 and 0.20, so
    # 0.150 ± t(0.975, 1)·0.0707/√2 = 0.150 ± 0.635.
    assert header.startswith("| condition | seeds | initial acc | final acc | gain |")
    assert "| grpo | 2 | 0.300 ± 0.000 | 0.450 ± 0.635 | 0.150 ± 0.635 |" in table
    later_best = summary_table({"grpo": [_cell(0, 0.40, 0.95), _cell(1, 0.50, 0.99)]})
    assert later_best == table


def test_the_gain_is_paired_by_seed():
    # Seeds start at 0.30 and 0.40 (each seed samples its own evaluation) and both gain
    # 0.15: the gain has no spread though the final accuracies (0.45, 0.55) do.
    table = summary_table({"grpo": [_cell(0, 0.45, 0.45, 0.30), _cell(1, 0.55, 0.55, 0.40)]})
    assert "| 0.350 ± 0.635 | 0.500 ± 0.635 | 0.150 ± 0.000 |" in table
