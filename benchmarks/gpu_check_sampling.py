"""The sampling steps of `gpu_check.py`: generation throughput of rlvr's HF engine (fused
static-cache decode, the generic transformers path, the compiled decode step), the
trainer/sampler log-prob mismatch, and vLLM when it is importable.

Each step builds what it needs, returns a dict of plain numbers, and raises `Skip` when
it does not apply here; the runner times it and catches everything else.
"""

from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from gpu_check_model import (
    SHAPES,
    Skip,
    SyntheticTokenizer,
    Workload,
    build_model,
    save_hf_tokenizer,
)

from rlvr.models.logprobs import response_logprobs
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.base import Generation


@dataclass(frozen=True)
class Context:
    """What every step shares."""

    device: str
    workload: Workload
    scratch: Path
    """Where steps write (trainer run directories, vLLM's model copy)."""
    fast: bool
    seed: int = 0

    def generator(self) -> torch.Generator:
        """The steps' sampling generator, seeded: on the GPU when there is one. (The
        Trainer's lives on the CPU, so on a GPU each token copies (rows, vocab)
        probabilities to the CPU and draws there; `generate` measures that too.)"""
        device = self.device if self.device.startswith("cuda") else "cpu"
        return torch.Generator(device=device).manual_seed(self.seed)


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def peak_gib(device: str) -> float | None:
    """Peak GPU memory allocated since the last reset (GiB); None on the CPU."""
    if not device.startswith("cuda"):
        return None
    return torch.cuda.max_memory_allocated() / 2**30


def reset_peak(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()


def synthetic_prompts(count: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    """`count` prompts of `length` random non-special token ids."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(2, vocab, (count, length), generator=generator).tolist()


def mismatch_stats(
    trainer_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """How far the trainer's log-probs are from the sampler's on the sampled tokens, with
    Δ = log π_trainer − log π_sampler over the tokens of `mask` (all (B, T)):
    k1 = mean(−Δ) and k3 = mean(e^Δ − 1 − Δ) estimate KL(sampler‖trainer) from samples
    of the sampler (Schulman's estimators, http://joschu.net/blog/kl-approx.html)."""
    valid = mask > 0
    delta = (trainer_logprobs.double() - sampler_logprobs.double())[valid]
    if delta.numel() == 0:
        raise ValueError("no sampled tokens to compare")
    return {
        "tokens": int(delta.numel()),
        "k1": float((-delta).mean()),
        "k3": float((delta.exp() - 1 - delta).mean()),
        "mean_abs_delta": float(delta.abs().mean()),
        "max_abs_delta": float(delta.abs().max()),
    }


def _timed_generate(engine, prompts, params, generator, device) -> tuple[Generation, float]:
    synchronize(device)
    start = time.perf_counter()
    generation = engine.generate_ids(prompts, params, generator)
    synchronize(device)
    return generation, time.perf_counter() - start


def generate(ctx: Context, size: str, static_cache: bool = True, compile: bool = False) -> dict:
    """Tokens/s of `HFEngine.generate_ids` on `prompts × group_size` rows, after a short
    warm-up call (which is where `compile` compiles), sampling with `ctx.generator()`. On
    a GPU, also with the Trainer's CPU generator, over a quarter of the tokens."""
    shape, work = SHAPES[size], ctx.workload
    if compile and ctx.fast:
        raise Skip("--fast: compiling the decode step takes tens of seconds on a CPU")
    if (compile or not static_cache) and shape.family != "qwen2":
        raise Skip(f"{shape.family} has no fused decode: `generate` already ran the generic path")
    model = build_model(shape, ctx.device, work.dtype, ctx.seed)
    engine = HFEngine(
        model, SyntheticTokenizer(shape.vocab), static_cache=static_cache, compile=compile
    )
    path = "fused static cache" if engine._static is not None else "transformers, dynamic cache"
    prompts = synthetic_prompts(work.prompts, work.prompt_tokens, shape.vocab, ctx.seed)
    params = SamplingParams(work.group_size, max_new_tokens=work.new_tokens)
    warm = SamplingParams(work.group_size, max_new_tokens=4)
    _, warmup_s = _timed_generate(engine, prompts, warm, ctx.generator(), ctx.device)
    reset_peak(ctx.device)
    generation, seconds = _timed_generate(engine, prompts, params, ctx.generator(), ctx.device)
    tokens = int(generation.response_mask.sum())
    result = {
        "decode_path": path,
        "dtype": work.dtype,
        "rows": len(generation.prompt_ids),
        "prompt_tokens": work.prompt_tokens,
        "generated_tokens": tokens,
        "generate_s": seconds,
        "tokens_per_s": tokens / seconds,
        "sampling_generator": ctx.generator().device.type,
        "warmup_s": warmup_s,
        "peak_gpu_gib": peak_gib(ctx.device),
    }
    if ctx.device.startswith("cuda"):
        short = replace(params, max_new_tokens=max(1, work.new_tokens // 4))
        cpu = torch.Generator().manual_seed(ctx.seed)
        again, seconds = _timed_generate(engine, prompts, short, cpu, ctx.device)
        result["tokens_per_s_cpu_generator"] = float(again.response_mask.sum()) / seconds
    return result


def mismatch(ctx: Context, size: str) -> dict:
    """The trainer's log-probs (`response_logprobs`) against the sampler's on the tokens
    the sampler drew, once with the FP32 LM head and once with the head in the policy's
    dtype, in both sampler and trainer."""
    shape, work = SHAPES[size], ctx.workload
    model = build_model(shape, ctx.device, work.dtype, ctx.seed)
    tokenizer = SyntheticTokenizer(shape.vocab)
    prompts = synthetic_prompts(work.prompts, work.prompt_tokens, shape.vocab, ctx.seed)
    params = SamplingParams(work.group_size, max_new_tokens=work.new_tokens)
    result: dict = {"dtype": work.dtype}
    for fp32_head in (True, False):
        engine = HFEngine(model, tokenizer, fp32_head=fp32_head)
        generation = engine.generate_ids(prompts, params, ctx.generator())
        with torch.no_grad():
            trainer = response_logprobs(
                model,
                generation.prompt_ids,
                generation.response_ids,
                generation.response_mask,
                tokenizer.pad_token_id,
                fp32_head=fp32_head,
            )
        stats = mismatch_stats(
            trainer.float().cpu(), generation.sampler_logprobs, generation.response_mask
        )
        result["fp32_head" if fp32_head else f"{work.dtype}_head"] = stats
    return result


VLLM_OPTIONS = {
    "gpu_memory_utilization": 0.3,
    "enforce_eager": True,  # no CUDA-graph capture: minutes saved, speed understated
    "max_model_len": 2048,
}


def vllm(ctx: Context, size: str, backend_factory: str | None = None) -> dict:
    """vLLM through rlvr's `VLLMEngine`: tokens/s, the vLLM sampler's log-probs against the
    trainer's (FP32 head) on the same tokens, and one weight push (`sync_weights`).
    `backend_factory` ('module:function') replaces vLLM, as in rlvr's own tests."""
    if backend_factory is None and importlib.util.find_spec("vllm") is None:
        raise Skip("vLLM is not importable here")
    if backend_factory is None and not ctx.device.startswith("cuda"):
        raise Skip("vLLM needs a CUDA device")
    shape, work = SHAPES[size], ctx.workload
    model = build_model(shape, ctx.device, work.dtype, ctx.seed)
    tokenizer = SyntheticTokenizer(shape.vocab)
    started = time.perf_counter()
    engine = _vllm_engine(ctx, size, model, backend_factory)
    startup_s = time.perf_counter() - started
    prompts = synthetic_prompts(work.prompts, work.prompt_tokens, shape.vocab, ctx.seed)
    params = SamplingParams(work.group_size, max_new_tokens=work.new_tokens)
    warm = SamplingParams(work.group_size, max_new_tokens=4)
    _timed_generate(engine, prompts, warm, torch.Generator(), ctx.device)
    generation, seconds = _timed_generate(
        engine, prompts, params, torch.Generator().manual_seed(ctx.seed), ctx.device
    )
    with torch.no_grad():
        trainer = response_logprobs(
            model,
            generation.prompt_ids,
            generation.response_ids,
            generation.response_mask,
            tokenizer.pad_token_id,
            fp32_head=True,
        )
    started = time.perf_counter()
    engine.sync_weights()
    mask = generation.response_mask
    return {
        "startup_s": startup_s,
        "options": VLLM_OPTIONS if backend_factory is None else {"backend": backend_factory},
        "generated_tokens": int(mask.sum()),
        "tokens_per_s": float(mask.sum()) / seconds,
        "mismatch_vs_trainer_fp32_head": mismatch_stats(
            trainer.float().cpu(), generation.sampler_logprobs, mask
        ),
        "sync_weights_s": time.perf_counter() - started,
    }


def _vllm_engine(ctx: Context, size: str, model: torch.nn.Module, backend_factory: str | None):
    from rlvr.rollout.vllm_engine import VLLMEngine

    tokenizer = SyntheticTokenizer(SHAPES[size].vocab)
    if backend_factory is not None:
        return VLLMEngine.create(model, tokenizer, backend_factory=backend_factory)
    path = ctx.scratch / f"vllm-{size}"
    model.save_pretrained(path)  # vLLM loads its own copy (and a tokenizer) from a folder
    save_hf_tokenizer(SHAPES[size].vocab, str(path))
    model.config._name_or_path = str(path)
    return VLLMEngine.create(model, tokenizer, **VLLM_OPTIONS)
