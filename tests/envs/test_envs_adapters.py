"""Another framework's environment, unmodified, in rlvr's episode loop (rlvr/envs/adapters.py):
a TRL `environment_factory` class and an OpenRLHF `AgentInstance`, each a small user-style
example written to that framework's interface, played by a scripted policy."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "rollout"))

from scripted_engine import EOS, ScriptedEngine

from rlvr.envs.adapters import OpenRLHFAgent, TRLEnvironment
from rlvr.envs.attach import attach_environment
from rlvr.models import CharTokenizer
from rlvr.rollout import SamplingParams
from rlvr.rollout.episodes import generate_for
from rlvr.tasks import make_task

TOK = CharTokenizer()


# A TRL environment, as TRL's GRPO docs write one (huggingface/trl f2cd577,
# docs/source/grpo_trainer.md, "Environments"): reset(**row) reads the row's columns,
# public methods are tools (docstring + type hints), get_reward scores the state.
class IncrementEnv:
    def reset(self, answer, **kwargs) -> None:
        self.counter = 0
        self.target = int(answer)

    def get_reward(self) -> float:
        return float(self.counter == self.target)

    def increment(self, step: int) -> int:
        """
        Increment the internal counter.

        Args:
            step: Value to add to the counter.

        Returns:
            The updated counter value.
        """
        self.counter += step
        return self.counter


class SelfSampling(IncrementEnv):
    """TRL's env-owned data: reset returns the prompt (rlvr's prompts are the task's)."""

    def reset(self, **kwargs) -> str:
        self.counter, self.target = 0, random.randint(1, 6)
        return f"Increment the counter by {self.target}."


# An OpenRLHF agent, shaped as its examples/python/agent_func.py (OpenRLHF 3c3be62):
# async reset/step on `states` dicts, step returning rewards (a tensor), scores,
# environment_feedback, done, sampling_params and extra_logs.
class AgentInstance:
    def __init__(self, *args, **kwargs):
        self.step_idx = 0

    async def reset(self, states: dict, **kwargs):
        return {"observation": states["observation"]}

    async def step(self, states: dict, **kwargs):
        right = states["action_text"].endswith(f"<answer>{states['label']}</answer>")
        done = right or self.step_idx >= 2
        reward = torch.tensor(1.0 if right else 0.0)
        feedback = " [CORRECT]" if right else " [INCORRECT] try again:"
        self.step_idx += 1
        return {
            "rewards": reward,
            "scores": reward,
            "environment_feedback": feedback,
            "done": done,
            "sampling_params": states.get("sampling_params"),
            "extra_logs": {"dummy_scores": reward},
        }


def _task(environment, options):
    task = make_task("arithmetic", digits=1, ops="+", train_size=20, dev_size=0, eval_size=0)
    attach_environment(task, environment, options, [], {"max_turns": 4})
    problem = next(p for p in task.problems("train") if 3 <= int(p.answer) <= 5)
    return task, problem


def _play(task, problem, reply):
    engine = ScriptedEngine(TOK, reply)
    params = SamplingParams(group_size=1, max_new_tokens=200)
    return generate_for(engine, task, [problem], params, torch.Generator())


def test_a_trl_environment_runs_its_methods_as_tools_and_reports_its_reward():
    with pytest.warns(UserWarning, match="get_reward.*not trained on"):
        task, problem = _task(
            "rlvr.envs.adapters:TRLEnvironment", {"factory": "test_envs_adapters:IncrementEnv"}
        )
        target = int(problem.answer)

        def policy(context, k):  # increments by 2 (or 1) until the target, then answers
            reached = (
                int(context.rsplit("<result>", 1)[1].split("<")[0]) if "<result>" in context else 0
            )
            if reached == target:
                return f" \\boxed{{{target}}}" + EOS
            step = 2 if target - reached >= 2 else 1
            return f' <increment>{{"step": {step}}}</increment>'

        gen = _play(task, problem, policy)
    calls = (target + 1) // 2  # steps of 2, and one of 1 for an odd target
    record = gen.episodes[0]
    assert record.tool_calls == calls and record.ended_by == "answer" and record.env_failed is None
    assert gen.texts[0].endswith(f"<result>{target}</result> \\boxed{{{target}}}")
    # get_reward is 0 until the last call reaches the target: the parts sum to 1.
    assert record.turn_reward == 1.0 and task.verify(problem, gen.texts[0]).correct


def test_a_trl_reset_that_writes_the_prompt_fails_the_start_flagged():
    with pytest.warns(UserWarning):
        task, problem = _task("rlvr.envs.adapters:TRLEnvironment", {"factory": SelfSampling})
        gen = _play(task, problem, lambda c, k: " x" + EOS)
    failed = gen.episodes[0].env_failed
    assert failed.startswith("error: starting the environment: ValueError: SelfSampling.reset")
    assert "rlvr's prompt is the task row's" in failed


def test_trl_environment_checks_the_interface():
    class NoReset:
        def increment(self, step: int) -> int:
            return step

    with pytest.raises(ValueError, match="NoReset has no reset method"):
        TRLEnvironment(NoReset)
    with pytest.warns(UserWarning):
        env = TRLEnvironment(IncrementEnv)
    assert env.stop == ("</increment>",)  # reset and get_reward are not tools


def test_an_openrlhf_agent_steps_every_turn_that_ends_at_its_stop():
    with pytest.warns(UserWarning, match="step's rewards.*not trained on"):
        task, problem = _task(
            "rlvr.envs.adapters:OpenRLHFAgent",
            {"agent": "test_envs_adapters:AgentInstance", "stop": ["</answer>"]},
        )
        answers = ["0", problem.answer]

        def policy(context, k):
            return f" <answer>{answers[context.count('[INCORRECT]')]}</answer>ramble"

        gen = _play(task, problem, policy)
    assert gen.texts[0] == (
        f" <answer>0</answer> [INCORRECT] try again: <answer>{problem.answer}</answer> [CORRECT]"
    )
    record = gen.episodes[0]
    assert (record.turns, record.turn_reward, record.ended_by) == (2, 1.0, "env")


def test_openrlhf_agent_checks_its_options():
    with pytest.raises(ValueError, match="stop must be a list of strings"):
        OpenRLHFAgent(AgentInstance, stop="</answer>")
    with pytest.raises(ValueError, match="agent must look like 'module:name'"):
        OpenRLHFAgent("AgentInstance")
