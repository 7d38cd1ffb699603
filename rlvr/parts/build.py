"""Building a run's parts from their names: the task with its episodes, the policy dressed
for it, and the engine. Each is called once per run, by train, eval and the service."""

from __future__ import annotations

from typing import Any

from rlvr.envs.attach import attach_environment
from rlvr.envs.chat_tools import declare_chat_tools
from rlvr.models.hf_policy import chat_formatted, prepare_policy
from rlvr.models.load import EMBEDDED
from rlvr.models.policy_options import PolicyOptions
from rlvr.parts.spec import Episodes, ModelSpec
from rlvr.rollout.base import RolloutEngine
from rlvr.rollout.interrupt import ForcedInterruption
from rlvr.tasks import SPLITS, Task, make_task
from rlvr.warmstart import load_policy

ENGINES = ("hf", "vllm")
HF_ENGINE_OPTIONS = {"compile": "compile the decode step with torch.compile (bool)"}


def check_model_options(model: str, policy: dict, engine: str, engine_options: dict) -> None:
    """Validate a run's policy options and engine choice (no heavy imports, no loading)."""
    PolicyOptions.from_dict(policy)
    if engine not in ENGINES:
        raise ValueError(f"rollout_engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "hf":
        _check_hf_engine_options(engine_options)
    if model == EMBEDDED and policy:
        raise ValueError(
            f"policy options {sorted(policy)} apply to Hugging Face models, not model='embedded'"
        )


def _check_hf_engine_options(options: dict) -> None:
    """The in-process engine takes only `compile` (a bool); anything else would be ignored."""
    unknown = sorted(set(options) - set(HF_ENGINE_OPTIONS))
    if unknown:
        raise ValueError(
            f"engine_options {unknown} do not apply to rollout_engine='hf'; valid: "
            + "; ".join(f"{k}: {v}" for k, v in HF_ENGINE_OPTIONS.items())
            + " (the other keys are vLLM's, for rollout_engine='vllm')"
        )
    if "compile" in options and not isinstance(options["compile"], bool):
        raise ValueError(
            f"engine_options.compile must be true or false, got {options['compile']!r}"
        )


def build_task(
    name: str, options: dict[str, Any], episodes: Episodes | None = None, build: bool = True
) -> Task:
    """The task `name` with `options`, multi-turn with `episodes` (None: as it is)."""
    return with_episodes(make_task(name, **options), episodes, build)


def with_episodes(task: Task, episodes: Episodes | None, build: bool = True) -> Task:
    """`task` with a run's environment or tools and episode budgets (None: as it is).
    `build` false checks the fields without making the tools (a config check)."""
    if episodes is None:
        return task
    return attach_environment(
        task,
        episodes.environment,
        episodes.environment_options,
        episodes.tools,
        episodes.episode,
        episodes.tool_format,
        build=build,
    )


def dress_policy(
    model: Any, tokenizer: Any, task: Task, name: str, policy: dict[str, Any]
) -> tuple[Any, dict[str, Any]]:
    """A Hugging Face policy (`name` not 'embedded') with its `policy` options applied, and
    `task`'s prompts rendered with its chat template, declaring the task's tools (in
    place: select the task's problems afterwards); the embedded policy as it is. Also the
    facts the options added (LoRA, dtype) for the run's info."""
    if name == EMBEDDED:
        return model, {}
    options = PolicyOptions.from_dict(policy)
    model, extra = prepare_policy(model, options)
    chat_formatted(task, tokenizer, options, getattr(task, "tool_schemas", None))
    declare_chat_tools(task, tokenizer, options.enable_thinking)
    return model, extra


def make_engine(
    model: Any,
    tokenizer: Any,
    engine: str = "hf",
    engine_options: dict[str, Any] | None = None,
    fp32_head: bool = True,
) -> RolloutEngine:
    """The rollout engine `engine` names over `model`; vLLM is imported only when chosen."""
    engine_options = engine_options or {}
    if engine == "vllm":
        from rlvr.rollout.vllm_engine import VLLMEngine

        return VLLMEngine.create(model, tokenizer, **engine_options)
    from rlvr.rollout import HFEngine

    compile_ = engine_options.get("compile", False)
    return HFEngine(model, tokenizer, fp32_head=fp32_head, compile=compile_)


def interrupted(
    engine: Any, tokenizer: Any, spec: ModelSpec | Any, max_new_tokens: int
) -> RolloutEngine:
    """`engine`, wrapped for forced length interruption when `spec.think_budget` is set."""
    if spec.think_budget is None:
        return engine
    return ForcedInterruption(
        engine, tokenizer, spec.think_budget, spec.interrupt_phrase, max_new_tokens
    )


def open_engine(
    spec: ModelSpec, task: Task, task_name: str, task_options: dict, max_new_tokens: int
) -> RolloutEngine:
    """The engine sampling from `spec`'s policy (dropout off), loaded and dressed for
    `task` (whose prompts a chat template re-renders in place)."""
    policy, tokenizer, _ = load_policy(spec.model, task_name, task_options, 0)
    policy, _ = dress_policy(policy, tokenizer, task, spec.model, spec.policy)
    policy.eval()  # dropout off
    engine = make_engine(policy, tokenizer, spec.engine, spec.engine_options, spec.fp32_head)
    return interrupted(engine, tokenizer, spec, max_new_tokens)


def longest_prompt(task: Task, tokenizer: Any) -> int:
    """Tokens of the task's longest prompt over every split, as the engine will see it
    (chat template applied). A Hugging Face tokenizer encodes them in one batch."""
    prompts = list({p.prompt for split in SPLITS for p in task.problems(split)})
    if not prompts:
        return 0
    hf = getattr(tokenizer, "hf_tokenizer", None)
    if hf is not None:
        return max(map(len, hf(prompts, add_special_tokens=False)["input_ids"]))
    return max(len(tokenizer.encode(p)) for p in prompts)
