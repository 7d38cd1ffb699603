"""LoRA runs resume exactly (issue 24): a checkpoint keeps the adapter (peft's format) beside
the merged export that `rlvr eval` reads, and a resumed run puts it back onto the original
base model, so π_ref (adapters off) is the base and the AdamW state lines up with the
adapters. The model is a tiny random Qwen2; a brevity reward gives its groups variance."""

from __future__ import annotations

import json
import random
import shutil

import pytest
import torch
import yaml
from local_model import local_policy_dir
from resume_testlib import SIGKILL, run, start_and_signal, steps_logged, without_time
from rounding_testlib import logprob_atol
from safetensors.torch import load_file

from rlvr.models.hf_policy import merged_state_dict
from rlvr.train.checkpoints.checkpoint import (
    find_resumable,
    load_policy_weights,
    save_checkpoint,
    verify_checkpoint,
)
from rlvr.train.config import resolve_config
from rlvr.train.loop import Trainer

LORA = {"rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
ADAPTER_FILES = ("adapter/adapter_config.json", "adapter/adapter_model.safetensors")
STEPS = 8


def lora_values(model_dir: str, out, reward: str = "user_rewards:brevity", **extra) -> dict:
    return {
        "model": model_dir,
        "task_options": {"digits": 2, "ops": "+"},
        "prompts_per_step": 4,
        "group_size": 4,
        "max_new_tokens": 8,
        "eval_size": 8,
        "eval_every": 2,
        "lr": 1e-2,  # grpo: k3 KL to π_ref, so the reference is exercised
        "policy": {"lora": LORA},
        "reward_funcs": [{"func": reward, "weight": 1.0}],
        "progress": False,
        "out": str(out),
        **extra,
    }


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return local_policy_dir(tmp_path_factory.mktemp("base"))


@pytest.fixture(scope="module")
def saved(model_dir, tmp_path_factory):
    """A LoRA trainer after 2 steps and its checkpoint."""
    tmp = tmp_path_factory.mktemp("lora")
    trainer = Trainer(resolve_config(lora_values(model_dir, tmp / "run")))
    for _ in range(2):
        assert trainer.train_step()["train/update_skipped"] == 0.0
    trainer.step = 2
    path = save_checkpoint(
        tmp / "checkpoint", trainer.model, trainer.tokenizer, trainer.state_dict()
    )
    return trainer, path


def _adapter(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items() if ".lora_" in k}


def _base(model) -> dict[str, torch.Tensor]:
    """The base weights of a LoRA model, under the plain model's names."""
    state = model.state_dict().items()
    return {k.replace(".base_layer.", "."): v for k, v in state if ".lora_" not in k}


def _plain(directory):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(directory).eval()


def test_the_checkpoint_holds_the_adapter_beside_the_merged_export(saved, model_dir):
    from peft import PeftModel

    trainer, path = saved
    assert verify_checkpoint(path) is None  # the manifest's checksums cover the adapter
    manifest = json.loads((path / "manifest.json").read_text())
    assert set(ADAPTER_FILES) <= set(manifest["files"])
    merged = merged_state_dict(trainer.model)
    export = _plain(path / "policy")  # what `rlvr eval --model checkpoint/policy` reads
    assert all(torch.equal(v, merged[k]) for k, v in export.state_dict().items())
    # The adapter alone is a peft adapter of the base model: the same policy as the export.
    adapted = PeftModel.from_pretrained(_plain(model_dir), path / "adapter").eval()
    ids = torch.tensor([[3, 4, 5, 6, 7]])
    with torch.no_grad():
        # x·W + s·(x·A)·B against x·(W + s·B·A): other sums, within the log-prob bound.
        tau = logprob_atol(export.config)
        assert torch.allclose(adapted(ids).logits, export(ids).logits, atol=tau, rtol=0)
    # AdamW holds moments for the trainable tensors only: 2 layers × (q, v) × (A, B) = 8
    moments = torch.load(path / "trainer_state.pt", weights_only=False)["optimizers"]
    assert len(moments["optimizer"]["state"]) == 2 * 2 * 2


def test_a_resumed_policy_is_the_original_base_plus_the_saved_adapter(saved, model_dir, tmp_path):
    trainer, path = saved
    fresh = Trainer(resolve_config(lora_values(model_dir, tmp_path / "run")))
    load_policy_weights(fresh.model, path)
    trained, loaded = _adapter(trainer.model), _adapter(fresh.model)
    assert trained.keys() == loaded.keys()
    assert all(torch.equal(trained[k], loaded[k]) for k in trained)
    base = _plain(model_dir).state_dict()  # π_ref: the base model as it is on disk
    assert all(torch.equal(v, base[k]) for k, v in _base(fresh.model).items())
    resumed = merged_state_dict(fresh.model)
    assert all(torch.equal(v, resumed[k]) for k, v in merged_state_dict(trainer.model).items())


def test_a_changed_adapter_file_fails_the_checksum(saved, tmp_path):
    _, path = saved
    copy = shutil.copytree(path, tmp_path / "checkpoint")
    file = copy / ADAPTER_FILES[1]
    data = bytearray(file.read_bytes())
    data[-1] ^= 0xFF
    file.write_bytes(bytes(data))
    assert verify_checkpoint(copy) == f"{ADAPTER_FILES[1]} does not match its checksum"
    (copy / ADAPTER_FILES[0]).unlink()
    assert verify_checkpoint(copy) == f"{ADAPTER_FILES[0]} is missing"


def test_a_lora_checkpoint_without_an_adapter_is_refused_by_name(saved, tmp_path):
    trainer, path = saved
    copy = shutil.copytree(path, tmp_path / "checkpoint")
    shutil.rmtree(copy / "adapter")  # as an older rlvr wrote it: the merged weights only
    with pytest.raises(
        ValueError, match=r"has no adapter/ although policy.lora is set.*--overwrite"
    ):
        load_policy_weights(trainer.model, copy)


def test_an_adapter_of_another_rank_is_refused(saved, model_dir, tmp_path):
    _, path = saved
    values = lora_values(model_dir, tmp_path / "run", policy={"lora": {**LORA, "rank": 2}})
    other = Trainer(resolve_config(values))
    with pytest.raises(ValueError, match="rank or target_modules differ"):
        load_policy_weights(other.model, path)


def test_sigkill_then_resume_of_a_lora_run_equals_an_uninterrupted_run(model_dir, tmp_path):
    def command(name: str, **extra) -> list[str]:
        values = lora_values(model_dir, tmp_path / name, "tests.user_rewards:brevity", **extra)
        config = tmp_path / f"{name}.yaml"
        config.write_text(yaml.safe_dump(values))
        return ["--config", str(config)]

    settings = {"steps": STEPS, "save_every": 2}  # a kill can land between checkpoints
    done = run(*command("reference", **settings))
    assert done.returncode == 0, done.stderr
    at = random.randint(3, STEPS - 3)
    out = tmp_path / "killed"
    killed = start_and_signal(command("killed", **settings), out, at, SIGKILL)
    assert killed.returncode == -9, f"not killed at step {at}: {killed.stderr_text}"
    assert max(steps_logged(out)) < STEPS
    assert find_resumable(out) is not None  # resumed from a checkpoint, not from step 0
    resumed = run("--resume", str(out))
    assert resumed.returncode == 0, resumed.stderr
    ref = tmp_path / "reference"
    assert steps_logged(out) == steps_logged(ref)  # no step missing or twice
    assert without_time(out) == without_time(ref), f"killed after step {at}"
    for name in ("policy/model.safetensors", ADAPTER_FILES[1]):
        mine, theirs = load_file(out / "checkpoint" / name), load_file(ref / "checkpoint" / name)
        assert mine.keys() == theirs.keys()
        assert all(torch.equal(mine[k], theirs[k]) for k in mine), f"{name}, killed after {at}"
    lora_b = load_file(ref / "checkpoint" / ADAPTER_FILES[1])
    assert any(v.abs().sum() > 0 for k, v in lora_b.items() if "lora_B" in k)  # it trained
