"""What a run adds around a Hugging Face policy: policy options, chat prompts, rewards,
and the rollout engine. The training loop calls these; it stays model-agnostic."""

from __future__ import annotations

from typing import Any

from rlvr.envs.attach import attach_environment
from rlvr.envs.chat_tools import declare_chat_tools
from rlvr.models.context import check_context, context_length
from rlvr.models.hf_policy import chat_formatted, prepare_policy
from rlvr.models.policy_options import PolicyOptions
from rlvr.rewards import attach_rewards, parse_reward_funcs
from rlvr.tasks.base import SPLITS

ENGINES = ("hf", "vllm")


def check_options(cfg: Any) -> None:
    """Validate the HF-policy, reward and engine fields of a TrainConfig (no heavy imports)."""
    PolicyOptions.from_dict(cfg.policy)
    parse_reward_funcs(cfg.reward_funcs)
    if cfg.rollout_engine not in ENGINES:
        raise ValueError(
            f"rollout_engine must be one of {', '.join(ENGINES)}, got {cfg.rollout_engine!r}"
        )
    if cfg.rollout_engine == "hf":
        _check_hf_engine_options(cfg.engine_options)
    if cfg.model == "embedded" and cfg.policy:
        raise ValueError(
            f"policy options {sorted(cfg.policy)} apply to Hugging Face models, not model='embedded'"
        )


HF_ENGINE_OPTIONS = {"compile": "compile the decode step with torch.compile (bool)"}


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


def prepare_components(
    cfg: Any, model: Any, tokenizer: Any, task: Any, info: dict
) -> tuple[Any, Any]:
    """The policy with its options applied, and the task with chat prompts, rewards and
    the config's environment or tools (declared to the chat template with a chat
    `tool_format`, whose tool messages then frame the observations)."""
    attach_environment(
        task, cfg.environment, cfg.environment_options, cfg.tools, cfg.episode, cfg.tool_format
    )
    if cfg.model != "embedded":
        options = PolicyOptions.from_dict(cfg.policy)
        model, extra = prepare_policy(model, options)
        info.update(extra)
        task = chat_formatted(task, tokenizer, options, getattr(task, "tool_schemas", None))
        declare_chat_tools(task, tokenizer, options.enable_thinking)
    attach_rewards(
        task, cfg.reward_funcs, cfg.reward_timeout_s, cfg.reward_errors, cfg.reward_isolation
    )
    # Before any generation: a budget that cannot fit is refused, not cut row by row.
    check_context(cfg.max_new_tokens, context_length(model), longest_prompt(task, tokenizer))
    return model, task


def longest_prompt(task: Any, tokenizer: Any) -> int:
    """Tokens of the task's longest prompt over every split, as the engine will see it
    (chat template applied). A Hugging Face tokenizer encodes them in one batch."""
    prompts = list({p.prompt for split in SPLITS for p in task.problems(split)})
    if not prompts:
        return 0
    hf = getattr(tokenizer, "hf_tokenizer", None)
    if hf is not None:
        return max(map(len, hf(prompts, add_special_tokens=False)["input_ids"]))
    return max(len(tokenizer.encode(p)) for p in prompts)


def make_engine(cfg: Any, model: Any, tokenizer: Any, fp32_head: bool) -> Any:
    """The rollout engine `cfg.rollout_engine` names; vLLM is imported only when chosen."""
    if cfg.rollout_engine == "vllm":
        from rlvr.rollout.vllm_engine import VLLMEngine

        return VLLMEngine.create(model, tokenizer, **cfg.engine_options)
    from rlvr.rollout import HFEngine

    return HFEngine(
        model, tokenizer, fp32_head=fp32_head, compile=cfg.engine_options.get("compile", False)
    )
