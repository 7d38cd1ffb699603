"""The matrix end to end on tiny cells: resume, report, the uncompared-field warning."""

from __future__ import annotations

import csv
import json
import shlex
from dataclasses import fields

import pytest
import yaml
from compare_testlib import tiny_spec

from rlvr.cli import main
from rlvr.compare import build_report, run_matrix
from rlvr.compare.results import TIME_COLUMNS
from rlvr.train import TrainConfig

QUIET = {"log": lambda message: None}


def _rows_without_time(path):
    with open(path) as fh:
        return [{k: v for k, v in r.items() if k not in TIME_COLUMNS} for r in csv.DictReader(fh)]


def test_report_has_every_part(finished_matrix):
    report = build_report(tiny_spec(), finished_matrix)
    assert report.warnings == []
    text = report.path.read_text()
    for part in ("Paired comparisons against `grpo`", "ScaleRL sigmoid", "Eval-set size",
                 "equal training steps (rollout batches): 2",
                 "optimizer updates (2 per cell, measured)",
                 "Matrix wall time", "over 1 invocation"):  # fmt: skip
        assert part in text
    invocation = json.loads((finished_matrix / "invocations.jsonl").read_text().splitlines()[0])
    assert f"- **Command** (ran cells): `{shlex.join(['rlvr', *invocation['argv']])}`" in text
    # dr_grpo's differences from grpo are recipe fields, listed explicitly; with no
    # `compares` declared they are more than the compared choice: no tick
    assert "**dr_grpo** (5 field(s)): " in text and "`recipe`: 'grpo' → 'dr_grpo'" in text
    assert "✔" not in text and "dr_grpo differs beyond the compared fields in `advantage`" in text
    assert "equal optimizer steps" not in text
    assert sorted(p.name for p in report.plots) == sorted(
        ["accuracy_vs_step.png", "accuracy_vs_tokens.png", "accuracy_vs_wall.png",
         "response_length.png", "clip_fraction.png", "compute_fit.png"]
    )  # fmt: skip
    assert all(p.stat().st_size > 1000 for p in report.plots)
    rows = _rows_without_time(finished_matrix / "results.csv")
    assert len(rows) == 4 * 3  # 4 cells × eval at steps 0, 1, 2
    assert {r["label"] for r in rows} == {"grpo", "dr_grpo"}


def test_interrupted_matrix_resumes_with_identical_results(matrix_copy):
    build_report(tiny_spec(), matrix_copy)
    before = _rows_without_time(matrix_copy / "results.csv")
    for name in ("grpo-seed1", "dr_grpo-seed0"):  # interrupted before summary.json
        (matrix_copy / "cells" / name / "summary.json").unlink()
    run = run_matrix(tiny_spec(), matrix_copy, jobs=2, **QUIET)
    assert sorted(run.ran) == ["dr_grpo-seed0", "grpo-seed1"]
    assert sorted(run.skipped) == ["dr_grpo-seed1", "grpo-seed0"]
    assert not run.failed and not run.stale
    build_report(tiny_spec(), matrix_copy)
    assert _rows_without_time(matrix_copy / "results.csv") == before
    again = run_matrix(tiny_spec(), matrix_copy, **QUIET)
    assert again.ran == [] and len(again.skipped) == 4


def test_uncompared_field_difference_warns(matrix_copy):
    path = matrix_copy / "cells" / "dr_grpo-seed1" / "config.yaml"
    config = yaml.safe_load(path.read_text())
    config["lr"] = 2e-4  # as if this cell ran with another base config
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    report = build_report(tiny_spec(), matrix_copy)
    assert len(report.warnings) == 1
    assert "dr_grpo-seed1" in report.warnings[0] and "'lr'" in report.warnings[0]
    assert "WARNING" in report.path.read_text()
    assert run_matrix(tiny_spec(), matrix_copy, **QUIET).stale == ["dr_grpo-seed1"]


def test_cli_report_only_and_evalsize(matrix_copy, capsys):
    assert main(["compare", "--out", str(matrix_copy), "--report-only"]) == 0
    assert "report.md" in capsys.readouterr().out
    assert main(["evalsize", "--baseline", "0.6", "--delta", "0.03", "--power", "0.8"]) == 0
    assert capsys.readouterr().out.startswith("4129 eval items per condition")


@pytest.mark.skipif(
    "max_generated_tokens" not in {f.name for f in fields(TrainConfig)},
    reason="TrainConfig.max_generated_tokens not implemented yet",
)
def test_token_budget_stops_each_cell_at_the_budget(tmp_path, one_thread):
    spec = tiny_spec(recipes=["dapo"], seeds=[0], budget={"mode": "tokens", "value": 300})
    run = run_matrix(spec, tmp_path, **QUIET)
    assert not run.failed, run.failed
    report = build_report(spec, tmp_path)
    assert "equal generated tokens" in report.path.read_text()
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    last = float(rows[-1]["generated_tokens"])
    per_step = last / int(rows[-1]["step"])
    assert 300 <= last < 300 + 2 * per_step  # stopped at the first step past the budget


def test_cli_predict_and_holm(matrix_copy, capsys):
    # Two eval points after step 0 per cell: a half-compute fit has < 3 points, said so.
    assert main(["compare", "--out", str(matrix_copy), "--report-only", "--predict", "0.5"]) == 0
    text = (matrix_copy / "report.md").read_text()
    assert "## Predictive fits (first 0.5 of compute)" in text and "< 3: no fit" in text
    assert main(["compare", "--out", str(matrix_copy), "--report-only", "--predict", "2"]) == 2
    assert "--predict must be a fraction in (0, 1)" in capsys.readouterr().err
    assert main(["compare", "--holm", str(matrix_copy)]) == 2
    assert "has no hypothesis" in capsys.readouterr().err
    path = matrix_copy / "matrix.yaml"
    spec = yaml.safe_load(path.read_text())
    prediction = {"metric": "eval/accuracy", "treatment": "dr_grpo", "control": "grpo",
                  "direction": "greater", "threshold": -0.05}  # fmt: skip
    spec["hypothesis"] = {"claim": "c", "source": "s", "min_seeds": 2, "predictions": [prediction]}
    path.write_text(yaml.safe_dump(spec))
    assert main(["compare", "--holm", str(matrix_copy), str(matrix_copy)]) == 0
    out = capsys.readouterr().out
    assert "Study set of 2 studies" in out and "bootstrap over 2 seeds × 16 items" in out
    assert main(["compare", "--holm", str(matrix_copy), "--seeds", "3"]) == 2
    assert "drop --seeds" in capsys.readouterr().err
