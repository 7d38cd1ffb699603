"""Token in, token out for every shipped environment: the trainer's log-probs of whole
trajectories, recomputed over the exact ids the episode loop assembled, equal the
sampler's at every policy token, after every observation (the on-policy ratio is 1).

Each case runs the Trainer's own collection (the KV cache kept across turns, the default)
on a tiny policy whose few supervised steps (`warm_start`: 100 steps of a 2-layer, 32-wide
Qwen2, once per task for the module) teach it to call the tool or make a guess, so the
observations come from the real environment and every token after them is sampled by the
engine (guess_number's and the calculator's environments answer only a guess or a call:
an untrained model's turns would end the episode).
Scored through the shared-prefix forward (the Llama-family fused path), through the
model's own forward, and with LoRA."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from rounding_testlib import logprob_atol

from rlvr.models import logprobs as logprobs_module
from rlvr.rollout.kv_session import open_session
from rlvr.train import Trainer
from rlvr.train.config import resolve_config
from rlvr.warmstart import warm_start

TINY = {"hidden": 32, "layers": 2, "heads": 2, "kv_heads": 2, "intermediate": 64}
SPLITS = {"train_size": 400, "dev_size": 4, "eval_size": 8}
LORA = {"lora": {"rank": 4, "alpha": 8, "target_modules": "all-linear"}}


# A TRL environment_factory class (huggingface/trl f2cd577's interface: reset(**row),
# public methods are tools) and an OpenRLHF AgentInstance (OpenRLHF 3c3be62's: async
# reset/step on states dicts), both answering the calculator policy's `<calc>` calls.
class TRLCalculator:
    def reset(self, **row: Any) -> None:
        self.calls = 0

    def calc(self, expression: str) -> str:
        """Evaluate a product.

        Args:
            expression: e.g. ``37*85``.
        """
        self.calls += 1
        a, _, b = expression.partition("*")
        return str(int(a) * int(b))


class OpenRLHFCalculator:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    async def reset(self, states: dict, **kwargs: Any) -> dict:
        return {"observation": states["observation"]}

    async def step(self, states: dict, **kwargs: Any) -> dict:
        expression = states["action_text"].rsplit("<calc>", 1)[-1].removesuffix("</calc>")
        a, _, b = expression.partition("*")
        feedback = f"={int(a) * int(b)}" if a.isdigit() and b.isdigit() else "=error"
        return {"environment_feedback": feedback, "done": False, "rewards": 0.0}


# The calculator's problems, one-turn (tools=false), made multi-turn by the adapter; the
# policy warm-started with the tool still calls `<calc>` on them.
ADAPTED = {
    "task": "calculator",
    "task_options": {"tools": False},
    "episode": {"max_turns": 3},
    "max_new_tokens": 42,
}
CASES = {  # name: (the task the tiny policy learns, the run's settings)
    "calculator": ("calculator", {"task": "calculator"}),
    "lookup": ("lookup", {"task": "lookup"}),
    "guess_number": ("guess_number", {"task": "guess_number"}),
    "retry_with_feedback": (
        "arithmetic",
        {
            "task": "arithmetic",
            "task_options": {"digits": 2, "ops": "+"},
            "environment": "rlvr.envs.feedback:RetryWithFeedback",
            "environment_options": {"max_tries": 3},
            "max_new_tokens": 40,
        },
    ),
    "trl_adapter": (
        "calculator",
        {
            **ADAPTED,
            "environment": "rlvr.envs.adapters:TRLEnvironment",
            "environment_options": {
                "factory": "test_envs_logprob_equality:TRLCalculator",
                "observation_format": "={result}",
            },
        },
    ),
    "openrlhf_adapter": (
        "calculator",
        {
            **ADAPTED,
            "environment": "rlvr.envs.adapters:OpenRLHFAgent",
            "environment_options": {
                "agent": "test_envs_logprob_equality:OpenRLHFCalculator",
                "stop": ["</calc>"],
            },
        },
    ),
}


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory):
    """The tiny policy warm-started on a task, trained once per module."""
    root, paths = tmp_path_factory.mktemp("warm"), {}

    def path(task: str) -> str:
        if task not in paths:
            options = {**SPLITS, **({"digits": 2, "ops": "+"} if task == "arithmetic" else {})}
            _, _, info = warm_start(
                task, options, 0, target_accuracy=1.0, max_steps=100, eval_every=100,
                lr=1e-2, batch_size=16, model_options=TINY, cache_dir=root, progress=False,
            )  # fmt: skip
            paths[task] = info["cache_path"]
        return paths[task]

    return path


def _trainer(tmp_path, model: str, settings: dict, policy: dict) -> Trainer:
    values = {
        "model": model,
        "prompts_per_step": 3,
        "group_size": 4,
        "eval_size": 4,
        "progress": False,
        "out": str(tmp_path / "run"),
        "policy": policy,
        **settings,
    }
    values["task_options"] = {**SPLITS, **values.get("task_options", {})}
    return Trainer(resolve_config(values))


@pytest.mark.filterwarnings("ignore:.*not trained on")
@pytest.mark.parametrize(
    ("case", "policy"),
    [*((name, {}) for name in CASES), ("guess_number", LORA), ("lookup", LORA)],
    ids=[*CASES, "guess_number-lora", "lookup-lora"],
)
def test_trainer_logprobs_equal_the_samplers_after_every_observation(
    tmp_path, tiny_policy, monkeypatch, case, policy
):
    warm_task, settings = CASES[case]
    trainer = _trainer(tmp_path, tiny_policy(warm_task), settings, policy)
    assert open_session(trainer.engine) is not None  # turns continue from a kept cache
    rollout = trainer._collect().rollout
    episodes = rollout.episodes
    assert sum(e.turns > 1 for e in episodes) >= 2, [e.turns for e in episodes]
    policy_tokens = rollout.loss_mask > 0
    after_observation = policy_tokens & (rollout.forced_mask.cumsum(-1) > 0)
    assert after_observation.sum() >= 4  # sampled by the engine after the environment spoke
    fused = logprobs_module.supports(trainer.model)
    assert fused  # LoRA layers too take the fused forward (tests/models/…_fused_llama_lora.py)
    scored = [trainer._logprobs(trainer.model, rollout)]
    if fused:  # the shared-prefix forward and the model's own forward, each against the sampler
        monkeypatch.setattr(logprobs_module, "supports", lambda model: False)
        scored.append(trainer._logprobs(trainer.model, rollout))
    # Sampler and trainer add in other orders: ratios within e^τ − 1 of 1 (rounding_testlib).
    bound = math.expm1(logprob_atol(trainer.model.config))
    for recomputed in scored:
        ratio = (recomputed[policy_tokens] - rollout.sampler_logprobs[policy_tokens]).exp()
        torch.testing.assert_close(ratio, torch.ones_like(ratio), atol=bound, rtol=0)
