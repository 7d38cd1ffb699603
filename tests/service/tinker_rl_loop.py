"""The tinker-cookbook's minimal RL loop, transcribed (not copied) for the local service.

It follows thinking-machines-lab/tinker-cookbook `tinker_cookbook/recipes/rl_loop.py` at
commit 9dfcc3a2cf44432d621a01005073dc6d76a1e87a: the same `tinker` calls, with the same
arguments, in the same order (ServiceClient → create_lora_training_client →
types.SamplingParams / types.AdamParams → per batch: save_weights_and_get_sampling_client →
sample futures → result → group-centred advantages → Datum(prompt.append(EncodedTextChunk),
TensorData.from_torch) → forward_backward("importance_sampling") → optim_step → results;
save_state / save_weights_for_sampler as checkpoint_utils.save_checkpoint calls them).

It imports `tinker`, so it runs only where `tinker` resolves to rlvr's drop-in:
`python -m rlvr.service.as_tinker tests/service/tinker_rl_loop.py --max-steps 2`.
What is not the SDK's is replaced by rlvr's own, as docs/service.md lists: GSM8K from
the hub → the embedded arithmetic task; the renderer (chat template, parse_response) →
the task's plain prompt and the tokenizer's decode; cookbook's grade_answer → the task's
verifier; ml_log → a list of metric dicts; chz → argparse.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path

import tinker
import torch
from tinker import types
from tinker.types.tensor_data import TensorData

from rlvr.tasks import make_task


@dataclass
class Config:
    log_path: str = "/tmp/rlvr-service/rl-loop"
    model_name: str = "embedded:arithmetic"
    base_url: str | None = None
    batch_size: int = 4
    group_size: int = 4
    learning_rate: float = 4e-5
    lora_rank: int = 32
    save_every: int = 20  # 0 = disabled
    max_tokens: int = 14
    ttl_seconds: int | None = 604800
    max_steps: int | None = None


def save_checkpoint(training_client, name, log_path, kind, loop_state, ttl_seconds) -> dict:
    """checkpoint_utils.save_checkpoint's client calls (the async pair), and its
    checkpoints.jsonl record."""

    async def save() -> dict:
        futures = {}
        if kind in ("state", "both"):
            futures["state"] = await training_client.save_state_async(name, ttl_seconds=ttl_seconds)
        if kind in ("sampler", "both"):
            futures["sampler"] = await training_client.save_weights_for_sampler_async(
                name, ttl_seconds=ttl_seconds
            )
        return {k + "_path": (await f.result_async()).path for k, f in futures.items()}

    paths = asyncio.run(save())
    with open(Path(log_path) / "checkpoints.jsonl", "a") as f:
        f.write(json.dumps({"name": name, **loop_state, **paths}) + "\n")
    return paths


def main(config: Config) -> list[dict[str, float]]:
    Path(config.log_path).mkdir(parents=True, exist_ok=True)
    logged: list[dict[str, float]] = []
    task = make_task("arithmetic")
    train_dataset = task.problems("train")
    n_train_batches = len(train_dataset) // config.batch_size

    service_client = tinker.ServiceClient(
        base_url=config.base_url, user_metadata={"recipe": "recipe_rl_loop"}
    )
    training_client = service_client.create_lora_training_client(
        base_model=config.model_name, rank=config.lora_rank
    )
    start_batch = 0
    tokenizer = training_client.get_tokenizer()  # cookbook: get_tokenizer(model_name)

    sampling_params = tinker.types.SamplingParams(max_tokens=config.max_tokens, stop=None)
    adam_params = types.AdamParams(
        learning_rate=config.learning_rate, beta1=0.9, beta2=0.95, eps=1e-8
    )

    for batch_idx in range(start_batch, n_train_batches):
        if config.max_steps is not None and batch_idx >= config.max_steps:
            break
        t_start = time.time()
        metrics: dict[str, float] = {"progress/batch": batch_idx, "optim/lr": config.learning_rate}
        if config.save_every > 0 and batch_idx % config.save_every == 0 and batch_idx > 0:
            save_checkpoint(
                training_client,
                f"{batch_idx:06d}",
                config.log_path,
                "state",
                {"batch": batch_idx},
                config.ttl_seconds,
            )

        batch_rows = train_dataset[
            batch_idx * config.batch_size : (batch_idx + 1) * config.batch_size
        ]
        sampling_client = training_client.save_weights_and_get_sampling_client()

        datums_D: list[types.Datum] = []
        rewards_P: list[float] = []
        futures_P, prompts_P = [], []
        for problem in batch_rows:
            model_input = types.ModelInput.from_ints(tokenizer.encode(problem.prompt))
            future = sampling_client.sample(
                prompt=model_input, num_samples=config.group_size, sampling_params=sampling_params
            )
            futures_P.append(future)
            prompts_P.append(model_input)

        for future, prompt, problem in zip(futures_P, prompts_P, batch_rows, strict=True):
            sample_result = future.result()
            rewards_G, sampled_tokens_G_T, logprobs_G_T = [], [], []
            for sequence in sample_result.sequences:
                assert sequence.logprobs is not None
                sampled_tokens_G_T.append(sequence.tokens)
                logprobs_G_T.append(sequence.logprobs)
                content = tokenizer.decode(sequence.tokens)
                rewards_G.append(float(task.verify(problem, content).correct))
            mean_reward = sum(rewards_G) / len(rewards_G)
            advantages_G = [reward - mean_reward for reward in rewards_G]
            rewards_P.append(mean_reward)
            if all(advantage == 0.0 for advantage in advantages_G):
                continue
            for sampled_tokens, logprobs, advantage in zip(
                sampled_tokens_G_T, logprobs_G_T, advantages_G, strict=True
            ):
                ob_len = prompt.length - 1
                model_input = prompt.append(types.EncodedTextChunk(tokens=sampled_tokens[:-1]))
                target_tokens = [0] * ob_len + sampled_tokens
                padded_logprobs = [0.0] * ob_len + logprobs
                padded_advantages = [0.0] * ob_len + [advantage] * (model_input.length - ob_len)
                assert (
                    model_input.length
                    == len(target_tokens)
                    == len(padded_logprobs)
                    == len(padded_advantages)
                )
                datums_D.append(
                    types.Datum(
                        model_input=model_input,
                        loss_fn_inputs={
                            "target_tokens": TensorData.from_torch(torch.tensor(target_tokens)),
                            "logprobs": TensorData.from_torch(torch.tensor(padded_logprobs)),
                            "advantages": TensorData.from_torch(torch.tensor(padded_advantages)),
                        },
                    )
                )

        if datums_D:
            fwd_bwd_future = training_client.forward_backward(
                datums_D, loss_fn="importance_sampling"
            )
            optim_step_future = training_client.optim_step(adam_params)
            fwd_bwd_result = fwd_bwd_future.result()
            optim_result = optim_step_future.result()
            metrics["loss:sum"] = fwd_bwd_result.metrics["loss:sum"]
            if optim_result.metrics:
                metrics.update(optim_result.metrics)
        metrics["time/total"] = time.time() - t_start
        metrics["reward/total"] = sum(rewards_P) / len(rewards_P)
        logged.append(metrics)
        print(json.dumps(metrics))

    save_checkpoint(
        training_client, "final", config.log_path, "both", {"batch": n_train_batches}, None
    )
    return logged


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--log-path", default=Config.log_path)
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=Config.batch_size)
    args = parser.parse_args()
    main(Config(log_path=args.log_path, max_steps=args.max_steps, batch_size=args.batch_size))
