"""The checks and normalisations of `TrainConfig` beyond each field's own type: paths made
absolute, reward settings, parallelism, warm-start fields, group size. Each takes the
config (or its parts) and raises a ValueError naming the field, the value and what is
valid, or warns where a setting is legal but unlikely to do what was meant."""

from __future__ import annotations

import warnings
from dataclasses import fields
from pathlib import Path
from typing import Any

from rlvr.algo.recipes import Recipe
from rlvr.algo.registry import ADVANTAGES
from rlvr.rewards import check_reward_settings, parse_reward_funcs
from rlvr.runlog.trackers import check_report_to

PATH_OPTIONS = ("data", "eval_data")
"""task_options that name files; with `model`, made absolute when they exist locally."""


def _absolute(value: Any) -> Any:
    """An existing local path as an absolute one; anything else (a hub id) unchanged."""
    if isinstance(value, str) and value.strip() and Path(value).expanduser().exists():
        return str(Path(value).expanduser().resolve())
    if isinstance(value, dict) and "path" in value:
        return {**value, "path": _absolute(value["path"])}
    return value


def absolute_paths(cfg: Any) -> None:
    """Local paths in the config become absolute, so the config.yaml a run records means
    the same files when the run is resumed or evaluated from another directory."""
    if cfg.model != "embedded":
        object.__setattr__(cfg, "model", _absolute(cfg.model))
    options = {k: _absolute(v) if k in PATH_OPTIONS else v for k, v in cfg.task_options.items()}
    object.__setattr__(cfg, "task_options", options)
    if isinstance(cfg.teacher, dict) and cfg.teacher.get("model") not in (None, "self"):
        object.__setattr__(
            cfg, "teacher", {**cfg.teacher, "model": _absolute(cfg.teacher["model"])}
        )


def check_reward_fields(cfg: Any, recipe: Recipe) -> None:
    """Reward settings are valid and can take effect; dynamic sampling that cannot see a
    user's reward is pointed out."""
    check_reward_settings(cfg.reward_timeout_s, cfg.reward_errors, cfg.reward_isolation)
    defaults = {f.name: f.default for f in fields(cfg)}
    if not cfg.reward_funcs:
        for name in ("reward_timeout_s", "reward_errors", "reward_isolation"):
            if getattr(cfg, name) != defaults[name]:
                raise ValueError(
                    f"{name}={getattr(cfg, name)!r} applies to reward_funcs, and this run has "
                    f"none (its reward is the verifier's correctness); remove it"
                )
    custom = [s.func for s in parse_reward_funcs(cfg.reward_funcs)]
    if (
        recipe.dynamic_sampling
        and recipe.dynamic_sampling_key == "correct"
        and custom
        not in (
            [],
            ["rlvr.rewards:correctness"],
        )
    ):
        warnings.warn(
            f"dynamic sampling keeps groups whose verifier correctness varies, but the reward "
            f"optimised is reward_funcs {custom}: groups whose reward varies while correctness "
            f"does not are dropped; set dynamic_sampling_key=reward to key on the reward",
            stacklevel=3,
        )


def check_tracking(cfg: Any) -> None:
    """`report_to` names known trackers; the completions table's settings are in range;
    settings that could not take effect are refused."""
    check_report_to(cfg.report_to)
    for name, least in (("completions_every", 0), ("completions_rows", 1)):
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an integer ≥ {least}, got {value!r}")
    defaults = {f.name: f.default for f in fields(cfg)}
    if cfg.completions_every == 0 and cfg.completions_rows != defaults["completions_rows"]:
        raise ValueError(
            f"completions_rows={cfg.completions_rows!r} applies to the completions table, and "
            f"completions_every=0 writes none; set completions_every ≥ 1 or remove it"
        )
    named = [t for t in cfg.report_to if t != "tensorboard"]
    for name in ("tracker_project", "tracker_run_name"):
        if not named and getattr(cfg, name) != defaults[name]:
            raise ValueError(
                f"{name}={getattr(cfg, name)!r} names the run in wandb, trackio, swanlab or "
                f"mlflow, and report_to={cfg.report_to!r} has none; remove it"
            )
    if not isinstance(cfg.tracker_project, str) or not cfg.tracker_project.strip():
        raise ValueError(f"tracker_project must be a non-empty name, got {cfg.tracker_project!r}")


PARALLEL_MODES = ("ddp", "fsdp")


def check_parallel(cfg: Any) -> None:
    """`parallel` names a mode, and FSDP is not combined with what it does not support."""
    if cfg.parallel not in PARALLEL_MODES:
        raise ValueError(
            f"parallel must be one of {', '.join(PARALLEL_MODES)}, got {cfg.parallel!r}"
        )
    if cfg.parallel != "fsdp":
        return
    unsupported = {
        "rollout_engine": cfg.rollout_engine != "hf",
        "policy.lora": bool(cfg.policy.get("lora")),
        "rollout_actors": cfg.rollout_actors > 0,
    }
    for name, used in unsupported.items():
        if used:
            raise ValueError(
                f"parallel='fsdp' does not support {name} yet (docs/distributed.md); "
                f"remove {name} or use parallel='ddp'"
            )


def check_warm_start_fields(cfg: Any) -> None:
    """The warm start builds only the embedded model: its settings would be ignored."""
    if cfg.model == "embedded":
        return
    for f in fields(cfg):
        if f.name.startswith("warm_") and getattr(cfg, f.name) != f.default:
            raise ValueError(
                f"{f.name}={getattr(cfg, f.name)!r} only applies to model='embedded' (the "
                f"warm start), not model={cfg.model!r}; remove it"
            )


def check_group_size(group_size: int, recipe: Recipe) -> None:
    """A baseline from the group's own responses needs a group of at least two."""
    if group_size < 2 and ADVANTAGES.get(recipe.advantage).group_baseline:
        others = [e.name for e in ADVANTAGES if not e.group_baseline]
        raise ValueError(
            f"group_size={group_size} trains nothing with advantage={recipe.advantage!r} "
            f"(recipe {recipe.name!r}): its baseline is the mean of the prompt's own group, "
            f"so every advantage is 0; use group_size ≥ 2, or an advantage that does not "
            f"compare within a group ({', '.join(others)})"
        )


def check_tool_format(cfg: Any) -> None:
    """A chat tool format is declared to, and framed by, the policy's chat template."""
    if cfg.tool_format != "tags" and not cfg.policy.get("chat_template"):
        raise ValueError(
            f"tool_format {cfg.tool_format!r} calls tools through the chat template; set "
            "policy.chat_template: true (a Hugging Face chat model), or tool_format: tags"
        )


def warn_overlong_budget(
    recipe: Recipe, max_new_tokens: int, tokenizer: Any, problems: list
) -> None:
    """Warn when DAPO's soft punishment would already hit the task's reference answers."""
    if not recipe.overlong_penalty:
        return
    ramp_start = max_new_tokens - recipe.overlong_cache
    longest = max(len(tokenizer.encode(p.target)) + 1 for p in problems[:2000])
    if longest > ramp_start:
        warnings.warn(
            f"soft overlong punishment starts after {ramp_start} tokens (max_new_tokens="
            f"{max_new_tokens} − overlong_cache={recipe.overlong_cache}) but "
            f"reference answers of this task take up to {longest} tokens with EOS: correct "
            f"answers will be punished; raise max_new_tokens or lower overlong_cache",
            stacklevel=3,
        )
