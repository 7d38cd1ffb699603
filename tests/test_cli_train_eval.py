"""`rlvr train` and `rlvr eval` from the command line: outputs and one-line errors."""

from __future__ import annotations

import json

import pytest
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
    code = main(["eval", "--model", str(out / "checkpoint" / "policy"), "--size", "8"])
    metrics = json.loads(capsys.readouterr().out)
    assert code == 0 and metrics["eval/items"] == 8 and 0 <= metrics["eval/accuracy"] <= 1


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
