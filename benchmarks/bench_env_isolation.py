"""What `episode.env_isolation: process` costs: the same multi-turn batches with each
episode's environment in the trainer's process (`none`) and in a forked worker of its
own (`process`, rlvr.envs.isolated), side by side (issue 26).

Workload: benchmarks/bench_episodes.py's (calculator prompts, `--prompts` × `--group`
episodes at temperature 1, each with a fresh `NudgingCalculator`, its budgets), through
`run_episodes` on the embedded model's shape (random weights, seed 0, or `--warm`). Both
settings run in one process, asked for one batch each per round, the order flipped every
round, from the same seeds: they must play the same episodes (checked: same tokens), so
the difference is the isolation's cost alone. The first batch forks a worker per episode
(a fork's cost grows with the trainer's mapped memory: `--ballast-mb` adds that much
touched host memory, standing in for a larger trainer); later batches reuse the pool's
workers and pay a pipe round trip per make, reset and step.

Printed: median ms per batch of each (and its first batch), the ratio process / none (of
the medians, and the median of per-round ratios), the overhead per episode, and the cost
of one worker alone (fork, make the environment, kill). Exits 1 if the two played
different episodes.
Run: .venv/bin/python benchmarks/bench_env_isolation.py [--rounds 7] [--ballast-mb 0]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from bench_episodes import NudgingCalculator, embedded_policy

from rlvr.envs import EpisodeBudgets
from rlvr.envs.isolated import IsolatedEnvironment, WorkerPool, isolate
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.base import encode_prompts
from rlvr.rollout.episodes import run_episodes
from rlvr.tasks import make_task

SETTINGS = ("none", "process")


def batch(engine, prompts, params, budgets, seed: int, make):
    """(seconds, response ids, episodes) of one batch whose environments `make` makes."""
    generator = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    gen = run_episodes(engine, engine.tokenizer, prompts, make, params, budgets, generator)
    return time.perf_counter() - start, gen.response_ids, len(gen.episodes)


def worker_cost(repeats: int) -> float:
    """Median seconds to fork a worker, make its environment there, and kill it."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        pool = WorkerPool(lambda problem: NudgingCalculator())
        IsolatedEnvironment(pool, None, 10.0).close()
        pool.close()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--turn-tokens", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--warm", action="store_true", help="the cached warm start")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--ballast-mb", type=int, default=0, help="extra touched host memory")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    ballast = torch.ones(args.ballast_mb * 2**18) if args.ballast_mb else None  # noqa: F841
    model, tokenizer = embedded_policy(args.warm)
    engine = HFEngine(model.eval(), tokenizer)
    texts = [p.prompt for p in make_task("calculator").problems("eval")[: args.prompts]]
    prompts = encode_prompts(tokenizer, texts)
    params = SamplingParams(group_size=args.group, max_new_tokens=args.max_new_tokens)
    budgets = EpisodeBudgets(max_turns=args.max_turns, max_turn_tokens=args.turn_tokens)
    in_process = lambda i: NudgingCalculator()  # noqa: E731
    makes = {"none": in_process, "process": isolate(in_process, budgets.env_timeout_s)}
    # The first batch forks the pool's workers (one per episode); later ones reuse them.
    first = {s: batch(engine, prompts, params, budgets, 10**6, makes[s])[0] for s in SETTINGS}
    seconds = {s: [] for s in SETTINGS}
    same = True
    for seed in range(args.rounds):
        ids = {}
        for s in SETTINGS if seed % 2 == 0 else SETTINGS[::-1]:
            took, ids[s], episodes = batch(engine, prompts, params, budgets, seed, makes[s])
            seconds[s].append(took)
        same &= torch.equal(ids["none"], ids["process"])
    report(args, seconds, first, episodes, worker_cost(20), same)
    if not same:
        raise SystemExit(1)


def report(args, seconds, first, episodes: int, worker_s: float, same: bool) -> None:
    medians = {s: statistics.median(v) for s, v in seconds.items()}
    paired = statistics.median(
        p / n for p, n in zip(seconds["process"], seconds["none"], strict=True)
    )
    held = f", +{args.ballast_mb} MiB ballast" if args.ballast_mb else ""
    print(
        f"{args.prompts} calculator prompts x {args.group} episodes, <= {args.max_turns} turns of "
        f"<= {args.turn_tokens} tokens, threads={args.threads}{held}; {args.rounds} rounds"
    )
    for s in SETTINGS:
        print(
            f"  env_isolation {s:<8} {medians[s] * 1000:8.1f} ms/batch (first batch "
            f"{first[s] * 1000:.1f} ms)"
        )
    overhead = (medians["process"] - medians["none"]) / episodes * 1000
    print(
        f"  process / none: {medians['process'] / medians['none']:.2f}x (ratio of medians), "
        f"per-round paired {paired:.2f}x; {overhead:+.2f} ms per episode; a worker forked, "
        f"made and killed: {worker_s * 1000:.1f} ms; same episodes: " + ("yes" if same else "NO")
    )


if __name__ == "__main__":
    main()
