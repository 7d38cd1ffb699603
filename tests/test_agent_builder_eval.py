"""`rlvr eval` prints a table a reader can read (metric, value, 95 % interval, n); the
JSON the trial found (§3c: "output is raw JSON", "floats are unrounded") is behind
`--json`."""

from __future__ import annotations

import json

from rlvr.cli import main
from rlvr.cli.eval_table import eval_table, number


def test_numbers_keep_four_significant_digits():
    assert number(0.6899999999999998) == "0.69"  # the trial's eval/pass@2
    assert number(1.8811) == "1.881"
    assert number(17.0) == "17"
    assert number(0.0) == "0"


def test_the_table_reads_as_the_trials_eval_would():
    metrics = {
        "eval/items": 100.0,
        "eval/max_new_tokens": 64.0,
        "eval/accuracy": 0.49,
        "eval/greedy_accuracy": 0.79,
        "time/eval_s": 7.25,
        "eval/turns": 1.88,
        "eval/turns_ci_low": 1.69,
        "eval/turns_ci_high": 2.07,
    }
    assert eval_table(metrics).splitlines() == [
        "rlvr eval: 100 items, max_new_tokens 64",
        "metric                value  95% interval  n",
        "--------------------  -----  ------------  ---",
        "eval/accuracy         0.49                 100",
        "eval/greedy_accuracy  0.79                 100",
        "eval/turns            1.88   [1.69, 2.07]  100",
        "time/eval_s           7.2 s",  # time last, no n
    ]


def _fake_run(tmp_path, monkeypatch):
    """A run directory whose evaluation is replaced by fixed numbers."""
    import yaml

    from rlvr.eval import run as eval_run
    from rlvr.eval.evaluate import EvalResult
    from rlvr.train.config import resolve_config

    run = tmp_path / "run"
    cfg = resolve_config({"eval_size": 2, "max_new_tokens": 33, "out": str(run)})
    (run / "checkpoint" / "policy").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    monkeypatch.setattr(eval_run, "open_engine", lambda *a: "engine")
    result = EvalResult({"eval/accuracy": 0.5, "eval/pass@1": 0.5}, [0.5, 0.5], [])
    monkeypatch.setattr(eval_run, "evaluate_policy", lambda *a, **k: result)
    return run


def test_eval_prints_the_table_and_json_behind_a_flag(tmp_path, monkeypatch, capsys):
    run = _fake_run(tmp_path, monkeypatch)
    assert main(["eval", "--run", str(run)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("rlvr eval: 2 items, max_new_tokens 33\nmetric")
    assert "eval/accuracy  0.5" in out and "{" not in out
    assert main(["eval", "--run", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["eval/accuracy"] == 0.5
