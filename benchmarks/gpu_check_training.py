"""The training steps of `gpu_check.py`: one GRPO step through rlvr's own `Trainer` (full
fine-tune and LoRA, FP32 chunked LM head) with its peak memory and MFU, and the same step
data-parallel (DDP) and sharded (FSDP2) over a process group of world size 1.

The Trainer is rlvr's, unchanged, except where its policy comes from: `synthetic`
subclasses it so that `_load_policy` builds a random model at a real shape instead of
loading a checkpoint. Everything after that (policy options, LoRA, π_ref, the engine,
verification, advantages, the update) is the code a real run executes.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import torch
import torch.distributed as dist
from gpu_check_model import (
    SHAPES,
    SyntheticTokenizer,
    bf16_peak,
    build_model,
    training_flops,
)
from gpu_check_sampling import Context, peak_gib, reset_peak, synchronize

from rlvr.models.logprobs import CHUNK_VALUES
from rlvr.train import Trainer
from rlvr.train.config import TrainConfig, resolve_config
from rlvr.train.distributed.data_parallel import DataParallel

REWARD = "gpu_check_reward:parity_reward"  # importable: the script's folder is on sys.path
KEPT = ("loss/policy", "loss/kl", "train/grad_norm", "reward/mean", "train/update_skipped")
KEPT += ("train/nonfinite_skipped", "time/rollout_s", "time/train_s", "time/policy_update_s")


def synthetic(base: type[Trainer], size: str, ctx: Context) -> type[Trainer]:
    """`base` (Trainer or a data-parallel subclass) whose policy is a random model of
    `SHAPES[size]`, built on the configured device in the configured dtype, which samples
    with `ctx.generator()` (on the GPU: the CPU draw would cost the budget minutes; the
    `generate` step measures it) and keeps its last rollout batch (`last_rollout`)."""
    shape = SHAPES[size]

    class SyntheticPolicy(base):
        last_rollout = None

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.generator = ctx.generator()

        def _load_policy(self):
            device = self.cfg.policy.get("device", "cpu")
            model = build_model(shape, device, self.cfg.policy.get("dtype", "float32"), ctx.seed)
            info = {"model": size, "parameters": sum(p.numel() for p in model.parameters())}
            return model, SyntheticTokenizer(shape.vocab), info

        def _collect(self):
            collected = super()._collect()
            self.last_rollout = collected.rollout
            return collected

    return SyntheticPolicy


def grpo_config(ctx: Context, size: str, lora: bool, parallel: str = "ddp") -> TrainConfig:
    """GRPO (with its k3 KL to π_ref) on arithmetic prompts, the FP32 LM head, the stand-in
    reward, and the workload's batch."""
    work = ctx.workload
    policy: dict = {"dtype": work.dtype, "device": ctx.device}
    if lora:
        policy["lora"] = {"rank": work.lora_rank, "alpha": 2 * work.lora_rank}
    return resolve_config(
        {
            "recipe": "grpo",
            "fp32_head": True,
            "model": f"synthetic:{size}",
            "task": "arithmetic",
            "task_options": {"digits": work.digits, "ops": "+"},
            "prompts_per_step": work.prompts,
            "group_size": work.group_size,
            "max_new_tokens": work.train_new_tokens,
            "micro_batch_size": work.micro_batch_size,
            "reward_funcs": [REWARD],
            "policy": policy,
            "parallel": parallel,
            "progress": False,
            "seed": ctx.seed,
            "out": str(ctx.scratch / f"run-{size}"),
        }
    )


def trained_tokens(trainer: Trainer) -> int:
    """T of the MFU formula: the response tokens of the last batch plus each group's
    prompt once."""
    rollout = trainer.last_rollout
    prompts = {int(g): len(p) for g, p in zip(rollout.group_ids, rollout.prompt_ids, strict=True)}
    return int(rollout.loss_mask.sum()) + sum(prompts.values())


def _short_warmup(trainer: Trainer) -> None:
    """One step with 8-token responses: kernels picked and memory pools grown before the
    measured step, at a fraction of its cost."""
    params = trainer.params
    trainer.params = replace(params, max_new_tokens=min(8, params.max_new_tokens))
    try:
        trainer.train_step()
    finally:
        trainer.params = params


def _step_result(ctx: Context, trainer: Trainer, size: str, lora: bool, metrics: dict) -> dict:
    shape = SHAPES[size]
    tokens = trained_tokens(trainer)
    flops = training_flops(shape, tokens, lora)
    update_s = metrics["time/policy_update_s"]
    result = {k: metrics[k] for k in KEPT if k in metrics}
    result.update(
        dtype=str(trainer.model.get_input_embeddings().weight.dtype).removeprefix("torch."),
        parameters=sum(p.numel() for p in trainer.model.parameters()),
        trainable_parameters=sum(p.numel() for p in trainer.model.parameters() if p.requires_grad),
        rows=len(trainer.last_rollout),
        micro_batch_size=ctx.workload.micro_batch_size,
        head_chunk_positions=max(1, CHUNK_VALUES // shape.vocab),  # of the chunked LM head
        trained_tokens=tokens,
        update_flops=flops,
        update_tflops_per_s=flops / update_s / 1e12,
        peak_gpu_gib=peak_gib(ctx.device),
    )
    if ctx.device.startswith("cuda"):
        peak = bf16_peak(torch.cuda.get_device_name())
        result["mfu"] = None if peak is None else flops / update_s / peak
    return result


def grpo(ctx: Context, size: str, lora: bool) -> dict:
    """One measured GRPO step (after a short warm-up step) of the in-process Trainer."""
    trainer = synthetic(Trainer, size, ctx)(grpo_config(ctx, size, lora))
    _short_warmup(trainer)
    reset_peak(ctx.device)
    synchronize(ctx.device)
    started = time.perf_counter()
    metrics = trainer.train_step()
    synchronize(ctx.device)
    result = _step_result(ctx, trainer, size, lora, metrics)
    result["step_s"] = time.perf_counter() - started
    if not math.isfinite(result["loss/policy"]):
        raise RuntimeError(f"the GRPO loss is not finite: {result}")
    return result


def _single_process_grad_norm(ctx: Context, size: str) -> float:
    trainer = synthetic(Trainer, size, ctx)(grpo_config(ctx, size, lora=False))
    return trainer.train_step()["train/grad_norm"]


def data_parallel(ctx: Context, size: str, mode: str) -> dict:
    """One GRPO step of rlvr's data-parallel trainer (`mode` 'ddp') or sharded trainer
    ('fsdp') over an in-process group of world size 1 (NCCL on a GPU, gloo on a CPU),
    and the gradient norm of the same first step in a single process, which it must
    equal up to float rounding (one rank sums nothing)."""
    from rlvr.train.distributed.ddp import DataParallelTrainer
    from rlvr.train.distributed.sharded import ShardedTrainer

    # A smoke test of the collectives, not a benchmark: a small batch.
    work = ctx.workload
    small = replace(
        work, prompts=min(work.prompts, 4), train_new_tokens=min(work.train_new_tokens, 32)
    )
    ctx = replace(ctx, workload=small)
    backend = "nccl" if ctx.device.startswith("cuda") else "gloo"
    if dist.is_initialized():
        raise RuntimeError("a process group is already initialised")
    if backend == "nccl":
        torch.cuda.set_device(torch.device(ctx.device).index or 0)
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        # As `rlvr.train.distributed.ranks.data_parallel_trainer` picks them, with a synthetic policy.
        base = ShardedTrainer if mode == "fsdp" else DataParallelTrainer
        group = DataParallel(0, 1, sharded=mode == "fsdp")
        trainer = synthetic(base, size, ctx)(grpo_config(ctx, size, False, mode), group)
        reset_peak(ctx.device)
        metrics = trainer.train_step()
        synchronize(ctx.device)
        peak = peak_gib(ctx.device)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    single = _single_process_grad_norm(ctx, size)
    norm = metrics["train/grad_norm"]
    return {
        "backend": backend,
        "world_size": 1,
        "trainer": base.__name__,
        **{k: metrics[k] for k in KEPT if k in metrics},
        "single_process_grad_norm": single,
        "grad_norm_rel_diff": abs(norm - single) / max(abs(single), 1e-12),
        "peak_gpu_gib": peak,
    }
