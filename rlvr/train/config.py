"""The training configuration: one flat, documented, validated dataclass.

A run is fully described by a `TrainConfig` plus a recipe (by name, with any recipe field
overridden at the top level). YAML files and `--set key=value` overrides both go through
`resolve_config`, which rejects unknown keys and invalid values with a message naming them.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from rlvr.algo.recipes import RECIPES, Recipe, get_recipe, recipe_fields
from rlvr.checks import check_field_types, check_int, is_number
from rlvr.parts import Episodes, check_model_options, with_episodes
from rlvr.tasks import TASKS, Task, make_task
from rlvr.train.config_checks import (
    absolute_paths,
    check_group_size,
    check_parallel,
    check_reward_fields,
    check_tool_format,
    check_tracking,
    check_warm_start_fields,
)
from rlvr.train.sampler.lag import check_sampler_lag
from rlvr.train.sampler.precision import check_precision
from rlvr.train.teacher_model import check_teacher


def check_eval_size(eval_size: int, task: Task) -> None:
    """`eval_size` (0: all) must not exceed the task's eval split."""
    eval_items = task.split_size("eval")
    if eval_size > eval_items:
        raise ValueError(
            f"eval_size={eval_size} exceeds the {eval_items} problems of the task's eval "
            f"split; use at most {eval_items}, 0 for all, or raise task_options.eval_size"
        )


def _doc(text: str, default: Any) -> Any:
    return field(default=default, metadata={"doc": text})


@dataclass(frozen=True)
class TrainConfig:
    """Everything a training run needs besides the recipe's choices."""

    recipe: str = _doc("named recipe (`rlvr recipes`); any recipe field may be set too", "grpo")
    task: str = _doc(f"task name: {', '.join(TASKS)}", "arithmetic")
    task_options: dict = field(default_factory=dict, metadata={"doc": "task constructor options"})
    model: str = _doc("'embedded' (tiny warm-started policy), a local path or hub id", "embedded")
    warm_target: float = _doc("dev accuracy at which the embedded warm start stops", 0.3)
    warm_seed: int = _doc(
        "seed of the embedded warm start (shared by all RL seeds; `rlvr compare` matrices "
        "may set warm_seed: per_seed)",
        0,
    )
    warm_max_steps: int = _doc(
        "supervised steps the embedded warm start may take before it stops short of "
        "warm_target (a matched control's equal supervised budget)",
        3000,
    )
    seed: int = _doc("seed of the RL run: data order and sampling", 0)
    steps: int = _doc("rollout batches to train on (the step budget)", 50)
    max_generated_tokens: int | None = _doc(
        "token budget: stop after the step at which generated tokens reach this", None
    )
    prompts_per_step: int = _doc("prompt groups per rollout batch", 16)
    group_size: int = _doc("responses sampled per prompt (G)", 8)
    max_new_tokens: int | None = _doc(
        "response budget in tokens (L_max); null: the task's default, which fits its longest "
        "reference answer, EOS and 4 tokens of slack (arithmetic 2-digit +: 17, countdown: 24; "
        "dataset tasks: 1024)",
        None,
    )
    temperature: float = _doc("sampling temperature for training rollouts", 1.0)
    top_p: float = _doc("nucleus sampling for training rollouts and sampled evaluation", 1.0)
    lr: float = _doc("policy learning rate (AdamW)", 1e-4)
    weight_decay: float = _doc("AdamW weight decay", 0.0)
    max_grad_norm: float = _doc(
        "clip the gradient's global norm to this (> 0); exactly 0 disables clipping", 1.0
    )
    num_minibatches: int = _doc("optimizer steps per rollout batch (off-policy updates)", 1)
    ppo_epochs: int = _doc("passes over each rollout batch", 1)
    micro_batch_size: int = _doc("rows per forward/backward (gradient accumulation)", 64)
    memory_budget_gib: float | None = _doc(
        "lower the rows per training micro-batch so the saved activations of its longest "
        "row, with the weights, gradients and AdamW state, fit in this many GiB "
        "(rlvr/train/memory_budget.py; train/micro_batch_rows logs the rows used); null: "
        "always micro_batch_size rows (on a GPU, raise it toward the device's memory: more rows "
        "per micro-batch, fewer passes)",
        4.0,
    )
    critic_lr: float = _doc("critic learning rate (critic recipes)", 1e-3)
    eval_every: int = _doc("evaluate every N steps (also before the first and after the last)", 10)
    eval_size: int = _doc("held-out problems per evaluation (0: the whole eval split)", 200)
    eval_samples: int = _doc("samples per eval problem at the training temperature", 1)
    think_budget: int | None = _doc("forced length interruption: tokens before an end phrase", None)
    interrupt_phrase: str = _doc("phrase appended at the thinking budget", " Final answer:")
    out: str = _doc("output directory", "runs/latest")
    save_every: int = _doc("checkpoint every N steps (0: only by time and at the end)", 10)
    progress: bool = _doc("show progress bars", True)
    overrides: dict = field(default_factory=dict, metadata={"doc": "recipe fields overridden"})
    critic_weight_decay: float = _doc(
        "critic AdamW weight decay (0.01: torch's AdamW default, which it used to take silently)",
        0.01,
    )
    reward_funcs: list = field(
        default_factory=list,
        metadata={
            "doc": "reward functions 'module:function' or {func, weight} (default: verifier)"
        },
    )
    reward_timeout_s: float = _doc(
        "time limit in seconds of one call of a reward function (one batch); 0: none", 60.0
    )
    reward_errors: str = _doc(
        "a reward function that raises, times out or returns a wrong count, a non-number, "
        "NaN or inf fails its samples, flagged and counted; 'drop': their prompt groups "
        "leave the update; 'zero': the function counts 0 there; 'stop': the run ends",
        "drop",
    )
    reward_isolation: str = _doc(
        "how reward calls are time-limited: 'auto' (an alarm on the main thread, else a "
        "helper process, as the verifiers), 'process' (always the helper: also stops C-level "
        "hangs; the function must be importable by name), 'alarm', 'thread'",
        "auto",
    )
    environment: str | None = _doc(
        "a user's environment 'module:Class' (rlvr.envs.Environment), made per episode: "
        "makes the task multi-turn (docs/agentic.md)",
        None,
    )
    environment_options: dict = field(
        default_factory=dict, metadata={"doc": "keyword arguments of the environment class"}
    )
    tools: list = field(
        default_factory=list,
        metadata={
            "doc": "tool functions 'module:function' the policy may call as "
            "<name>argument</name> (rlvr.envs.ToolEnvironment): makes the task multi-turn"
        },
    )
    tool_format: str = _doc(
        "how the policy calls tools: 'tags' (<name>argument</name>) or a chat model's own "
        "format, declared to its chat template: 'hermes' (<tool_call>{json}</tool_call>, "
        "Qwen2.5/Qwen3), 'qwen_xml' (<tool_call><function=...>, Qwen3.5)",
        "tags",
    )
    episode: dict = field(
        default_factory=dict,
        metadata={
            "doc": "multi-turn limits (rlvr.envs.EpisodeBudgets): max_turns, "
            "max_tool_calls, max_turn_tokens, max_observation_tokens, cut_marker, "
            "env_timeout_s, env_errors, env_isolation (none | process), env_memory_mb"
        },
    )
    policy: dict = field(
        default_factory=dict,
        metadata={"doc": "HF policy: dtype, device, lora, chat_template, gradient_checkpointing"},
    )
    rollout_engine: str = _doc("rollout engine: 'hf' (in-process) or 'vllm' (rlvr[gpu])", "hf")
    engine_options: dict = field(
        default_factory=dict,
        metadata={
            "doc": "engine options: vLLM's (gpu_memory_utilization, ...) with rollout_engine "
            "'vllm'; with 'hf' only compile (true: torch.compile the decode step)"
        },
    )
    save_every_minutes: float = _doc(
        "also checkpoint when this many minutes passed since the last one (0: never)", 10.0
    )
    keep_checkpoints: int = _doc("good checkpoints kept (newest + older fallbacks), ≥ 1", 2)
    max_nonfinite_steps: int = _doc(
        "stop as diverged after this many consecutive steps with a non-finite loss/gradient", 3
    )
    rollout_actors: int = _doc(
        "Ray rollout actors sampling asynchronously (0: in-process, synchronous)", 0
    )
    max_lag: int = _doc(
        "async: policy versions a rollout may lag the learner; older ones are dropped", 0
    )
    sync_probe: bool = _doc(
        "before the first step and after every weight sync, check that the rollout engine's "
        "log-probs of a fixed probe batch equal the trainer's; stop the run if not "
        "(docs/19-rollout-correction.md)",
        True,
    )
    sync_probe_every: int = _doc(
        "probe the syncs of steps 1 and 2, then of every N-th step (a probe costs about "
        "7-10 % of a step on a 135M model; 1: every step)",
        10,
    )
    sync_probe_tol: float | None = _doc(
        "the probe's limit on mean |log π_engine − log π_trainer|; null: the engine's "
        "default (hf with a float32 policy 1e-3, else 5e-2)",
        None,
    )
    precision: str = _doc(
        "the trainer's compute precision: 'fp32', or 'bf16' (bf16 autocast over float32 "
        "master weights and AdamW state; log-probs, losses and normalisers in float32; the "
        "recipe's fp32_head keeps the LM head in float32; docs/precision.md)",
        "fp32",
    )
    sampler_lag: int = _doc(
        "the in-process hf engine samples from a copy of the policy this many updates "
        "behind it, as an async sampler would (deterministic, no Ray; the lag shows in "
        "rollout/mismatch_* and rollout_correction applies; rlvr/train/sampler/lag.py); 0: "
        "the current policy",
        0,
    )
    sampler_precision: str = _doc(
        "what the hf engine samples from: 'same' (the trainer's module, in its precision) or "
        "'bf16' (a bf16 copy of its own, synced after every update, as vLLM's; its drift "
        "shows in rollout/mismatch_* and rollout_correction applies)",
        "same",
    )
    parallel: str = _doc(
        "data parallelism under torchrun: 'ddp' (every rank holds the whole model) or 'fsdp' "
        "(FSDP2: weights, gradients and optimizer states sharded over the ranks)",
        "ddp",
    )
    report_to: list = field(
        default_factory=lambda: ["tensorboard"],
        metadata={
            "doc": "trackers that receive the metrics, config and completions tables besides "
            "metrics.jsonl: tensorboard, wandb, trackio, swanlab, mlflow (each but "
            "tensorboard needs its extra, rlvr[wandb] ...); [] for none"
        },
    )
    tracker_project: str = _doc("the trackers' project (experiment) name", "rlvr")
    tracker_run_name: str | None = _doc(
        "the run's name in the trackers (null: the out directory's name)", None
    )
    completions_every: int = _doc(
        "write a sample of the step's completions to completions/step_*.jsonl and the "
        "trackers' tables every N steps (0: never)",
        10,
    )
    completions_rows: int = _doc("rows of each completions table (whole prompt groups)", 16)
    teacher: dict = field(
        default_factory=dict,
        metadata={
            "doc": "on-policy distillation's teacher (recipes opd, opsd, agent_opsd): model (a "
            "hub id or path, a checkpoint directory, 'self': the frozen step-0 student, or "
            "'current': the policy being trained), prompt_template (its own prompt; may use "
            "{answer}, dataset columns and {skill}) and skills ({field, texts, pattern}: the "
            "{skill} text per row, docs/20-agent-opsd.md)"
        },
    )

    def __post_init__(self) -> None:
        check_field_types(self)
        absolute_paths(self)
        task = make_task(self.task, **self.task_options)  # unknown task or options: named
        if self.max_new_tokens is None:
            object.__setattr__(self, "max_new_tokens", task.default_max_new_tokens)
        positive = (
            "steps",
            "prompts_per_step",
            "group_size",
            "max_new_tokens",
            "num_minibatches",
            "ppo_epochs",
            "micro_batch_size",
            "eval_every",
            "eval_samples",
        )
        for name in positive:
            check_int(name, getattr(self, name))
        for name in ("lr", "critic_lr", "temperature"):
            value = getattr(self, name)
            if not is_number(value) or value <= 0:
                raise ValueError(f"{name} must be a number > 0, got {value!r}")
        if self.max_generated_tokens is not None and self.max_generated_tokens < 1:
            raise ValueError(f"max_generated_tokens must be ≥ 1, got {self.max_generated_tokens}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.num_minibatches > self.prompts_per_step:
            raise ValueError(
                f"num_minibatches={self.num_minibatches} exceeds prompts_per_step="
                f"{self.prompts_per_step}: minibatches are split by prompt group"
            )
        for name in ("weight_decay", "critic_weight_decay"):
            value = getattr(self, name)
            if not is_number(value) or not value >= 0:
                raise ValueError(f"{name} must be a number ≥ 0, got {value!r}")
        for name in ("save_every", "eval_size", "rollout_actors", "max_lag", "sampler_lag"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be ≥ 0, got {getattr(self, name)!r}")
        if self.max_grad_norm < 0:
            raise ValueError(
                f"max_grad_norm must be > 0 (clip the gradient's global norm to it) or 0 "
                f"(no clipping), got {self.max_grad_norm!r}"
            )
        if not task.loads_data:  # a dataset task is checked once the trainer loads it
            check_eval_size(self.eval_size, task)
        check_int("warm_max_steps", self.warm_max_steps)
        if not 0.0 <= self.warm_target <= 1.0:
            raise ValueError(f"warm_target must be in [0, 1], got {self.warm_target!r}")
        if self.think_budget is not None and self.think_budget < 1:
            raise ValueError(f"think_budget must be ≥ 1 or null, got {self.think_budget!r}")
        # build=False: a tool factory (a search index) is made when the run starts
        with_episodes(task, Episodes.of(self), build=False)
        check_tool_format(self)
        if self.think_budget is not None and task.episode_budgets is not None:
            raise ValueError(
                f"think_budget applies to one-turn tasks; task {self.task!r} runs multi-turn "
                f"episodes, whose turns have their own budget (task_options.max_turn_tokens)"
            )
        self._check_run_safety()
        check_parallel(self)
        check_tracking(self)
        if self.recipe not in RECIPES:
            raise ValueError(f"recipe={self.recipe!r} is unknown; valid: {', '.join(RECIPES)}")
        recipe = self.build_recipe()  # validates the overrides
        check_teacher(self.teacher, recipe, self.parallel)
        check_model_options(self.model, self.policy, self.rollout_engine, self.engine_options)
        check_precision(self, recipe)
        check_sampler_lag(self)
        check_reward_fields(self, recipe)
        check_group_size(self.group_size, recipe)
        check_warm_start_fields(self)
        if recipe.overlong_penalty and recipe.overlong_cache > self.max_new_tokens:
            raise ValueError(
                f"overlong_cache={recipe.overlong_cache} exceeds max_new_tokens="
                f"{self.max_new_tokens}: the soft punishment ramp must fit in the budget"
            )

    def _check_run_safety(self) -> None:
        for name in ("keep_checkpoints", "max_nonfinite_steps"):
            check_int(name, getattr(self, name))
        minutes = self.save_every_minutes
        if not is_number(minutes) or minutes < 0:
            raise ValueError(f"save_every_minutes must be a number ≥ 0, got {minutes!r}")
        if not str(self.out).strip():
            raise ValueError("out must name an output directory, got an empty string")
        check_int("sync_probe_every", self.sync_probe_every)
        budget = self.memory_budget_gib
        if budget is not None and (not is_number(budget) or not budget > 0):
            raise ValueError(f"memory_budget_gib must be a number > 0 or null, got {budget!r}")
        tol = self.sync_probe_tol
        if tol is not None and (not is_number(tol) or not tol > 0):
            raise ValueError(f"sync_probe_tol must be a number > 0 or null, got {tol!r}")
        if tol is not None and not self.sync_probe:
            raise ValueError(
                f"sync_probe_tol={tol} is the weight-sync probe's limit, and sync_probe=false "
                f"turns the probe off; remove one of them"
            )

    def build_recipe(self) -> Recipe:
        return get_recipe(self.recipe, **self.overrides)

    def to_dict(self) -> dict[str, Any]:
        """The fully resolved config: training fields and every recipe field, flat."""
        data = asdict(self)
        data.pop("overrides")
        recipe = asdict(self.build_recipe())
        recipe.pop("name")
        recipe.pop("source")
        return {**data, **recipe}


TRAIN_KEYS = {f.name for f in fields(TrainConfig)} - {"overrides"}
RECIPE_KEYS = set(recipe_fields()) - {"name", "source"}


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads `1e-4` as a string; users mean a float, as YAML 1.2 and Python do."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def read_yaml(text: str) -> Any:
    """Parse YAML with exponent floats (1e-4) read as floats."""
    return yaml.load(text, Loader=_Loader)


def config_flags() -> dict[str, tuple[str, str, Any]]:
    """Scalar config fields → (type, doc, default): what `rlvr train` offers as flags. The
    type is "bool", "str", "int" or "float" (the last two parsed as YAML, as --set is)."""
    out = {}
    for f in fields(TrainConfig):
        names = {n.strip() for n in str(f.type).split("|")} - {"None"}
        if names <= {"int", "float", "str", "bool"} and f.name != "overrides":
            kind = next(iter(names)) if len(names) == 1 else "float"
            out[f.name] = (kind, f.metadata.get("doc", ""), f.default)
    return out


def config_docs() -> dict[str, str]:
    return {f.name: f.metadata.get("doc", "") for f in fields(TrainConfig) if f.name != "overrides"}


def parse_value(text: str) -> Any:
    """A `--set` value parsed as YAML: 0.3 → float, true → bool, null → None, abc → 'abc'."""
    return read_yaml(text) if text.strip() else ""


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one `key=value` or `dotted.key=value` override to a nested dict, in place."""
    if "=" not in assignment:
        raise ValueError(f"--set expects KEY=VALUE, got {assignment!r}")
    key, text = assignment.split("=", 1)
    parts = key.strip().split(".")
    target = data
    for part in parts[:-1]:
        target = target.setdefault(part, {})
        if not isinstance(target, dict):
            raise ValueError(f"--set {key}: {part!r} is not a mapping")
    try:
        target[parts[-1]] = parse_value(text)
    except yaml.YAMLError:  # e.g. ops=* (an alias to YAML): the user meant a string
        raise ValueError(
            f"--set {key.strip()}={text}: {text!r} cannot be read as a YAML value; quote it "
            f"as a string: --set '{key.strip()}=\"{text}\"'"
        ) from None


def resolve_config(
    base: dict[str, Any] | None = None, sets: list[str] | None = None, **explicit: Any
) -> TrainConfig:
    """Merge a YAML dict, `--set` overrides and explicit values (in that order of priority,
    lowest first) into a validated `TrainConfig`. Unknown keys are rejected by name."""
    data = dict(base or {})
    for assignment in sets or []:
        apply_override(data, assignment)
    data.update({k: v for k, v in explicit.items() if v is not None})
    unknown = sorted(set(data) - TRAIN_KEYS - RECIPE_KEYS)
    if unknown:
        raise ValueError(
            f"unknown config key(s): {', '.join(unknown)}; valid training keys: "
            f"{', '.join(sorted(TRAIN_KEYS))}; recipe fields: see `rlvr recipes --fields`"
        )
    recipe_name = data.get("recipe", "grpo")
    base_recipe = RECIPES.get(recipe_name)
    overrides = {}
    for key in RECIPE_KEYS & set(data):
        value = data.pop(key)
        # A resolved config.yaml repeats every recipe field; only differences are overrides.
        if base_recipe is None or getattr(base_recipe, key) != value:
            overrides[key] = value
    try:
        return TrainConfig(**data, overrides=overrides)
    except TypeError as err:
        raise ValueError(f"invalid config: {err}") from None


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file; errors name the file."""
    try:
        data = read_yaml(Path(path).read_text()) or {}
    except OSError as err:
        raise ValueError(f"config file {str(path)!r}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ValueError(f"config file {str(path)!r} is not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(
            f"config file {str(path)!r} must hold a mapping, got {type(data).__name__}"
        )
    return data
