"""The vLLM engine's interface on CPU with a fake backend: packaging of samples, sleep and
wake between phases, weight sync after every optimizer step (LoRA merged), and a clear
error when vLLM is missing."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest
import torch
from hf_testlib import build_tiny_hf_model, gsm8k_rows, write_jsonl

from rlvr.models.hf_policy import merged_state_dict
from rlvr.rollout import SamplingParams
from rlvr.rollout.vllm_engine import Sample, VLLMEngine
from rlvr.train.config import resolve_config
from rlvr.train.loop import Trainer


class StaticBackend:
    def __init__(self, groups):
        self.groups, self.calls = groups, []

    def generate(self, prompt_ids, n, temperature, top_p, max_tokens, seed):
        self.calls.append(("generate", n, temperature, top_p, max_tokens))
        return self.groups

    def load_weights(self, weights):
        self.calls.append("load_weights")

    def sleep(self):
        self.calls.append("sleep")

    def wake_up(self, tags=None):
        self.calls.append(("wake_up", tags))


class CharIds:
    pad_token_id, eos_token_id = 0, 1

    def encode(self, text):
        return [ord(c) for c in text]

    def decode(self, ids, skip_special=True):
        return "".join(chr(i) for i in ids if i > 1)


def test_samples_are_packaged_as_a_generation():
    # prompt 0: "ab<eos>" (stopped) and "abc" (hit max_tokens=3); prompt 1: "<eos>" and "d<eos>"
    groups = [
        [Sample([97, 98, 1], [-0.1, -0.2, -0.3], True), Sample([97, 98, 99], [-1, -2, -3], False)],
        [Sample([1], [-0.5], True), Sample([100, 1], [-0.7, -0.9], True)],
    ]
    backend = StaticBackend(groups)
    engine = VLLMEngine(torch.nn.Linear(1, 1), CharIds(), backend)
    gen = engine.generate(["P", "Q"], SamplingParams(2, 0.7, 0.9, 3), torch.Generator())
    assert gen.response_ids.tolist() == [[97, 98, 1], [97, 98, 99], [1, 0, 0], [100, 1, 0]]
    assert gen.response_mask.tolist() == [[1, 1, 1], [1, 1, 1], [1, 0, 0], [1, 1, 0]]
    assert gen.sampler_logprobs[3].tolist() == pytest.approx([-0.7, -0.9, 0.0])
    assert gen.truncated.tolist() == [False, True, False, False]
    assert gen.prompt_index.tolist() == [0, 0, 1, 1]
    assert gen.texts == ["ab", "abc", "", "d"]
    assert gen.prompt_ids == [[80], [80], [81], [81]]
    # sampled awake, then put to sleep for the training phase
    assert backend.calls == [("generate", 2, 0.7, 0.9, 3), "sleep"]
    engine.generate(["P", "Q"], SamplingParams(2, 0.7, 0.9, 3), torch.Generator())
    assert backend.calls[2:] == [("wake_up", None), ("generate", 2, 0.7, 0.9, 3), "sleep"]


def test_sync_wakes_weights_only_then_kv_cache_before_sampling():
    backend = StaticBackend([[Sample([1], [-0.1], True)]])
    model = torch.nn.Linear(2, 2)
    engine = VLLMEngine(model, CharIds(), backend)
    engine.generate(["P"], SamplingParams(1, 1.0, 1.0, 2), torch.Generator())
    engine.sync_weights()
    engine.generate(["P"], SamplingParams(1, 1.0, 1.0, 2), torch.Generator())
    assert backend.calls[1:] == [
        "sleep",
        ("wake_up", ["weights"]),
        "load_weights",
        ("wake_up", ["kv_cache"]),
        ("generate", 1, 1.0, 1.0, 2),
        "sleep",
    ]


def test_backend_sample_counts_are_checked():
    engine = VLLMEngine(torch.nn.Linear(1, 1), CharIds(), StaticBackend([[]]))
    with pytest.raises(ValueError, match=r"backend returned \[0\] samples for 1 prompts"):
        engine.generate(["P"], SamplingParams(2, 1.0, 1.0, 2), torch.Generator())


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed")
def test_missing_vllm_is_a_clear_error():
    model = SimpleNamespace(config=SimpleNamespace(_name_or_path="Qwen/Qwen3-0.6B"))
    with pytest.raises(
        ImportError, match=r"needs vLLM, which is not installed: pip install 'rlvr\[gpu\]'"
    ):
        VLLMEngine.create(model, CharIds())


def test_trainer_with_the_vllm_engine_syncs_merged_lora_weights(tmp_path):
    model_dir = str(build_tiny_hf_model(tmp_path / "model"))
    data = write_jsonl(tmp_path / "gsm8k.jsonl", gsm8k_rows(20))
    cfg = resolve_config(
        {
            "model": model_dir,
            "task": "gsm8k",
            "task_options": {"data": data, "dev_size": 2, "eval_size": 2},
            "steps": 2,
            "prompts_per_step": 2,
            "group_size": 4,
            "max_new_tokens": 5,
            "eval_size": 2,
            "lr": 1e-2,
            "progress": False,
            "out": str(tmp_path / "run"),
            "reward_funcs": ["user_rewards:brevity"],
            "policy": {"lora": {"rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}},
            "rollout_engine": "vllm",
            "engine_options": {"backend_factory": "fake_vllm:make_fake"},
        }
    )
    trainer = Trainer(cfg)
    backend = trainer.engine.backend
    for _ in range(2):
        assert trainer.train_step()["train/update_skipped"] == 0.0
    assert trainer.engine.synced_steps == 2 and backend.calls.count("load_weights") == 2
    merged = merged_state_dict(trainer.model)
    served = backend.inference.state_dict()
    assert all(torch.equal(served[k], merged[k]) for k in served)
    # the adapters moved, so the served q_proj differs from the base weight
    base = trainer.model.model.layers[0].self_attn.q_proj.base_layer.weight
    assert not torch.equal(served["model.layers.0.self_attn.q_proj.weight"], base)
