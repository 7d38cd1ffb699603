"""The one training loop. Every recipe runs through it; it calls what the recipe holds.

    sample groups → verify → select/shape → advantages → policy (and critic) updates → log

The loop never branches on a recipe's name. Held-out evaluation runs before the first
step, every `eval_every` steps and after the last.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from rlvr.algo import PreparedBatch, prepare_batch
from rlvr.algo.advantages.gae import gae
from rlvr.algo.advantages.token_advantages import outcome_token_rewards
from rlvr.algo.entropy_control import adaptive_entropy
from rlvr.algo.objective import rejection_on
from rlvr.eval import evaluate_policy
from rlvr.models import response_logprobs
from rlvr.models.context import check_context, context_length
from rlvr.models.hf_policy import reference_policy
from rlvr.models.modes import dropout_off
from rlvr.models.precision import autocast, model_device
from rlvr.models.value import ValueModel
from rlvr.parts import (
    Episodes,
    dress_policy,
    interrupted,
    longest_prompt,
    make_engine,
    with_episodes,
)
from rlvr.rewards import attach_rewards
from rlvr.rollout import SamplingParams
from rlvr.tasks import make_task
from rlvr.train.allocation import keep_freed_pages, policy_adamw
from rlvr.train.checkpoints.rng_state import load_rng_state, rng_state
from rlvr.train.collect import (
    Collected,
    collect_rollouts,
    sample_groups,
    without_failed_groups,
)
from rlvr.train.config import TrainConfig, check_eval_size
from rlvr.train.config_checks import warn_overlong_budget
from rlvr.train.critic import critic_optimizer, critic_update, critic_values, explained_variance
from rlvr.train.memory_budget import activation_budget
from rlvr.train.prompt_pool import PromptPool
from rlvr.train.records.rollout_record import Rollout
from rlvr.train.records.step_metrics import step_metrics
from rlvr.train.sampler.lag import find_lagged, lagged_engine
from rlvr.train.sampler.precision import check_device, probe_tolerance, sampling_engine
from rlvr.train.sampler.sync_probe import make_sync_probe
from rlvr.train.teacher_model import load_teacher, rollout_turn_ids, teacher_metrics
from rlvr.train.update import UpdateSettings, minibatch_rows, policy_update
from rlvr.warmstart import load_policy

EVAL_SEED_OFFSET = 1_000_003
PRETRAIN_SEED_OFFSET = 2_000_003
MINIBATCH_SEED_OFFSET = 3_000_017


class Trainer:
    """Holds the run's state in a few explicit objects (model, optimizers, pool, RNG)."""

    data_parallel = None  # this rank's DataParallel under torchrun (rlvr/train/distributed/ddp.py)

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self.recipe = cfg.build_recipe()
        torch.manual_seed(cfg.seed)
        self.task = make_task(cfg.task, **cfg.task_options)
        check_eval_size(cfg.eval_size, self.task)  # reads a dataset's splits: before the model
        self.model, self.tokenizer, self.model_info = self._load_policy()
        check_device(cfg, model_device(self.model))  # bf16 where it is emulated: refused
        keep_freed_pages(model_device(self.model))  # on a CPU, a step's freed buffers reused
        # The teacher's template fills {prompt} with the prompt before any chat template.
        teacher_problems = self.task.problems("train") if cfg.teacher else []
        self.model, self.task = self._dress(self.model, self.task)
        # Every RL forward (sampling, π_old, π_ref, V, and the training forwards of policy
        # and critic) runs with dropout off; gradients still flow. With dropout on, two
        # forwards of the same weights differ, so ratios, clip fractions and KL would
        # measure dropout noise.
        dropout_off(self.model)
        self.engine = self._make_engine(self.model)
        self.sync_probe = make_sync_probe(cfg, self.task, self.tokenizer, self.model)
        probe_tolerance(self.sync_probe, cfg)  # bf16 on either side: bf16's noise floor
        self.optimizer = self._policy_optimizer()
        self.entropy_control = adaptive_entropy(self.recipe)  # None: a static entropy_coef
        self.reference = self._frozen_copy() if self.recipe.needs_reference else None
        self.teacher = (
            load_teacher(cfg, self.tokenizer, teacher_problems, self._frozen_student, self.model)
            if cfg.teacher
            else None
        )
        self.teacher_s = 0.0
        self.critic = ValueModel.from_policy(self.model) if self.recipe.needs_critic else None
        if self.critic is not None:
            dropout_off(self.critic)  # as for the policy
        self.critic_optimizer = (
            critic_optimizer(self.critic, cfg.critic_lr, cfg.critic_weight_decay)
            if self.critic
            else None
        )
        self.pool = PromptPool(self.task.problems("train"), cfg.seed, self.recipe.retire_threshold)
        self.generator = torch.Generator().manual_seed(cfg.seed)
        # Reshuffles the minibatches of every PPO epoch (policy and critic); its own stream,
        # so the sampling above draws the same numbers whatever num_minibatches is.
        self.minibatch_generator = torch.Generator().manual_seed(cfg.seed + MINIBATCH_SEED_OFFSET)
        eval_split = self.task.problems("eval")
        self.eval_problems = eval_split[: cfg.eval_size] if cfg.eval_size else eval_split
        self.params = SamplingParams(cfg.group_size, cfg.temperature, cfg.top_p, cfg.max_new_tokens)
        self.settings = UpdateSettings(
            cfg.num_minibatches,
            cfg.ppo_epochs,
            cfg.micro_batch_size,
            cfg.max_grad_norm,
            cfg.max_new_tokens,
            cfg.temperature,
            self.tokenizer.pad_token_id,
            precision=cfg.precision,
            activation_bytes=None
            if cfg.memory_budget_gib is None
            else activation_budget(
                cfg.memory_budget_gib,
                self.model,
                # a frozen copy is a module; LoRA's adapter-disabled view holds no weights
                reference_copy=isinstance(self.reference, torch.nn.Module),
                precision=cfg.precision,
            ),
        )
        self.step = 0
        warn_overlong_budget(self.recipe, cfg.max_new_tokens, self.tokenizer, self.pool.problems)

    def _make_engine(self, model: torch.nn.Module) -> Any:
        """The rollout engine sampling from `model`, from its bf16 copy (`sampler_precision`)
        or from a copy `sampler_lag` updates behind, wrapped for forced interruption."""
        cfg = self.cfg
        make = lambda m: make_engine(  # noqa: E731
            m, self.tokenizer, cfg.rollout_engine, cfg.engine_options, self.recipe.fp32_head
        )
        precisions = (cfg.precision, cfg.sampler_precision)
        if cfg.sampler_lag:
            engine = lagged_engine(make, model, *precisions, cfg.sampler_lag)
        else:
            engine = sampling_engine(make, model, *precisions)
        return interrupted(engine, self.tokenizer, cfg, cfg.max_new_tokens)

    def _dress(self, model: torch.nn.Module, task: Any) -> tuple[torch.nn.Module, Any]:
        """The policy and the task with the run's parts (`rlvr.parts`): its environment or
        tools, its policy options and chat template (declaring the tools), and its rewards;
        a response budget that cannot fit the context is refused before any generation."""
        cfg = self.cfg
        task = with_episodes(task, Episodes.of(cfg))
        model, extra = dress_policy(model, self.tokenizer, task, cfg.model, cfg.policy)
        self.model_info.update(extra)
        attach_rewards(
            task, cfg.reward_funcs, cfg.reward_timeout_s, cfg.reward_errors, cfg.reward_isolation
        )
        longest = longest_prompt(task, self.tokenizer)
        check_context(cfg.max_new_tokens, context_length(model), longest)
        return model, task

    @property
    def full_policy(self) -> torch.nn.Module:
        """The policy as one module with all its weights: what checkpoints save and load
        and the finiteness checks read (under FSDP, rank 0's unsharded copy)."""
        return self.model

    def _load_policy(self):
        cfg = self.cfg
        warm = {}
        if cfg.model == "embedded":
            warm = {
                "target_accuracy": cfg.warm_target,
                "max_steps": cfg.warm_max_steps,
                "progress": cfg.progress,
            }
        model, tokenizer, info = load_policy(
            cfg.model, cfg.task, cfg.task_options, cfg.warm_seed, **warm
        )
        if info.get("reached_target") is False:
            warnings.warn(
                f"the embedded warm start on {cfg.task!r} stopped after {info['steps']} steps "
                f"at dev accuracy {info['dev_accuracy']:.2f} < warm_target {cfg.warm_target}: "
                f"with few correct samples most groups carry no signal; try an easier "
                f"task_options setting or a lower warm_target",
                stacklevel=2,
            )
        return model, tokenizer, info

    def _frozen_copy(self) -> torch.nn.Module:
        return reference_policy(self.model)  # LoRA: the policy with adapters disabled

    def _frozen_student(self) -> torch.nn.Module:
        """The step-0 student for a teacher "self": π_ref's module when the run has one."""
        return self.reference if self.reference is not None else self._frozen_copy()

    @property
    def on_policy(self) -> bool:
        """One optimizer step per rollout batch: π_old is the policy being differentiated."""
        return self.cfg.num_minibatches == 1 and self.cfg.ppo_epochs == 1

    def _logprobs(self, model: torch.nn.Module, rollout: Rollout) -> torch.Tensor:
        """log π (B, T) of every row under `model`, without gradient, micro-batched."""
        pad, temperature, fp32 = (
            self.tokenizer.pad_token_id,
            self.cfg.temperature,
            self.recipe.fp32_head,
        )
        with autocast(self.cfg.precision, model_device(model)):  # π_old in the trainer's precision
            return rollout.forward_rows(
                lambda p, r, m: response_logprobs(model, p, r, m, pad, temperature, fp32),
                self.cfg.micro_batch_size,
            )

    def _annotate(self, rollout: Rollout) -> None:
        """Add π_old, π_ref, V_old and the teacher's log π_T to the rollout, each computed
        once before any update."""
        # A rejection compares π_old with the sampler before the advantages (as verl).
        if not self.on_policy or rejection_on(self.recipe):
            rollout.old_logprobs = self._logprobs(self.model, rollout)
        if self.reference is not None:
            rollout.ref_logprobs = self._logprobs(self.reference, rollout)
            if rollout.old_logprobs is None and self.recipe.kl_in_reward:
                rollout.old_logprobs = self._logprobs(self.model, rollout)
        if self.critic is not None:
            rollout.values = critic_values(
                self.critic,
                rollout,
                self.tokenizer.pad_token_id,
                self.cfg.micro_batch_size,
                self.cfg.precision,
            )
        if self.teacher is not None:
            if rollout.old_logprobs is None:  # log π_S of the teacher's term
                rollout.old_logprobs = self._logprobs(self.model, rollout)
            started = time.perf_counter()
            rollout.teacher_logprobs = self.teacher.logprobs(rollout, self._logprobs)
            self.teacher_s = time.perf_counter() - started

    def train_step(self) -> dict[str, float]:
        """Collect one rollout batch and update on it; returns the step's metrics."""
        # The last step's gradients (kept after it for whoever inspects them) are freed
        # before this rollout, not at this update's first backward: on a CPU they would
        # sit among the rollout's and π_ref forward's buffers (SmolLM2-135M: 0.5 GB in 272
        # pieces), and glibc's heap grew around them step after step.
        self.optimizer.zero_grad(set_to_none=True)
        if self.sync_probe is not None and not self.sync_probe.started:
            self.sync_probe.started = True  # before the first step this process takes
            self._probe_sync(f"before step {self.step + 1}")
        collected = self._collect()
        rollout = collected.rollout
        started = time.perf_counter()
        prepared = None if rollout is None else self._prepare(rollout)
        metrics = step_metrics(collected, prepared, self.cfg.prompts_per_step)
        if (lagged := find_lagged(self.engine)) is not None:  # versions behind, as async logs it
            metrics["async/lag_mean"] = metrics["async/lag_max"] = float(lagged.version_lag)
        self.last_batch = (collected, prepared)  # the completions table reads what was used
        if rollout is not None and rollout.teacher_logprobs is not None:
            metrics.update(teacher_metrics(rollout, self.teacher_s))
        metrics["train/update_skipped"] = 1.0
        if prepared is None or not prepared.keep.any():  # e.g. every group had zero reward variance
            return metrics
        metrics["train/update_skipped"] = 0.0
        coef = None if self.entropy_control is None else self.entropy_control.applied_coef()
        metrics.update(
            policy_update(
                self.model,
                self.optimizer,
                self.recipe,
                rollout,
                prepared,
                self.settings,
                self.minibatch_generator,
                self.data_parallel,
                entropy_coef=coef,
            )
        )
        if coef is not None:  # adaptive entropy: c_{k+1} from the H_k that is logged
            metrics["loss/entropy_coef"] = coef
            self.entropy_control = self.entropy_control.update(metrics["policy/entropy"])
        self.engine.sync_weights()
        if self.sync_probe is not None and self.sync_probe.due(self.step + 1):
            metrics.update(self._probe_sync(f"after the weight sync of step {self.step + 1}"))
        if self.critic is not None:
            metrics.update(
                self._critic_steps(rollout, prepared.returns, prepared.response_mask, prepared.keep)
            )
        # Everything after sampling: π_old/π_ref/V forwards, advantages, policy and critic updates.
        metrics["time/train_s"] = time.perf_counter() - started
        return metrics

    def _probe_sync(self, when: str) -> dict[str, float]:
        """The weight-sync probe (rlvr/train/sampler/sync_probe.py): its metrics, {} when off; a
        gap above its tolerance stops the run naming `when`."""
        if self.sync_probe is not None and self.data_parallel is not None:
            warnings.warn(
                "sync_probe is not run under torchrun yet (the rollout copy is synced after "
                "the shared step); set sync_probe: false to silence this",
                stacklevel=2,
            )
            self.sync_probe = None
        if self.sync_probe is not None and not callable(getattr(self.engine, "score_ids", None)):
            warnings.warn(
                f"sync_probe is off: the rollout engine {type(self.engine).__name__} cannot "
                "score given tokens (it has no score_ids); set sync_probe: false to silence this",
                stacklevel=2,
            )
            self.sync_probe = None
        if self.sync_probe is None:
            return {}
        pad, fp32 = self.tokenizer.pad_token_id, self.recipe.fp32_head
        with autocast(self.cfg.precision, model_device(self.model)):  # the trainer's side
            return self.sync_probe.check(self.engine, self.model, pad, fp32, when)

    def _policy_optimizer(self) -> torch.optim.AdamW:
        """AdamW over the policy's parameters as they are now (a sharded trainer rebuilds it
        over the shards), its state allocated now on a CPU (`rlvr.train.allocation`)."""
        return policy_adamw(self.model, self.cfg.lr, self.cfg.weight_decay)

    def _collect(self) -> Collected:
        """One step's rollout batch, its rounds made by `_rounds()`."""
        return collect_rollouts(
            self.engine,
            self.task,
            self.pool,
            self.recipe,
            self.params,
            self.cfg.prompts_per_step,
            self.generator,
            sample=self._rounds(),
        )

    def _rounds(self) -> Callable[[int], Rollout] | None:
        """What makes one round of verified groups: None, this process samples them (the
        asynchronous trainer takes them from rollout actors)."""
        return None

    def _prepare(self, rollout: Rollout) -> PreparedBatch:
        """π_old, π_ref and V of the rows, then the recipe's selection, shaping and advantages."""
        self._annotate(rollout)
        return prepare_batch(
            self.recipe,
            rewards=rollout.rewards,
            correct=rollout.correct,
            truncated=rollout.truncated,
            response_mask=rollout.loss_mask,
            group_ids=rollout.group_ids,
            max_new_tokens=self.cfg.max_new_tokens,
            old_logprobs=rollout.old_logprobs,
            ref_logprobs=rollout.ref_logprobs,
            values=rollout.values,
            teacher_logprobs=rollout.teacher_logprobs,
            lengths=rollout.lengths,  # the inserted phrase counts toward L_max, so the ramp too
            sampler_logprobs=rollout.sampler_logprobs,  # for rejection (rollout correction)
            turn_ids=rollout_turn_ids(rollout),  # agent turns, for AgentOPSD's turn credit
        )

    def _critic_steps(self, rollout, returns, mask, keep) -> dict[str, float]:
        losses = []
        for _ in range(self.cfg.ppo_epochs):
            minibatches = minibatch_rows(
                rollout.group_ids, keep, self.cfg.num_minibatches, self.minibatch_generator
            )
            for rows in minibatches:
                losses.append(
                    critic_update(
                        self.critic,
                        self.critic_optimizer,
                        rollout,
                        returns,
                        mask,
                        rows,
                        clip_range=self.recipe.value_clip,
                        pad_id=self.tokenizer.pad_token_id,
                        micro_batch_size=self.cfg.micro_batch_size,
                        max_grad_norm=self.cfg.max_grad_norm,
                        precision=self.cfg.precision,
                    )
                )
        explained = explained_variance(rollout.values, returns, mask)
        return {"loss/value": sum(losses) / max(len(losses), 1), "critic/explained_var": explained}

    def pretrain_critic(self) -> list[dict[str, float]]:
        """VAPO §4.1 value pre-training: fit V to Monte-Carlo returns (λ = 1) of rollouts from
        the initial policy, before any policy update. The policy is not touched. Its prompts
        and samples come from a separately seeded pool and generator, so the RL steps that
        follow see the same data as every other recipe run with the same seed."""
        pool = PromptPool(self.task.problems("train"), self.cfg.seed + PRETRAIN_SEED_OFFSET)
        generator = torch.Generator().manual_seed(self.cfg.seed + PRETRAIN_SEED_OFFSET)
        history = []
        for _ in range(self.recipe.value_pretrain_steps):
            started = time.perf_counter()
            rollout = sample_groups(
                self.engine,
                self.task,
                pool.next(self.cfg.prompts_per_step),
                self.params,
                generator,
                group_offset=0,
            )
            cost = {
                "rollout/generated_tokens": float(rollout.loss_mask.sum()),
                "time/rollout_s": time.perf_counter() - started,
            }
            rollout = without_failed_groups(rollout, self.task)  # as the RL steps do
            if not len(rollout):
                history.append(cost)
                continue
            rollout.values = critic_values(
                self.critic,
                rollout,
                self.tokenizer.pad_token_id,
                self.cfg.micro_batch_size,
                self.cfg.precision,
            )
            mask = rollout.loss_mask
            rewards = outcome_token_rewards(rollout.rewards.double(), mask.double(), None, 0.0)
            _, returns = gae(
                rewards, rollout.values.double(), mask.double(), self.recipe.gamma, 1.0
            )
            keep = torch.ones(len(rollout), dtype=torch.bool)
            history.append({**cost, **self._critic_steps(rollout, returns.float(), mask, keep)})
        return history

    def evaluate(self) -> dict[str, float]:
        result = evaluate_policy(
            self.engine,
            self.task,
            self.eval_problems,
            samples=self.cfg.eval_samples,
            temperature=self.cfg.temperature,
            top_p=self.cfg.top_p,
            max_new_tokens=self.cfg.max_new_tokens,
            seed=self.cfg.seed + EVAL_SEED_OFFSET,
        )
        self.last_eval_items = result.item_correct
        return result.metrics

    def close(self) -> None:
        """Release what the trainer started beyond this process (the async trainer's actors)."""

    def state_dict(self) -> dict[str, Any]:
        """Everything besides the weights that the next step depends on: `step` counts the
        completed steps. Optimizers and LR schedulers are found by type, generators by
        `rng_state`, so ones added later are saved too."""
        control = self.entropy_control  # adaptive entropy: c_k and H_{k−1}
        return {
            "step": self.step,
            "optimizers": self._optimizer_states(),
            "pool": self.pool.state_dict(),
            "rng": rng_state(self),
            "last_eval_items": getattr(self, "last_eval_items", None),
            "config": self.cfg.to_dict(),
            "entropy_control": None if control is None else control.state_dict(),
            "sampler_lag": None
            if (lagged := find_lagged(self.engine)) is None
            else lagged.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict()` (weights are loaded separately, before this)."""
        self.step = int(state["step"])
        self._load_optimizer_states(state["optimizers"])
        self.pool.load_state_dict(state["pool"])
        load_rng_state(self, state["rng"])
        if state.get("last_eval_items") is not None:
            self.last_eval_items = state["last_eval_items"]
        if self.entropy_control is not None:
            self.entropy_control = self.entropy_control.with_state(state["entropy_control"])
        if (lagged := find_lagged(self.engine)) is not None:  # the caller syncs after this
            lagged.load_state_dict(state["sampler_lag"])

    def _optimizer_states(self) -> dict[str, Any]:
        """The state dicts of the optimizers and LR schedulers, by attribute name."""
        return {k: v.state_dict() for k, v in _stateful(self).items()}

    def _load_optimizer_states(self, states: dict[str, Any]) -> None:
        stateful = _stateful(self)
        missing = sorted(set(stateful) ^ set(states))
        if missing:
            raise ValueError(f"checkpoint optimizer/scheduler states do not match: {missing}")
        for key, value in states.items():
            stateful[key].load_state_dict(value)


def _stateful(trainer: Trainer) -> dict[str, Any]:
    """The trainer's optimizers and LR schedulers, by attribute name."""
    kinds = (torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler)
    return {k: v for k, v in vars(trainer).items() if isinstance(v, kinds)}
