"""TEMPO on the embedded household world, written against rlvr's local training service
(docs/21-tempo.md): one policy (one LoRA) is both the agent and its critic.

Each step: take saved mid-game states (or fresh games), let the agent play N segments of
H turns from each (`sample_segments`: the world rebuilt by replaying the state's actions,
the context its exact token ids); the critic, prompted with the expert walkthrough,
estimates V̂ where each segment paused; Rₙ = rₙ + V̂ₙ (rₙ = won in the segment, 0/1; an
ended game keeps rₙ), G = mean(R), Aₙ = Rₙ − G; the critic's K estimates of the start
are rewarded −|V̂ₖ − G| and mean-centred; agent rows and critic rows go into one
`forward_backward("importance_sampling")`; paused ends are saved for later steps.
Before that, a warm-up trains the critic alone on whole games' outcomes (MC: G = won).

Departures from agentic-rl-lab 09-tempo (ALFWorld, Qwen3.5-4B): H = 4 turns of games of at
most 12 (lab: 10 of 50); the tiny character-level critic writes one digit, its value in
tenths, read as ``<value>0.d</value>`` (tempo_critic.py), and sees the end of the play
that fits its 768 positions; each row's Â is divided by
(rows·|tokens|), GRPO's per-sequence mean, as examples/service_grpo.py.
Every token sampled for training (the agent's, the critic's answers) is counted;
`--max-sampled-tokens` stops the run after the step that reaches it (studies/household_credit).
Run: `python examples/tempo/household_tempo.py [--steps 20]` (CPU, a few minutes).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from collections import deque
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tempo_critic import answer_text, critic_datum, critic_params, critic_text

from rlvr.algo.advantages.tempo import (
    critic_rewards,
    endpoint_value,
    mean_centered,
    parse_value,
    segment_returns,
    value_target,
)
from rlvr.envs.household import (
    HouseholdEnvironment,
    game_from_id,
    prompt_text,
    replay,
)
from rlvr.service import AdamParams, ModelInput, SamplingParams, ServiceClient
from rlvr.service.segments import SavedState, Segment, sample_segments
from rlvr.tasks import make_task


@dataclass
class Config:
    """One TEMPO run; the lab's names in brackets."""

    steps: int = 20
    """TD steps: agent and critic trained together (--td-updates)."""
    warmup_steps: int = 3
    """MC warm-up steps: whole games, the critic alone (--warmup-updates)."""
    states: int = 4
    """Start states per step (--states-per-batch)."""
    branches: int = 4
    """N: segments from each start, the agent's group (--branches)."""
    critic_samples: int = 4
    """K: the critic's estimates of each start, its group (--critic-samples)."""
    endpoint_samples: int = 2
    """Estimates averaged into V̂ at a segment's end (--endpoint-samples)."""
    segment_turns: int = 4
    """H: turns of a segment (--macro-rounds, 10)."""
    max_steps: int = 12
    """T: commands of a game (--max-episode-steps, 50)."""
    warmup_games: int = 4
    """Games per warm-up step, each played `branches` times (--warmup-games-per-batch)."""
    store: int = 256
    """Saved states kept, oldest dropped first (--state-store-capacity)."""
    eval_games: int = 16
    """Dev games played whole before and after training (one sample each; 0: none)."""
    max_sampled_tokens: int = 0
    """Stop after the step at which the tokens sampled so far reach this (0: no budget):
    the agent's tokens in every segment and warm-up game (observations are the world's,
    not sampled) and every critic answer; evaluation games are not counted, as
    `rlvr train`'s `max_generated_tokens` does not count its evals."""
    lr: float = 1e-4
    """Adam's rate. 1e-3 trains the critic faster and breaks the agent, which shares its
    LoRA (docs/21-tempo.md, Measured)."""
    lora_rank: int = 16
    seed: int = 0
    base_model: str = "embedded:household"
    """The policy: the embedded warm start of `task_options` and `seed` (trained once,
    cached), or a local model directory, such as one cached warm start that every seed
    starts from (studies/household_credit)."""
    task_options: dict = field(default_factory=lambda: {"text": "compact"})
    """The household task's options; the embedded policy plays the compact text."""


@dataclass
class Start:
    game_id: str
    state: SavedState


class Tempo:
    """The run's pieces: the trainer, the task, the state store, its random stream."""

    def __init__(self, config: Config) -> None:
        self.config = config
        # The policy is the warm start of `task_options` (its cache key): the game length
        # is the loop's own, so it is left out of what picks the warm start.
        self.task = make_task("household", **config.task_options, max_steps=config.max_steps)
        service = ServiceClient(seed=config.seed, task_options=config.task_options)
        self.trainer = service.create_lora_training_client(
            config.base_model, rank=config.lora_rank, train_unembed=False
        )
        self.tokenizer = self.trainer.get_tokenizer()
        self.positions = self.task.embedded_model["max_positions"]
        self.games = [p.answer for p in self.task.problems("train")]
        self.rng = random.Random(config.seed)
        self.store: deque[Start] = deque(maxlen=config.store)
        self.sampler = self.trainer.save_weights_and_get_sampling_client()
        self.groups: list[dict] = []  # every TD start group's signals, for inspection
        self.sampled = 0  # tokens sampled for training so far (Config.max_sampled_tokens)

    def fresh(self) -> Start:
        """A fresh game of the train split, from its first turn."""
        game_id = self.rng.choice(self.games)
        text = prompt_text(game_from_id(game_id), compact=self.task.compact)
        return Start(game_id, SavedState(tuple(self.tokenizer.encode(text))))

    def segments(self, start: Start, turns: int, n: int, count: bool = True) -> list[Segment]:
        """`n` segments of `turns` from `start`, the world rebuilt after its actions; their
        policy tokens are added to `sampled` unless `count` is false (evaluation)."""
        game = game_from_id(start.game_id)
        room = self.positions - len(start.state.tokens) - 1
        params = SamplingParams(max_tokens=room, temperature=1.0)

        def environment(actions: tuple[str, ...]) -> HouseholdEnvironment:
            return HouseholdEnvironment(game, self.config.max_steps, compact=True, actions=actions)

        segs = sample_segments(
            self.sampler, start.state, n, params, environment, turns, self.task.episode_budgets
        )
        if count:
            self.sampled += sum(policy_tokens(s) for s in segs)
        return segs

    def estimates(self, game_id: str, state: SavedState, k: int) -> list[tuple]:
        """K estimates of a state: (prompt ids, answer ids, log-probs, V̂ or None)."""
        play = self.tokenizer.decode(list(state.tokens))
        text = critic_text(game_from_id(game_id), play, self.positions)
        prompt = self.tokenizer.encode(text)
        seqs = self.sampler.sample(ModelInput.from_ints(prompt), k, critic_params()).result()
        self.sampled += sum(len(s.tokens) for s in seqs.sequences)
        return [
            (prompt, s.tokens, s.logprobs, parse_value(answer_text(s.text))) for s in seqs.sequences
        ]

    def step(self, datums: list, loss_fn: str) -> None:
        """One update on `datums` (none: no update), then a sampler of the new weights."""
        if datums:
            self.trainer.forward_backward(datums, loss_fn=loss_fn).result()
            self.trainer.optim_step(AdamParams(learning_rate=self.config.lr)).result()
        self.sampler = self.trainer.save_weights_and_get_sampling_client()


def policy_tokens(segment: Segment) -> int:
    """Tokens the agent sampled in `segment`: its ids less the world's observations."""
    return len(segment.episode.tokens) - sum(segment.episode.observation_mask)


def won(game_id: str, state: SavedState) -> bool:
    """The game is won after the state's actions (replayed: the reward, 0/1, as the lab's)."""
    return replay(game_from_id(game_id), list(state.actions)).won()


def critic_rows(
    run: Tempo, groups: list[tuple[list[tuple], float]], rows: int
) -> tuple[list, dict]:
    """Critic datums of each (estimates, target G) group, and the critic's metrics."""
    datums, errors, parsed, count = [], [], 0, 0
    for estimates, target in groups:
        rewards, errs = critic_rewards([e[3] for e in estimates], target)
        errors += errs
        parsed += sum(e[3] is not None for e in estimates)
        count += len(estimates)
        for (prompt, tokens, logprobs, _), adv in zip(
            estimates, mean_centered(rewards), strict=True
        ):
            if adv != 0.0 and tokens:
                datums.append(critic_datum(prompt, tokens, logprobs, adv / (rows * len(tokens))))
    metrics = {
        "critic/abs_error": sum(errors) / max(len(errors), 1),
        "critic/parsed": parsed / max(count, 1),
    }
    return datums, metrics


def mc_warmup_step(run: Tempo) -> dict:
    """Whole games from fresh starts; every H-turn boundary's estimates aim at won (MC)."""
    c, groups = run.config, []
    outcomes = []
    for _ in range(c.warmup_games):
        start = run.fresh()
        for seg in run.segments(start, c.max_steps, c.branches):
            outcome = float(won(start.game_id, seg.end()))
            outcomes.append(outcome)
            spans = seg.episode.record.spans
            for turn in range(c.segment_turns, len(spans), c.segment_turns):
                boundary = SavedState(
                    start.state.tokens + tuple(seg.episode.tokens[: spans[turn][0]])
                )
                groups.append((run.estimates(start.game_id, boundary, c.critic_samples), outcome))
    rows = sum(len(g[0]) for g in groups)
    datums, metrics = critic_rows(run, groups, max(rows, 1))
    run.step(datums, "importance_sampling")
    return {
        **metrics,
        "warmup/won": sum(outcomes) / len(outcomes),
        "warmup/boundaries": len(groups),
        "sampled_tokens": run.sampled,
    }


def td_step(run: Tempo) -> dict:
    """Segments from saved states, V̂ at their ends, Rₙ/G/Aₙ, one mixed batch, store."""
    c = run.config
    starts = [
        run.store[i] for i in run.rng.sample(range(len(run.store)), min(c.states, len(run.store)))
    ]
    starts += [run.fresh() for _ in range(c.states - len(starts))]
    agent, critic_groups, rewards_all, bootstrapped, ended_all, saved = [], [], [], [], [], 0
    endpoint_failed = endpoint_count = 0
    for start in starts:
        segs = run.segments(start, c.segment_turns, c.branches)
        rewards = [float(won(start.game_id, s.end())) for s in segs]
        ended = [not s.paused for s in segs]
        values = []
        for seg, done in zip(segs, ended, strict=True):
            if done:
                values.append(0.0)
                continue
            estimates = run.estimates(start.game_id, seg.end(), c.endpoint_samples)
            value, failed = endpoint_value([e[3] for e in estimates])
            endpoint_failed, endpoint_count = (
                endpoint_failed + failed,
                endpoint_count + len(estimates),
            )
            values.append(value)
            bootstrapped.append(value)
        returns = segment_returns(rewards, values, ended)
        target = value_target(returns)
        advantages = mean_centered(returns)
        agent.append((segs, advantages))
        run.groups.append(
            {"rewards": rewards, "values": values, "ended": ended, "returns": returns}
            | {"advantages": advantages}
        )
        critic_groups.append((run.estimates(start.game_id, start.state, c.critic_samples), target))
        rewards_all += rewards
        ended_all += ended
        for seg in segs:
            end = seg.end()
            if seg.paused and run.positions - len(end.tokens) > 64:  # room for a segment more
                run.store.append(Start(start.game_id, end))
                saved += 1
    rows = sum(len(s) for s, _ in agent) + sum(len(e) for e, _ in critic_groups)
    datums = [
        seg.datum(adv / (rows * len(seg.episode.tokens)), "importance_sampling")
        for segs, advs in agent
        for seg, adv in zip(segs, advs, strict=True)
        if adv != 0.0 and seg.episode.tokens
    ]
    agent_rows = len(datums)
    critic, metrics = critic_rows(run, critic_groups, rows)
    run.step(datums + critic, "importance_sampling")
    return {
        **metrics,
        "agent/reward": sum(rewards_all) / len(rewards_all),
        "agent/ended": sum(ended_all) / len(ended_all),
        "agent/bootstrap_mean": sum(bootstrapped) / len(bootstrapped) if bootstrapped else math.nan,
        "critic/endpoint_parsed": 1 - endpoint_failed / endpoint_count
        if endpoint_count
        else math.nan,
        "train/agent_rows": agent_rows,
        "train/critic_rows": len(critic),
        "td/saved": saved,
        "td/store": len(run.store),
        "sampled_tokens": run.sampled,
    }


def evaluate(run: Tempo) -> float:
    """Won share of `eval_games` dev games played whole, one sample each (seeded)."""
    problems = run.task.problems("dev")[: run.config.eval_games]
    wins = []
    for p in problems:
        start = Start(p.answer, SavedState(tuple(run.tokenizer.encode(p.prompt))))
        seg = run.segments(start, run.config.max_steps, 1, count=False)[0]
        wins.append(float(won(p.answer, seg.end())))
    return sum(wins) / len(wins)


def show(label: str, metrics: dict) -> None:
    print(
        label,
        " ".join(
            f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items()
        ),
    )


def main(argv: list[str] | None = None) -> dict[str, list]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in fields(Config):
        if f.type in ("int", "float"):  # every number is a flag: --steps, --segment-turns, ...
            kind = int if f.type == "int" else float
            parser.add_argument(f"--{f.name.replace('_', '-')}", type=kind, default=f.default)
    return train(Config(**vars(parser.parse_args(argv))))


def train(config: Config) -> dict[str, list]:
    """Evaluate, warm the critic up (MC), train (TD), evaluate; print and return the metrics."""
    # The tiny policy decodes fastest on one thread: a 4-segment call took 0.3 s on one,
    # 15 s on two threads of a busy 2-core machine (measured 2026-12-03).
    torch.set_num_threads(1)
    run = Tempo(config)
    history: dict[str, list] = {"warmup": [], "td": [], "eval/won": []}
    if config.eval_games:
        history["eval/won"].append(evaluate(run))
        print(f"eval/won={history['eval/won'][0]:.3f}")
    budget = config.max_sampled_tokens
    phases = [("warmup", mc_warmup_step, config.warmup_steps), ("td", td_step, config.steps)]
    for name, step, count in phases:
        for i in range(count):
            if budget and run.sampled >= budget:
                break  # spent: the step that reached the budget was the last
            history[name].append(step(run))
            show(f"{'step' if name == 'td' else name} {i}:", history[name][-1])
    print(f"sampled tokens: {run.sampled:,}" + (f" (budget {budget:,})" if budget else ""))
    if config.eval_games:
        history["eval/won"].append(evaluate(run))
        before, after = history["eval/won"]
        print(f"eval/won on {config.eval_games} dev games: {before:.3f} → {after:.3f}")
    history["run"] = run
    return history


if __name__ == "__main__":
    main()
