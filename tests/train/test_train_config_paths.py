"""config.yaml records local paths as absolute ones: a run resumed or evaluated from
another directory reads the same model and data, never a hub id of the same name."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from local_model import local_policy_dir

from rlvr.train.config import resolve_config
from rlvr.train.run import resume_config, run_training


def _rows(path: Path, n: int) -> None:
    path.write_text("".join(json.dumps({"q": f"{i}+1", "a": str(i + 1)}) + "\n" for i in range(n)))


def test_relative_model_and_data_paths_are_recorded_absolute(tmp_path, monkeypatch):
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    _rows(work / "data" / "train.jsonl", 40)
    model = Path(local_policy_dir(work))
    monkeypatch.chdir(work)
    cfg = resolve_config(
        {
            "task": "dataset",
            "task_options": {
                "data": "data/train.jsonl",
                "eval_data": {"path": "data/train.jsonl"},
                "prompt_field": "q",
                "answer_field": "a",
                "verifier": "gsm8k",
                "dev_size": 4,
                "eval_size": 4,
            },
            "model": model.name,  # "local_model", relative to the working directory
            "prompts_per_step": 2,
            "group_size": 2,
            "max_new_tokens": 4,
            "eval_size": 4,
            "steps": 1,
            "progress": False,
            "out": "run",
            "reward_funcs": [],
        }
    )
    assert cfg.model == str(model.resolve())
    assert cfg.task_options["data"] == str((work / "data" / "train.jsonl").resolve())
    assert cfg.task_options["eval_data"] == {"path": cfg.task_options["data"]}
    run_training(cfg)
    recorded = yaml.safe_load((work / "run" / "config.yaml").read_text())
    assert recorded["model"] == str(model.resolve())
    assert recorded["task_options"]["data"] == cfg.task_options["data"]
    # From another directory, the recorded run still names the same files.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    resumed = resume_config(str(work / "run"), steps=2)
    assert resumed.model == cfg.model and resumed.task_options == cfg.task_options


def test_hub_ids_and_the_embedded_model_are_left_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = resolve_config({"model": "embedded", "progress": False})
    assert cfg.model == "embedded"
    cfg = resolve_config(
        {
            "task": "dataset",
            "task_options": {
                "data": {"hub": "openai/gsm8k", "config": "main"},
                "verifier": "gsm8k",
            },
            "model": "Qwen/Qwen2.5-0.5B-Instruct",
        }
    )
    assert cfg.model == "Qwen/Qwen2.5-0.5B-Instruct"
    assert cfg.task_options["data"] == {"hub": "openai/gsm8k", "config": "main"}
