"""On-policy distillation written against rlvr's local training service: the student
samples → a teacher scores the student's exact tokens (compute_logprobs) → per-token
advantages → forward_backward("importance_sampling") → optim_step → fresh sampler.

OPD (Agarwal et al. 2024, GKD, arXiv 2306.13649, reverse KL; Thinking Machines 2025):
A_t = −β·(log π_S(y_t | x, y_<t) − log π_T(y_t | x, y_<t)), log π_S the sampler's. No
reward trains; the teacher reads the student's prompt ids; the loss is the service's sum
with A_t/Σ|y_i| as advantages, i.e. rlvr's `opd` recipe (token_mean). docs/service.md.
Run: `python examples/service_opd.py --teacher runs/demo/checkpoint/policy` (after `make
demo`) or `--fast` (a self-teacher: a second, frozen copy of the base, so A_t starts at 0).
"""

from __future__ import annotations

import argparse

from rlvr.service import AdamParams, Datum, ModelInput, SamplingParams, ServiceClient
from rlvr.service.sampling import SamplingClient
from rlvr.tasks import Problem, Task, make_task


def teacher_input(teacher_prompt: list[int], tokens: list[int]) -> ModelInput:
    """The teacher's prompt, then the student's sampled ids as they are (never re-encoded)."""
    return ModelInput.from_ints(teacher_prompt + tokens)


def teacher_logprobs(
    teacher: SamplingClient, teacher_prompt: list[int], tokens: list[int]
) -> list[float]:
    """log π_T(y_t | x, y_<t) of each sampled token: the last |y| of compute_logprobs."""
    scored = teacher.compute_logprobs(teacher_input(teacher_prompt, tokens)).result()
    return scored[len(teacher_prompt) :]


def opd_advantages(student: list[float], teacher: list[float], beta: float) -> list[float]:
    """A_t = −β·(log π_S − log π_T), token by token (lengths must agree)."""
    return [-beta * (s - t) for s, t in zip(student, teacher, strict=True)]


def make_datum(
    prompt: list[int], tokens: list[int], logprobs: list[float], adv: list[float]
) -> Datum:
    """Shifted by one (position i predicts target_tokens[i]); prompt positions carry 0."""
    full, pad = prompt + tokens, [0.0] * (len(prompt) - 1)
    inputs = {"target_tokens": full[1:], "logprobs": pad + logprobs, "advantages": pad + adv}
    return Datum(model_input=ModelInput.from_ints(full[:-1]), loss_fn_inputs=inputs)


def accuracy(sampler: SamplingClient, task: Task, problems: list[Problem], k: int = 4) -> float:
    """eval/accuracy: mean correctness of k draws per problem at temperature 1 (seeded)."""
    params = SamplingParams(max_tokens=17, temperature=1.0, seed=0)
    tokenizer, correct = sampler.get_tokenizer(), []
    for problem in problems:
        prompt = ModelInput.from_ints(tokenizer.encode(problem.prompt))
        for seq in sampler.sample(prompt, k, params).result().sequences:
            correct.append(float(task.verify(problem, tokenizer.decode(seq.tokens)).correct))
    return sum(correct) / len(correct)


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", help="a saved model directory (runs/demo/checkpoint/policy)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step")
    parser.add_argument("--group", type=int, default=4, help="samples per prompt")
    parser.add_argument("--beta", type=float, default=1.0, help="β, the teacher's weight")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--eval", type=int, default=64, help="held-out problems (× 4 samples)")
    parser.add_argument("--fast", action="store_true", help="3 steps of 2 × 4, self-teacher")
    args = parser.parse_args(argv)
    if args.fast:
        args.steps, args.prompts, args.group, args.eval = 3, 2, 4, 2
    if not args.fast and not args.teacher:
        parser.error("--teacher PATH is required (a saved model directory), or pass --fast")

    service = ServiceClient(seed=0)
    trainer = service.create_training_client("embedded:arithmetic")
    if args.teacher:
        teacher = service.create_sampling_client(args.teacher)
    else:  # never stepped, so its sampler never goes stale
        frozen = service.create_training_client("embedded:arithmetic")
        teacher = frozen.save_weights_and_get_sampling_client("teacher")
    tokenizer, task = trainer.get_tokenizer(), make_task("arithmetic")
    problems, held_out = task.problems("train"), task.problems("eval")[: args.eval]
    sampling = SamplingParams(max_tokens=17, temperature=1.0)  # T = 1: the trainer's π
    sampler = trainer.save_weights_and_get_sampling_client("step-0")
    history = {"distill/reverse_kl": [], "eval/accuracy": []}
    history["eval/accuracy"].append(accuracy(sampler, task, held_out))
    for step in range(args.steps):
        rollouts = []  # (prompt, tokens, student log-probs, teacher log-probs)
        for problem in problems[step * args.prompts : (step + 1) * args.prompts]:
            prompt = tokenizer.encode(problem.prompt)
            result = sampler.sample(ModelInput.from_ints(prompt), args.group, sampling).result()
            for seq in result.sequences:
                scored = teacher_logprobs(teacher, prompt, seq.tokens)
                rollouts.append((prompt, seq.tokens, seq.logprobs, scored))
        n_tokens = sum(len(r[1]) for r in rollouts)
        gaps = [s - t for r in rollouts for s, t in zip(r[2], r[3], strict=True)]
        datums = []
        for prompt, tokens, student_lp, teacher_lp in rollouts:
            adv = opd_advantages(student_lp, teacher_lp, args.beta)
            datums.append(make_datum(prompt, tokens, student_lp, [a / n_tokens for a in adv]))
        out = trainer.forward_backward(datums, loss_fn="importance_sampling").result()
        trainer.optim_step(AdamParams(learning_rate=args.lr)).result()
        sampler = trainer.save_weights_and_get_sampling_client(f"step-{step + 1}")
        history["distill/reverse_kl"].append(sum(gaps) / n_tokens)
        print(
            f"step {step}: distill/reverse_kl={history['distill/reverse_kl'][-1]:.4f} "
            f"loss:sum={out.metrics['loss:sum']:.4g}"
        )
    history["eval/accuracy"].append(accuracy(sampler, task, held_out))
    before, after = history["eval/accuracy"]
    print(f"eval/accuracy on {len(held_out)} held-out problems: {before:.3f} → {after:.3f}")
    return history


if __name__ == "__main__":
    main()
