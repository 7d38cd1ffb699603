"""The weight-sync probe (rlvr/train/sampler/sync_probe.py): the engines score given tokens as they
sample them; the HF engine and a LoRA policy pass; a fake vLLM backend that forgets one
weight sync, or starts from other weights, stops the run with one line naming the step."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from hf_testlib import build_tiny_hf_model, gsm8k_rows, write_jsonl
from rounding_testlib import RANDOM_LOGIT_SCALE, logprob_atol

from rlvr.cli import main
from rlvr.rollout import SamplingParams
from rlvr.rollout.vllm_engine import VLLMBackend
from rlvr.train.config import resolve_config
from rlvr.train.loop import Trainer
from rlvr.train.sampler.sync_probe import WeightSyncError

sys.path.insert(0, str(Path(__file__).parents[1] / "rollout"))  # fake_vllm:make_fake


def test_hf_engine_scores_what_it_sampled(small_config):
    """score_ids forces the sampled tokens through the same decode loop: at temperature 1
    and top_p 1 it returns the sampler's own log-probs."""
    trainer = Trainer(small_config(steps=1))
    prompts = [trainer.tokenizer.encode(p.prompt) for p in trainer.task.problems("train")[:3]]
    gen = trainer.engine.generate_ids(
        prompts, SamplingParams(2, 1.0, 1.0, 8), torch.Generator().manual_seed(0)
    )
    responses = [
        gen.response_ids[row, :n].tolist() for row, n in enumerate(gen.response_lengths.tolist())
    ]
    scored = trainer.engine.score_ids(gen.prompt_ids, responses)
    # One decode loop, but other batch shapes (the scored rows come one at a time, say):
    # within τ (rounding_testlib.logprob_atol).
    tau = logprob_atol(trainer.model.config)
    for row, s in enumerate(scored):
        torch.testing.assert_close(s, gen.sampler_logprobs[row, : len(s)], rtol=0, atol=tau)


def test_the_hf_engine_passes_and_logs_the_gap(small_config):
    trainer = Trainer(small_config(steps=1))
    metrics = trainer.train_step()
    assert trainer.sync_probe.tolerance == 1e-3  # float32 policy, HF engine
    # A mean of |engine − trainer| log-probs that add in other orders: ≤ τ (rounding_testlib)
    assert 0 <= metrics["train/sync_probe_gap"] <= logprob_atol(trainer.model.config)
    assert metrics["time/sync_probe_s"] > 0
    assert "train/sync_probe_gap" not in Trainer(small_config(sync_probe=False)).train_step()


def test_a_diverged_policy_is_not_called_a_failed_sync(small_config):
    """Weights that are NaN on both sides are the policy's divergence (the run's own check
    names it), not a sync failure: the probe measures no gap and does not stop the run."""
    trainer = Trainer(small_config(steps=1))
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.fill_(float("nan"))
    pad = trainer.tokenizer.pad_token_id
    metrics = trainer.sync_probe.check(trainer.engine, trainer.model, pad, False, "after step 1")
    assert "train/sync_probe_gap" not in metrics and metrics["time/sync_probe_s"] > 0


def _hf_config(tmp_path, **extra):
    model_dir = str(build_tiny_hf_model(tmp_path / "model"))
    data = write_jsonl(tmp_path / "gsm8k.jsonl", gsm8k_rows(20))
    return {
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
        **extra,
    }


LORA = {"lora": {"rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}}
# The fake serves float32 weights: synced, the gap is a mean of log-prob differences that
# come from adding in other orders, ≤ τ of the random 2-layer model (rounding_testlib.py:
# forward_terms 2·(5·32 + 2·512 + 64) + 32 + its vocabulary, M = RANDOM_LOGIT_SCALE),
# 1.4e-3 with its 320 tokens (hf_testlib.build_tokenizer); a forgotten sync or other
# weights move it by far more.
SYNCED_GAP = logprob_atol(
    SimpleNamespace(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        max_position_embeddings=512,
        vocab_size=320,
    ),
    RANDOM_LOGIT_SCALE,
)
FAKE_VLLM = {
    "rollout_engine": "vllm",
    "engine_options": {"backend_factory": "fake_vllm:make_fake"},
    "sync_probe_tol": SYNCED_GAP,
}


def test_a_lora_policy_passes_with_the_hf_engine(tmp_path):
    trainer = Trainer(resolve_config(_hf_config(tmp_path, policy=LORA)))
    gaps = [trainer.train_step()["train/sync_probe_gap"] for _ in range(2)]
    assert all(g <= SYNCED_GAP for g in gaps)  # the engine and the trainer add in other orders


def test_the_fake_vllm_engine_passes_when_every_sync_lands(tmp_path):
    trainer = Trainer(resolve_config(_hf_config(tmp_path, policy=LORA, **FAKE_VLLM)))
    gaps = [trainer.train_step()["train/sync_probe_gap"] for _ in range(2)]
    assert all(g <= SYNCED_GAP for g in gaps)
    assert trainer.engine.backend.calls.count("score") == 3  # at the start, after each sync


def test_syncs_after_the_second_step_are_probed_every_nth_step(tmp_path):
    # every = 3: steps 1 and 2 always, then 3 and 6; not 4, 5 or 7.
    cfg = _hf_config(tmp_path, policy=LORA, **FAKE_VLLM, steps=7, sync_probe_every=3)
    trainer = Trainer(resolve_config(cfg))
    probed = []
    for step in range(1, 8):
        trainer.step = step - 1
        probed.append("train/sync_probe_gap" in trainer.train_step())
    assert probed == [True, True, True, False, False, True, False]
    assert trainer.engine.backend.calls.count("score") == 1 + 4  # before step 1, then 1,2,3,6


def _forget_sync(backend, which: int) -> None:
    """The backend acknowledges the `which`-th load_weights call and keeps its weights."""
    load, count = backend.load_weights, []

    def load_weights(weights):
        count.append(1)
        if len(count) != which:
            load(weights)

    backend.load_weights = load_weights


def test_a_forgotten_sync_stops_the_run_naming_the_step(tmp_path):
    trainer = Trainer(resolve_config(_hf_config(tmp_path, policy=LORA, **FAKE_VLLM)))
    _forget_sync(trainer.engine.backend, which=2)
    trainer.train_step()
    trainer.step = 1
    with pytest.raises(WeightSyncError, match=r"after the weight sync of step 2: .* differ"):
        trainer.train_step()


def test_an_engine_serving_other_weights_is_caught_before_the_first_step(tmp_path):
    trainer = Trainer(resolve_config(_hf_config(tmp_path, **FAKE_VLLM)))
    with torch.no_grad():  # the engine loaded another checkpoint than the trainer's
        for p in trainer.engine.backend.inference.parameters():
            p.add_(0.05 * torch.randn_like(p))
    with pytest.raises(WeightSyncError, match="before step 1"):
        trainer.train_step()


def test_rlvr_train_stops_with_one_line(tmp_path, capsys, monkeypatch):
    import fake_vllm

    made = fake_vllm.make_fake

    def forgetful(model, **options):
        backend = made(model, **options)
        _forget_sync(backend, which=1)
        return backend

    monkeypatch.setattr(fake_vllm, "make_fake", forgetful)
    cfg = _hf_config(tmp_path, **FAKE_VLLM)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    code = main(["train", "--config", str(config)])
    err = capsys.readouterr().err.strip().splitlines()  # progress bars of saving, then
    assert code != 0
    assert "weight-sync probe after the weight sync of step 1" in err[-1]
    assert not any("Traceback" in line for line in err)


def test_vllm_backend_reads_the_prompt_logprobs_of_the_response(monkeypatch):
    """VLLMBackend.score sends prompt + response with prompt_logprobs=0 and reads back the
    response's entries (vLLM's first entry, for the first prompt token, is None)."""
    seen = []

    class LLM:
        def __init__(self, model, **options):
            pass

        def generate(self, prompts, params, use_tqdm=True):
            seen.append((prompts, params))
            out = []
            for p in prompts:
                ids = p["prompt_token_ids"]
                entries = [None] + [{t: SimpleNamespace(logprob=-t / 10)} for t in ids[1:]]
                out.append(SimpleNamespace(prompt_logprobs=entries))
            return out

    fake = SimpleNamespace(LLM=LLM, SamplingParams=lambda **kw: SimpleNamespace(**kw))
    monkeypatch.setattr("rlvr.rollout.vllm_engine.import_vllm", lambda: fake)
    scored = VLLMBackend("local/model").score([[5, 6], [7]], [[3, 4], [9]])
    assert scored == [[-0.3, -0.4], [-0.9]]
    prompts, params = seen[0]
    assert [p["prompt_token_ids"] for p in prompts] == [[5, 6, 3, 4], [7, 9]]
    assert (params.prompt_logprobs, params.temperature, params.max_tokens) == (0, 1.0, 1)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"sync_probe_tol": 0.0}, "sync_probe_tol must be a number > 0 or null, got 0.0"),
        ({"sync_probe": False, "sync_probe_tol": 0.1}, "sync_probe=false turns the probe off"),
        ({"sync_probe_every": 0}, "sync_probe_every must be an integer ≥ 1, got 0"),
        ({"sync_probe_every": 2.5}, r"sync_probe_every must be int, got 2.5 \(float\)"),
    ],
)
def test_bad_probe_settings_are_named(small_config, fields, message):
    with pytest.raises(ValueError, match=message):
        small_config(**fields)
