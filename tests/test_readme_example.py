"""The README's "Your own model, data and reward" example stays accurate: its YAML and its
reward module run as written, with only the model, files, device and sizes made tiny."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml
from hf_testlib import build_tiny_hf_model, gsm8k_rows, write_jsonl

from rlvr.train.config import resolve_config
from rlvr.train.loop import Trainer

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks(language: str) -> list[str]:
    text = README.read_text()
    section = text.split("## Your own model, data and reward", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


def test_readme_example_trains(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(_blocks("python")[0])
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("my_rewards", None)
    config = yaml.safe_load(_blocks("yaml")[0])
    assert config["task_options"]["template"].endswith("within \\boxed{{}}.")
    config["model"] = str(build_tiny_hf_model(tmp_path / "model"))
    config["task_options"]["data"] = write_jsonl(tmp_path / "train.jsonl", gsm8k_rows(30))
    config["task_options"]["eval_data"] = write_jsonl(tmp_path / "test.jsonl", gsm8k_rows(4))
    config["task_options"]["dev_size"] = 2
    config["eval_size"] = 4  # the 4 eval rows written above (200 would be refused)
    config["policy"].update(device="cpu", dtype="float32")
    config.update(out=str(tmp_path / "run"), max_new_tokens=6, prompts_per_step=2, group_size=4)
    trainer = Trainer(resolve_config({**config, "progress": False}))
    assert trainer.pool.problems[0].prompt.startswith("<|im_start|>user\nTom has")
    assert "within \\boxed{}." in trainer.pool.problems[0].prompt
    metrics = trainer.train_step()
    assert metrics["train/update_skipped"] == 0.0  # brevity gives every group variance
    assert "reward/fn/brevity" in metrics and "reward/fn/correctness" in metrics
