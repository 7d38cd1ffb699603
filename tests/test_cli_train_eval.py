"""`rlvr train` and `rlvr eval` from the command line: outputs and one-line errors."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from rlvr.cli import main


def test_train_writes_everything_and_eval_reads_the_checkpoint(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(
        [
            "train",
            "--recipe",
            "dr_grpo",
            "--steps",
            "2",
            "--seed",
            "3",
            "--out",
            str(out),
            "--set",
            "prompts_per_step=2",
            "--set",
            "group_size=2",
            "--set",
            "eval_size=8",
            "--set",
            "clip_high=0.3",
            "--no-progress",
        ]
    )
    assert code == 0
    assert "held-out accuracy" in capsys.readouterr().out
    resolved = yaml.safe_load((out / "config.yaml").read_text())
    assert (
        resolved["recipe"] == "dr_grpo" and resolved["clip_high"] == 0.3 and resolved["seed"] == 3
    )
    assert resolved["aggregation"] == "constant"  # the recipe's own choice, spelled out
    for name in ("metrics.jsonl", "summary.json", "curves.png", "checkpoint/policy"):
        assert (out / name).exists(), name
    assert list((out / "tensorboard").iterdir())
    summary = json.loads((out / "summary.json").read_text())
    assert {"initial", "final"} <= set(summary) and "best" not in summary  # nothing picked on eval
    code = main(["eval", "--model", str(out / "checkpoint" / "policy"), "--size", "8", "--json"])
    metrics = json.loads(capsys.readouterr().out)
    assert code == 0 and metrics["eval/items"] == 8 and 0 <= metrics["eval/accuracy"] <= 1
    # --run evaluates the final checkpoint as the run's own last evaluation did (its task,
    # budget, eval_size, samples, temperature and eval seed): the same numbers.
    assert main(["eval", "--run", str(out), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    final = summary["final"]
    assert again["eval/items"] == 8
    for name in ("eval/accuracy", "eval/greedy_accuracy", "eval/format_rate"):
        assert again[name] == final[name], name
    assert metrics["eval/accuracy"] == again["eval/accuracy"]  # --model inside the run: same


def test_resolved_config_reloads_to_the_same_run(tmp_path, capsys):
    from rlvr.train.config import load_yaml, resolve_config

    cfg = resolve_config({"recipe": "dapo", "clip_high": 0.3, "out": str(tmp_path)})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict()))
    assert resolve_config(load_yaml(path)) == cfg


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["train", "--set", "stepz=3"], "stepz"),
        (["train", "--set", "clip_high=abc"], "clip_high"),
        (["train", "--recipe", "grpoo"], "grpoo"),
        (["train", "--set", "lr=-1"], "lr"),
        (["train", "--config", "/nonexistent.yaml"], "nonexistent"),
        (["eval", "--split", "test"], "split"),
    ],
)
def test_bad_input_is_one_line_naming_the_field(argv, named, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert named in err and err.count("\n") == 1


def test_exponent_floats_are_floats_in_yaml_and_set(tmp_path):
    from rlvr.train.config import load_yaml, resolve_config

    path = tmp_path / "c.yaml"
    path.write_text("lr: 1e-4\ncritic_lr: 2.5E-3\n")
    cfg = resolve_config(load_yaml(path), ["clip_high=3e-1"])
    assert (cfg.lr, cfg.critic_lr, cfg.build_recipe().clip_high) == (1e-4, 2.5e-3, 0.3)


def test_help_config_lists_every_key(capsys):
    from rlvr.train.config import TRAIN_KEYS

    assert main(["train", "--help-config"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {key} " in out for key in TRAIN_KEYS)


def _spy_load_policy(monkeypatch):
    """Stop `rlvr eval` where it would load the model, reporting what it was asked for."""
    import rlvr.parts.build as parts_build

    def spy(model, task_name, task_options, seed, **warm):
        raise ValueError(f"spy: {task_name} {sorted(task_options.items())}")

    monkeypatch.setattr(parts_build, "load_policy", spy)


@pytest.mark.parametrize("assignment", ["digits=3", "task_options.digits=3"])
def test_eval_set_reaches_the_task(assignment, monkeypatch, capsys):
    _spy_load_policy(monkeypatch)
    assert main(["eval", "--set", assignment]) == 2
    assert "spy: arithmetic [('digits', 3)]" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["eval", "--set", "digitz=3"], "'digitz' for task 'arithmetic'; valid options are"),
        (["eval", "--size", "-1"], "size must be an integer ≥ 0"),
        (["eval", "--size", "301"], "size=301 exceeds the 300 problems of split 'eval'"),
        (["eval", "--samples", "0"], "samples must be an integer ≥ 1"),
        (["eval", "--max-new-tokens", "0"], "max_new_tokens must be an integer ≥ 1"),
        (["eval", "--temperature", "0"], "temperature must be > 0"),
    ],
)
def test_eval_rejects_inputs_it_cannot_honour(argv, named, monkeypatch, capsys):
    _spy_load_policy(monkeypatch)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert named in err and "spy" not in err and err.count("\n") == 1


def test_eval_budget_defaults_to_the_task_budget(monkeypatch):
    import rlvr.eval.run as eval_run

    seen = {}

    def fake_evaluate(engine, task, problems, **settings):
        seen.update(settings, items=len(problems))
        raise ValueError("stop")

    import rlvr.parts.build as parts_build
    import rlvr.rollout

    monkeypatch.setattr(
        parts_build, "load_policy", lambda *a, **k: (torch.nn.Linear(1, 1), None, {})
    )
    monkeypatch.setattr(rlvr.rollout, "HFEngine", lambda *a, **k: None)
    monkeypatch.setattr(eval_run, "evaluate_policy", fake_evaluate)
    with pytest.raises(ValueError, match="stop"):
        eval_run.evaluate_model("embedded", "countdown", {}, size=5)
    assert seen["max_new_tokens"] == 24 and seen["items"] == 5  # CountdownTask's default


def test_python_dash_m_rlvr_runs_the_cli():
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "rlvr", "recipes", "--json"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert any(row["recipe"] == "grpo" for row in json.loads(done.stdout))


def test_train_budget_defaults_to_the_task_budget():
    from rlvr.train.config import resolve_config

    # Countdown's longest answer " \boxed{(25-24)*23}" is 19 tokens, + EOS + 4 = 24; the
    # old fixed default of 14 cut off most of them.
    assert resolve_config({"task": "countdown"}).max_new_tokens == 24
    assert resolve_config({}).max_new_tokens == 17  # " \boxed{198}" 12 + EOS + 4
    assert resolve_config({"task": "countdown", "max_new_tokens": 30}).max_new_tokens == 30
    assert resolve_config({"task": "countdown"}).to_dict()["max_new_tokens"] == 24


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"group_size": 1}, "group_size=1 trains nothing with advantage='group_norm'"),
        ({"group_size": 1, "recipe": "rloo"}, "group_size=1 trains nothing"),
        ({"max_grad_norm": -1.0}, "max_grad_norm must be > 0 .* or 0 .no clipping., got -1"),
        ({"weight_decay": -0.1}, "weight_decay must be a number ≥ 0"),
        ({"eval_size": 301}, "eval_size=301 exceeds the 300 problems"),
        ({"task_options": {"digitz": 3}}, "unknown option 'digitz'"),
        ({"model": "some/model", "warm_target": 0.5}, "warm_target=0.5 only applies to"),
    ],
)
def test_settings_that_cannot_train_are_rejected(values, message):
    from rlvr.train.config import resolve_config

    with pytest.raises(ValueError, match=message):
        resolve_config(values)


def test_settings_near_the_edge_are_accepted():
    from rlvr.train.config import resolve_config

    # PPO's critic baseline and REINFORCE++'s batch whitening need no group.
    assert resolve_config({"group_size": 1, "recipe": "ppo"}).group_size == 1
    assert resolve_config({"group_size": 1, "recipe": "reinforce_pp"}).group_size == 1
    assert resolve_config({"max_grad_norm": 0}).max_grad_norm == 0
    assert resolve_config({"eval_size": 300}).eval_size == 300
