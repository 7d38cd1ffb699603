"""examples/service_grpo.py runs in --fast mode and stays within its 120-line budget."""

from __future__ import annotations

import importlib.util
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "service_grpo.py"


def test_example_runs_fast(capsys):
    spec = importlib.util.spec_from_file_location("service_grpo_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    accuracies = module.main(["--fast"])
    assert len(accuracies) == 3 and all(0.0 <= a <= 1.0 for a in accuracies)
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in printed] == ["step 0", "step 1", "step 2"]
    assert len(EXAMPLE.read_text().splitlines()) <= 120


def test_group_advantages_hand_worked():
    spec = importlib.util.spec_from_file_location("service_grpo_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # rewards 1, 0, 0, 1: mean 0.5, sample std sqrt(4·0.25/3) = 0.57735 → Â = ±0.866.
    advantages = module.group_advantages([1.0, 0.0, 0.0, 1.0])
    assert [round(a, 4) for a in advantages] == [0.866, -0.866, -0.866, 0.866]
    assert module.group_advantages([1.0, 1.0]) == [0.0, 0.0]
