"""`rlvr compare` resumes a killed LoRA cell (issue 24): the cell continues from its
checkpoint's adapter on the original base and ends as an uninterrupted cell does."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from compare_testlib import TINY, tiny_spec
from safetensors.torch import load_file

from rlvr.compare import run_matrix
from rlvr.compare.runner import cell_mode
from rlvr.models.tiny import build_tiny_policy, tiny_qwen2_config
from rlvr.models.tokenizer import CharTokenizer
from rlvr.train.config import resolve_config
from rlvr.train.loop import Trainer
from rlvr.train.run import RunInterrupted

QUIET = {"log": lambda message: None}
STEPS = 4


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A random 2-layer, 32-wide Qwen2 with the character tokenizer, saved as a local model."""
    path = tmp_path_factory.mktemp("base") / "model"
    tokenizer = CharTokenizer()
    config = tiny_qwen2_config(tokenizer.vocab_size, hidden=32, layers=2, heads=2, kv_heads=2)
    build_tiny_policy(config, seed=0).save_pretrained(path)
    tokenizer.save(path)
    return str(path)


def lora_spec(model_dir: str):
    base = {
        **TINY,
        "model": model_dir,
        "max_new_tokens": 8,
        "save_every": 1,
        "lr": 1e-2,
        "policy": {"lora": {"rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}},
        # the random model is never correct: brevity gives its groups variance
        "reward_funcs": [{"func": "user_rewards:brevity", "weight": 1.0}],
    }
    return tiny_spec(base=base, recipes=["grpo"], seeds=[0], budget={"value": STEPS})


def _kill_in_step_3(monkeypatch):
    real, calls = Trainer.train_step, []

    def killed_in_step_3(self):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # as a second Ctrl-C would: the step is abandoned
        return real(self)

    monkeypatch.setattr(Trainer, "train_step", killed_in_step_3)
    return real


def _records(cell) -> list[dict]:
    lines = (cell / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(r).items() if not k.startswith("time/")} for r in lines]


def test_a_killed_lora_cell_resumes_as_if_never_killed(
    model_dir, tmp_path, monkeypatch, one_thread
):
    spec = lora_spec(model_dir)
    reference = run_matrix(spec, tmp_path / "reference", **QUIET)
    assert reference.ran == ["grpo-seed0"] and not reference.failed
    real = _kill_in_step_3(monkeypatch)
    with pytest.raises(RunInterrupted):
        run_matrix(spec, tmp_path / "killed", **QUIET)
    cell = tmp_path / "killed" / "cells" / "grpo-seed0"
    before = (cell / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["step"] for r in before] == [0, 1, 2]
    monkeypatch.setattr(Trainer, "train_step", real)
    run = run_matrix(spec, tmp_path / "killed", **QUIET)
    assert run.ran == ["grpo-seed0"] and not run.failed, run.failed
    assert (cell / "metrics.jsonl").read_text().splitlines()[:3] == before  # resumed
    ref_cell = tmp_path / "reference" / "cells" / "grpo-seed0"
    assert _records(cell) == _records(ref_cell)
    for name in ("policy/model.safetensors", "adapter/adapter_model.safetensors"):
        mine = load_file(cell / "checkpoint" / name)
        theirs = load_file(ref_cell / "checkpoint" / name)
        assert mine.keys() == theirs.keys()
        assert all(torch.equal(mine[k], theirs[k]) for k in mine), name


def test_a_lora_cell_whose_checkpoint_has_no_adapter_starts_again(
    model_dir, tmp_path, monkeypatch, one_thread
):
    spec = lora_spec(model_dir)
    real = _kill_in_step_3(monkeypatch)
    with pytest.raises(RunInterrupted):
        run_matrix(spec, tmp_path, **QUIET)
    cell = tmp_path / "cells" / "grpo-seed0"
    # As an older rlvr wrote it: merged weights only, and a manifest that does not list an
    # adapter, so the checkpoint passes its checksums yet cannot be resumed exactly.
    shutil.rmtree(cell / "checkpoint" / "adapter")
    manifest = json.loads((cell / "checkpoint" / "manifest.json").read_text())
    manifest["files"] = {k: v for k, v in manifest["files"].items() if "adapter" not in k}
    (cell / "checkpoint" / "manifest.json").write_text(json.dumps(manifest))
    (config,) = [c.config for c in spec.cells(tmp_path)]
    assert cell_mode(resolve_config(config)) == "overwrite"
    monkeypatch.setattr(Trainer, "train_step", real)
    run = run_matrix(spec, tmp_path, **QUIET)
    assert run.ran == ["grpo-seed0"] and not run.failed, run.failed
    assert [r["step"] for r in _records(cell)] == list(range(STEPS + 1))
