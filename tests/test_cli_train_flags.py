"""`rlvr train`'s flags and help come from TrainConfig's fields and the task registry."""

from __future__ import annotations

from dataclasses import fields

from rlvr.cli import build_parser, config_values
from rlvr.tasks import TASKS
from rlvr.train.config import TrainConfig, config_docs


def _train_parser():
    sub = build_parser("train")._subparsers._group_actions[0]
    return sub.choices["train"]


def test_every_scalar_config_field_is_a_flag_with_its_doc():
    actions = {a.dest: a for a in _train_parser()._actions}
    scalar = [f.name for f in fields(TrainConfig) if f.name in actions]
    assert {"lr", "group_size", "think_budget", "progress", "rollout_engine"} <= set(scalar)
    for name in scalar:
        assert actions[name].help.startswith(config_docs()[name].replace("%", "%%")), name
    for mapping in ("task_options", "policy", "overrides", "reward_funcs"):
        assert mapping not in actions  # set with --set or a YAML file


def test_flag_values_are_parsed_as_config_values():
    args = build_parser("train").parse_args(
        ["train", "--lr", "1e-3", "--group-size", "3", "--no-progress", "--out", "007"]
    )
    assert config_values(args) == {"lr": 1e-3, "group_size": 3, "progress": False, "out": "007"}


def test_task_help_lists_the_registered_tasks():
    helps = {a.dest: a.help for a in _train_parser()._actions}
    assert all(name in helps["task"] for name in TASKS)
