"""GRPO written against rlvr's local training service, the way one writes it for a remote
training API (Tinker / PyTRIO): sample → reward → group-normalised advantages →
forward_backward("importance_sampling") → optim_step → fresh sampler. docs/service.md.

Departures from GRPO (arXiv 2402.03300): no KL term, one update per batch (ratio = 1 up to
float error, so no clipping is needed), and the loss is the service's plain sum over tokens
with Â_i/(N·|y_i|) as advantages, i.e. GRPO's per-response token mean, averaged.
Run: `python examples/service_grpo.py [--fast]` (CPU, embedded arithmetic model).
"""

from __future__ import annotations

import argparse

from rlvr.service import AdamParams, Datum, ModelInput, SamplingParams, ServiceClient
from rlvr.tasks import make_task


def group_advantages(rewards: list[float]) -> list[float]:
    """Â_i = (r_i − mean) / (std + 1e-6) within one prompt's group (0 if all equal)."""
    mean = sum(rewards) / len(rewards)
    std = (sum((r - mean) ** 2 for r in rewards) / max(len(rewards) - 1, 1)) ** 0.5
    return [(r - mean) / (std + 1e-6) for r in rewards]


def make_datum(prompt: list[int], tokens: list[int], logprobs: list[float], adv: float) -> Datum:
    """Shifted by one: position i of model_input predicts target_tokens[i]; prompt
    positions carry advantage 0, so they add nothing to the loss."""
    full = prompt + tokens
    pad = [0.0] * (len(prompt) - 1)
    return Datum(
        model_input=ModelInput.from_ints(full[:-1]),
        loss_fn_inputs={
            "target_tokens": full[1:],
            "logprobs": pad + logprobs,
            "advantages": pad + [adv] * len(tokens),
        },
    )


def main(argv: list[str] | None = None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step")
    parser.add_argument("--group", type=int, default=8, help="samples per prompt (G)")
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--lora-rank", type=int, default=0, help="0: full fine-tune")
    parser.add_argument("--fast", action="store_true", help="3 steps of 2 × 4 (a smoke test)")
    args = parser.parse_args(argv)
    if args.fast:
        args.steps, args.prompts, args.group = 3, 2, 4

    service = ServiceClient(seed=0)
    if args.lora_rank:
        trainer = service.create_lora_training_client("embedded:arithmetic", rank=args.lora_rank)
    else:
        trainer = service.create_training_client("embedded:arithmetic")
    tokenizer = trainer.get_tokenizer()
    task = make_task("arithmetic")
    problems = task.problems("train")
    sampling = SamplingParams(max_tokens=17, temperature=1.0)
    sampler = trainer.save_weights_and_get_sampling_client("step-0")
    accuracies = []
    for step in range(args.steps):
        batch = problems[step * args.prompts : (step + 1) * args.prompts]
        datums, correct = [], []
        for problem in batch:
            prompt = tokenizer.encode(problem.prompt)
            result = sampler.sample(ModelInput.from_ints(prompt), args.group, sampling).result()
            rewards = []
            for seq in result.sequences:
                verdict = task.verify(problem, tokenizer.decode(seq.tokens))
                rewards.append(float(verdict.correct))
            correct += rewards
            n_seq = args.prompts * args.group
            for seq, adv in zip(result.sequences, group_advantages(rewards), strict=True):
                scaled = adv / (n_seq * len(seq.tokens))  # GRPO's 1/(N·|y_i|) in the sum
                datums.append(make_datum(prompt, seq.tokens, seq.logprobs, scaled))
        out = trainer.forward_backward(datums, loss_fn="importance_sampling").result()
        trainer.optim_step(AdamParams(learning_rate=args.lr)).result()
        sampler = trainer.save_weights_and_get_sampling_client(f"step-{step + 1}")
        accuracies.append(sum(correct) / len(correct))
        print(
            f"step {step}: reward/accuracy={accuracies[-1]:.3f} loss:sum={out.metrics['loss:sum']:.4g}"
        )
    return accuracies


if __name__ == "__main__":
    main()
