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
from rlvr.rollout.vllm_engine import Sample, VLLMBackend, VLLMEngine
from rlvr.train.config import resolve_config
from rlvr.train.loop import Trainer


class StaticBackend:
    def __init__(self, groups):
        self.groups, self.calls = groups, []

    def generate(self, prompt_ids, n, temperature, top_p, max_tokens, seeds):
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
    assert backend.calls == [("generate", 2, 0.7, 0.9, [3, 3]), "sleep"]
    engine.generate(["P", "Q"], SamplingParams(2, 0.7, 0.9, 3), torch.Generator())
    assert backend.calls[2:] == [("wake_up", None), ("generate", 2, 0.7, 0.9, [3, 3]), "sleep"]


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
        ("generate", 1, 1.0, 1.0, [2]),
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


class FakeLLM:
    """`vllm.LLM` as far as `VLLMBackend.generate` uses it: records the sampling params
    and answers each prompt with `n` one-token completions that stop on EOS."""

    def __init__(self, model, **options):
        self.calls = []

    def generate(self, prompts, params, use_tqdm=True):
        # like vLLM: one SamplingParams for every prompt, or a list of one per prompt
        params = params if isinstance(params, list) else [params] * len(prompts)
        self.calls.append((prompts, params))
        eos = SimpleNamespace(logprob=-0.5)
        completion = SimpleNamespace(token_ids=[1], logprobs=[{1: eos}], finish_reason="stop")
        return [SimpleNamespace(outputs=[completion] * p.n) for p in params]


def fake_vllm_backend(monkeypatch):
    fake = SimpleNamespace(LLM=FakeLLM, SamplingParams=lambda **kw: SimpleNamespace(**kw))
    monkeypatch.setattr("rlvr.rollout.vllm_engine.import_vllm", lambda: fake)
    return VLLMBackend("local/model")


def model_with_context(positions):
    return SimpleNamespace(config=SimpleNamespace(max_position_embeddings=positions))


def test_every_prompt_gets_its_own_seed_spaced_by_the_group(monkeypatch):
    backend = fake_vllm_backend(monkeypatch)
    engine = VLLMEngine(model_with_context(512), CharIds(), backend, sleep=False)
    # the same prompt twice: with one seed for the call its samples would be identical
    engine.generate(["P", "P", "Q"], SamplingParams(3, 1.0, 1.0, 4), torch.Generator())
    prompts, params = backend.llm.calls[0]
    assert [p["prompt_token_ids"] for p in prompts] == [[80], [80], [81]]
    seeds = [p.seed for p in params]
    # vLLM seeds sample j of a prompt with seed + j: the 3 × 3 samples' seeds all differ
    assert len({s + j for s in seeds for j in range(3)}) == 9
    assert [seeds[1] - seeds[0], seeds[2] - seeds[1]] == [3, 3]
    assert all(p.n == 3 and p.max_tokens == 4 and p.logprobs == 0 for p in params)
    # drawn from the trainer's generator: the same generator state gives the same seeds
    engine.generate(["P", "P", "Q"], SamplingParams(3, 1.0, 1.0, 4), torch.Generator())
    assert [p.seed for p in backend.llm.calls[1][1]] == seeds
    engine.generate(["P"], SamplingParams(3, 1.0, 1.0, 4), torch.Generator().manual_seed(1))
    assert backend.llm.calls[2][1][0].seed not in seeds


def test_vllm_engine_never_asks_past_the_context(monkeypatch):
    backend = fake_vllm_backend(monkeypatch)
    engine = VLLMEngine(model_with_context(6), CharIds(), backend, sleep=False)
    gen = engine.generate(["PPPP", "Q"], SamplingParams(2, 1.0, 1.0, 4), torch.Generator())
    # context 6: the 4-token prompt leaves 2 tokens, the 1-token prompt the 4 asked for
    assert [p.max_tokens for p in backend.llm.calls[0][1]] == [2, 4]
    assert gen.response_lengths.tolist() == [1, 1, 1, 1]
    with pytest.raises(ValueError, match="prompt 0 has 6 tokens"):
        engine.generate(["PPPPPP"], SamplingParams(2, 1.0, 1.0, 4), torch.Generator())
