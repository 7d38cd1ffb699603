"""A Hugging Face policy end to end on CPU: a tiny random Qwen2 with a real BPE tokenizer
and chat template, GSM8K-format data, a user reward function, 2 GRPO steps (KL to π_ref)
with and without LoRA; with LoRA π_ref is the policy with its adapters disabled."""

from __future__ import annotations

import pytest
import torch
from hf_testlib import build_tiny_hf_model, gsm8k_rows, write_jsonl

from rlvr.models.hf_policy import AdapterDisabledReference, adapters_disabled, lora_layers
from rlvr.models.logprobs import response_logprobs
from rlvr.train.config import resolve_config
from rlvr.train.loop import Trainer
from rlvr.train.run import run_training


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(build_tiny_hf_model(tmp_path_factory.mktemp("tiny_qwen2")))


def make_config(model_dir, tmp_path, **extra):
    data = write_jsonl(tmp_path / "gsm8k.jsonl", gsm8k_rows(40))
    values = {
        "model": model_dir,
        "task": "gsm8k",
        "task_options": {"data": data, "dev_size": 2, "eval_size": 4},
        "recipe": "grpo",  # k3 KL to π_ref with β = 0.04: the reference is exercised
        "steps": 2,
        "prompts_per_step": 2,
        "group_size": 4,
        "max_new_tokens": 6,
        "eval_size": 4,
        "eval_every": 2,
        "lr": 1e-2,
        "progress": False,
        "out": str(tmp_path / "run"),
        "reward_funcs": [{"func": "user_rewards:brevity", "weight": 1.0}],
        "policy": {"chat_template": True, "enable_thinking": False},
        **extra,
    }
    return resolve_config(values)


def _base_weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items() if ".lora_" not in k}


def test_full_finetune_two_steps_with_a_user_reward(model_dir, tmp_path):
    trainer = Trainer(make_config(model_dir, tmp_path))
    assert trainer.pool.problems[0].prompt.startswith("<|im_start|>user\nTom has")
    assert not isinstance(trainer.reference, AdapterDisabledReference)  # a frozen copy
    before = _base_weights(trainer.model)
    metrics = [trainer.train_step() for _ in range(2)]
    assert all(m["train/update_skipped"] == 0.0 for m in metrics)
    # brevity rewards are -len/100 ≤ 0 and not all equal, so the policy moved
    assert all(m["reward/mean"] <= 0 for m in metrics)
    assert all(m["reward/fn/brevity"] <= 0 for m in metrics)
    assert metrics[0]["verify/timeouts"] >= 0 and "verify/errors" in metrics[0]
    after = _base_weights(trainer.model)
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_lora_trains_only_adapters_and_reference_is_the_disabled_adapter(model_dir, tmp_path):
    lora = {"rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    cfg = make_config(model_dir, tmp_path, policy={"chat_template": True, "lora": lora})
    trainer = Trainer(cfg)
    assert isinstance(trainer.reference, AdapterDisabledReference)
    assert trainer.reference.model is trainer.model  # no second copy of the weights
    assert len(lora_layers(trainer.model)) == 2 * 2  # 2 layers × (q_proj, v_proj)
    base_before = _base_weights(trainer.model)
    rollout_metrics = [trainer.train_step() for _ in range(2)]
    assert all(m["train/update_skipped"] == 0.0 for m in rollout_metrics)
    base_after = _base_weights(trainer.model)
    assert all(torch.equal(base_before[k], base_after[k]) for k in base_before)
    lora_b = [p for n, p in trainer.model.named_parameters() if "lora_B" in n]
    assert lora_b and any(p.abs().sum() > 0 for p in lora_b)  # B starts at 0 and moved
    # π_ref through the view equals the base model with adapters off, and differs from π
    prompt = [trainer.tokenizer.encode("Tom has 3 apples")]
    ids = torch.tensor([[5, 6, 7]])
    mask = torch.ones(1, 3)
    pad = trainer.tokenizer.pad_token_id
    with torch.no_grad():
        ref = response_logprobs(trainer.reference, prompt, ids, mask, pad)
        with adapters_disabled(trainer.model):
            base = response_logprobs(trainer.model, prompt, ids, mask, pad)
        policy = response_logprobs(trainer.model, prompt, ids, mask, pad)
    assert torch.equal(ref, base)
    assert not torch.allclose(ref, policy)
    assert all(p.requires_grad for p in lora_b)  # adapters are trainable again after the view


def test_lora_run_saves_a_merged_checkpoint_loadable_without_peft(model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    lora = {"rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    cfg = make_config(model_dir, tmp_path, policy={"lora": lora}, steps=1)
    summary = run_training(cfg)
    assert summary["steps"] == 1
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "checkpoint" / "policy")
    assert not any("lora" in k for k in saved.state_dict())


def test_policy_options_are_validated_by_name(model_dir, tmp_path):
    with pytest.raises(ValueError, match=r"unknown policy option\(s\) \['dtpye'\]"):
        make_config(model_dir, tmp_path, policy={"dtpye": "bfloat16"})
    with pytest.raises(
        ValueError, match=r"policy\.dtype must be one of float32, bfloat16, float16"
    ):
        make_config(model_dir, tmp_path, policy={"dtype": "fp8"})
    with pytest.raises(ValueError, match="must not include lm_head"):
        make_config(model_dir, tmp_path, policy={"lora": {"target_modules": ["lm_head"]}})
    with pytest.raises(ValueError, match="apply to Hugging Face models, not model='embedded'"):
        resolve_config({"model": "embedded", "policy": {"dtype": "bfloat16"}})
    with pytest.raises(ValueError, match="rollout_engine must be one of hf, vllm"):
        make_config(model_dir, tmp_path, rollout_engine="sglang")
    with pytest.raises(
        ValueError, match=r"reward_funcs\[0\].func must look like 'module:function'"
    ):
        make_config(model_dir, tmp_path, reward_funcs=["brevity"])


def test_a_lora_dropout_that_could_never_act_is_refused(model_dir, tmp_path):
    # Every RL forward runs with dropout off (rlvr/models/modes.py), so a non-zero
    # policy.lora.dropout would be silently ignored; 0 (peft-style configs write it) is fine.
    with pytest.raises(
        ValueError, match=r"policy\.lora\.dropout=0\.05 would never take effect: every RL forward"
    ):
        make_config(model_dir, tmp_path, policy={"lora": {"dropout": 0.05}})
    cfg = make_config(model_dir, tmp_path, policy={"lora": {"dropout": 0.0}})
    assert cfg.policy["lora"]["dropout"] == 0.0


def test_bfloat16_policy_with_gradient_checkpointing_trains(model_dir, tmp_path):
    cfg = make_config(
        model_dir,
        tmp_path,
        policy={"dtype": "bfloat16", "gradient_checkpointing": True},
        steps=1,
    )
    trainer = Trainer(cfg)
    assert next(trainer.model.parameters()).dtype == torch.bfloat16
    flag = getattr(trainer.model, "is_activation_checkpointing", None)
    assert flag if flag is not None else trainer.model.is_gradient_checkpointing
    assert trainer.train_step()["train/update_skipped"] == 0.0
