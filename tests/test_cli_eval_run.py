"""`rlvr eval --run RUN_DIR`: a run's checkpoint evaluated with the run's own task,
template, policy options, budget and sampling settings; explicit flags override them."""

from __future__ import annotations

import json

import pytest
import yaml
from hf_testlib import gsm8k_rows, write_jsonl

import rlvr.eval.run as eval_run
from rlvr.cli import main
from rlvr.eval.evaluate import EvalResult
from rlvr.train.config import resolve_config
from rlvr.train.loop import EVAL_SEED_OFFSET


def _run_dir(tmp_path, checkpoint: bool = True):
    """A run directory as `rlvr train` leaves it: config.yaml and checkpoint/policy/."""
    run = tmp_path / "run"
    data = write_jsonl(tmp_path / "train.jsonl", gsm8k_rows(12))
    cfg = resolve_config(
        {
            "task": "gsm8k",
            "task_options": {
                "data": data,
                "template": "Q: {prompt}\nBox it.",
                "eval_size": 4,
                "dev_size": 2,
            },
            "model": "some/hub-model",
            "policy": {"chat_template": True, "lora": {"rank": 4}, "dtype": "float32"},
            "temperature": 0.7,
            "top_p": 0.9,
            "max_new_tokens": 33,
            "eval_samples": 3,
            "eval_size": 2,
            "seed": 5,
            "out": str(run),
        }
    )
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    if checkpoint:
        (run / "checkpoint" / "policy").mkdir(parents=True)
    return run


@pytest.fixture
def seen(monkeypatch):
    """Stop `rlvr eval` at the evaluation, recording the engine's setup and the settings."""
    record: dict = {}

    def open_engine(setup, task, task_name, task_options, max_new_tokens):
        record.update(setup=setup, task_name=task_name, task_options=task_options)
        record.update(budget=max_new_tokens)
        return "engine"

    def evaluate_policy(engine, task, problems, **settings):
        record.update(settings, prompts=[p.prompt for p in problems])
        raise ValueError("spy")

    def evaluate_k(engine, task, problems, settings, items_path=None, progress=None):
        record.update(k=settings, prompts=[p.prompt for p in problems])
        raise ValueError("spy")

    monkeypatch.setattr(eval_run, "open_engine", open_engine)
    monkeypatch.setattr(eval_run, "evaluate_policy", evaluate_policy)
    monkeypatch.setattr("rlvr.eval.bench.evaluate_k", evaluate_k)
    return record


def test_run_settings_reach_the_evaluation(tmp_path, seen, capsys):
    run = _run_dir(tmp_path)
    assert main(["eval", "--run", str(run)]) == 2
    assert "spy" in capsys.readouterr().err
    setup = seen["setup"]
    assert setup.model == str(run / "checkpoint" / "policy")
    # the checkpoint holds LoRA merged: adapters are a training choice, not re-added
    assert setup.policy == {"chat_template": True, "dtype": "float32"}
    assert seen["task_name"] == "gsm8k" and seen["task_options"]["eval_size"] == 4
    assert seen["task_options"]["template"] == "Q: {prompt}\nBox it."
    assert seen["prompts"][0].startswith("Q: Tom has") and seen["prompts"][0].endswith("Box it.")
    assert len(seen["prompts"]) == 2  # the run's eval_size
    assert (seen["budget"], seen["max_new_tokens"]) == (33, 33)
    assert (seen["temperature"], seen["top_p"], seen["samples"]) == (0.7, 0.9, 3)
    assert seen["seed"] == 5 + EVAL_SEED_OFFSET  # the seed of the run's own evaluations


def test_explicit_flags_override_the_run(tmp_path, seen, capsys):
    run = _run_dir(tmp_path)
    argv = ["eval", "--run", str(run), "--temperature", "1.0", "--size", "1", "--seed", "0"]
    argv += ["--set", 'template="{prompt} ="', "--set", "policy.chat_template=false"]
    assert main(argv) == 2
    assert seen["setup"].policy == {"chat_template": False, "dtype": "float32"}
    assert seen["task_options"]["template"] == "{prompt} ="
    assert seen["task_options"]["eval_size"] == 4  # the run's other options stay
    assert (seen["temperature"], seen["top_p"], seen["seed"]) == (1.0, 0.9, 0)
    assert len(seen["prompts"]) == 1 and seen["prompts"][0].endswith("apples? =")


def test_k_path_reads_the_run_too(tmp_path, seen, capsys):
    run = _run_dir(tmp_path)
    assert main(["eval", "--run", str(run), "--k", "4", "--set", "policy.dtype=bfloat16"]) == 2
    assert seen["setup"].policy == {"chat_template": True, "dtype": "bfloat16"}
    k = seen["k"]
    assert (k.k, k.temperature, k.top_p, k.max_new_tokens) == (4, 0.7, 0.9, 33)
    assert k.seed == 5 + EVAL_SEED_OFFSET and len(seen["prompts"]) == 2
    assert seen["prompts"][0].endswith("Box it.")


def test_a_new_data_file_keeps_the_run_template(tmp_path, seen, capsys):
    run = _run_dir(tmp_path)
    test = write_jsonl(tmp_path / "test.jsonl", gsm8k_rows(5))
    assert main(["eval", "--run", str(run), "--data", test, "--k", "2"]) == 2
    assert len(seen["prompts"]) == 5  # every row of the file, not the run's eval_size
    assert all(p.endswith("Box it.") for p in seen["prompts"])


def test_model_inside_a_run_uses_the_run(tmp_path, seen, capsys):
    run = _run_dir(tmp_path)
    (run / "checkpoint.step-000010" / "policy").mkdir(parents=True)
    older = str(run / "checkpoint.step-000010" / "policy")
    assert main(["eval", "--model", older]) == 2
    err = capsys.readouterr().err
    assert f"with the settings of the run in {run}" in err
    assert seen["setup"].model == older and seen["task_name"] == "gsm8k"
    assert seen["prompts"][0].endswith("Box it.")


def test_model_outside_a_run_keeps_the_defaults(tmp_path, seen, capsys):
    policy = tmp_path / "somewhere" / "policy"
    policy.mkdir(parents=True)
    assert main(["eval", "--model", str(policy), "--size", "2"]) == 2
    assert "settings of the run" not in capsys.readouterr().err
    assert seen["task_name"] == "arithmetic" and seen["setup"].policy == {}
    assert (seen["temperature"], seen["top_p"], seen["samples"], seen["seed"]) == (1.0, 1.0, 1, 0)
    assert seen["max_new_tokens"] == 17  # the task's own budget


@pytest.mark.parametrize(
    ("make", "named"),
    [
        (lambda p: p / "missing", "no config.yaml there"),
        (lambda p: _run_dir(p, checkpoint=False), "no checkpoint/policy there"),
    ],
)
def test_a_run_that_cannot_be_evaluated_is_one_line(tmp_path, make, named, seen, capsys):
    run = make(tmp_path)
    assert main(["eval", "--run", str(run)]) == 2
    err = capsys.readouterr().err
    assert named in err and f"--run {run}" in err and err.count("\n") == 1
    assert seen == {}  # nothing was loaded


def test_a_broken_config_is_named(tmp_path, seen, capsys):
    run = _run_dir(tmp_path)
    (run / "config.yaml").write_text("temperature: -1\n")
    assert main(["eval", "--run", str(run)]) == 2
    err = capsys.readouterr().err
    assert "config.yaml does not load" in err and "temperature" in err


def test_eval_run_prints_metrics(tmp_path, monkeypatch, capsys):
    run = _run_dir(tmp_path)
    monkeypatch.setattr(eval_run, "open_engine", lambda *a: "engine")

    def evaluate_policy(engine, task, problems, **settings):
        return EvalResult({"eval/accuracy": 0.5}, [0.5] * len(problems), [])

    monkeypatch.setattr(eval_run, "evaluate_policy", evaluate_policy)
    assert main(["eval", "--run", str(run), "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics == {"eval/items": 2.0, "eval/max_new_tokens": 33.0, "eval/accuracy": 0.5}


def test_a_run_whose_episodes_come_from_its_config_evaluates_with_them(
    tmp_path, seen, capsys, monkeypatch
):
    # The calculator's own environment, with the run's changed episode budgets applied
    # (a config's environment or tools likewise: tests/envs/test_chat_tools_e2e.py).
    run = tmp_path / "run"
    cfg = resolve_config({"task": "calculator", "episode": {"max_turns": 6}, "out": str(run)})
    (run / "checkpoint" / "policy").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    budgets, spy = [], eval_run.evaluate_policy

    def evaluate_policy(engine, task, problems, **settings):
        budgets.append(task.episode_budgets)
        return spy(engine, task, problems, **settings)

    monkeypatch.setattr(eval_run, "evaluate_policy", evaluate_policy)
    assert main(["eval", "--run", str(run)]) == 2
    assert "rlvr: error: spy" in capsys.readouterr().err
    assert budgets[0].max_turns == 6
    # the task's own environment cannot be turned off from the run's config
    assert main(["eval", "--run", str(run), "--tools", "off"]) == 2
    assert "has no tools or environment in its config" in capsys.readouterr().err
