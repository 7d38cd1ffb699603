"""Multi-turn episodes: rlvr's `run_episodes` against a naive loop that re-encodes the
conversation every turn, side by side (issue 25; goal: ≥ 3× the naive tokens/s).

Workload, the same for all: calculator prompts (`Q: 37*85=? A:`), `--prompts` ×
`--group` episodes at temperature 1, each with a fresh `NudgingCalculator`: the calculator
task's `ToolEnvironment` (`calc`, whose `</calc>` ends a turn, answered `=3145`), except that
a turn without a tool call is answered with a nudge (`NUDGE`) instead of ending the episode.
So episodes go on until EOS or a budget (`--max-turns`, `--turn-tokens` per turn,
`--max-new-tokens` per trajectory, policy and observation tokens together), and a random
policy, which ends its turns at the turn budget, still plays several turns.

Contestants, all over the same `HFEngine` class and the same weights:
- rlvr: `run_episodes`: one engine call per turn over every live episode, the group forked
  after its shared prompt, each turn continued from the exact token ids so far, each
  episode's KV cache kept between turns (`rlvr.rollout.kv_session`: a turn prefills only
  the observation and the previous turn's last token);
- prefill: the same `run_episodes` with `reuse_cache=False`: every turn re-prefills its
  whole context (rlvr before the session; same tokens from the same seed);
- naive: as users commonly write it, episode by episode: each turn re-encode the prompt and
  the conversation text so far, generate one turn (group 1), cut the text at the first stop
  string, call the environment, append its observation text, repeat.

Models: `embedded`, the tiny Qwen2 at the embedded default's shape (character vocabulary)
with random weights (seed 0), or with `--warm` the cached warm-started calculator policy,
which makes real tool calls (turns need `--turn-tokens 24` then); `llama`, a tiny random
`LlamaForCausalLM` (GQA) with a byte-level BPE tokenizer trained in memory on calculator
text. Nothing is downloaded or saved.

Per model, each contestant runs in a process of its own (benchmarks/harness.py; the driver
checks the weights' digest and the torch thread count), one warm-up batch each, then
`--rounds` batches asked for in turn, the order reversed every round. Printed per
contestant: median seconds per batch, policy tokens/s and episodes/s (medians of per-round
rates), and per episode the mean turns, observation tokens, tool calls and policy tokens;
then the ratios rlvr / naive and rlvr / prefill (of the medians, and the median of
per-round paired ratios).
The work check compares policy tokens per episode: a naive loop that stopped early would
look fast; the benchmark exits with status 1 when they differ by more than `--tolerance`.
Run: .venv/bin/python benchmarks/bench_episodes.py [--rounds 5] [--models embedded,llama]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from dataclasses import dataclass, replace

import torch
from harness import contestants, peak_bytes

from rlvr.envs import EpisodeBudgets, Reply, ToolEnvironment
from rlvr.models.tiny import build_tiny_policy, tiny_qwen2_config
from rlvr.models.tokenizer import CharTokenizer, HFTokenizer
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.base import encode_prompts
from rlvr.rollout.episodes import run_episodes
from rlvr.tasks import make_task
from rlvr.tasks.calculator import OBSERVATION, calc

MODELS = ("embedded", "llama")
SIDES = ("rlvr", "prefill", "naive")
NUDGE = "\ngo on:"


class NudgingCalculator(ToolEnvironment):
    """The calculator task's environment, except that a turn without a tool call gets
    `NUDGE` instead of ending the episode."""

    def __init__(self) -> None:
        super().__init__({"calc": calc}, observation_format=OBSERVATION)

    def step(self, turn: str) -> Reply:
        reply = super().step(turn)
        return Reply(NUDGE) if reply.done and not reply.tool_call else reply


@dataclass
class Work:
    """What one batch of episodes did, summed over its episodes."""

    episodes: int = 0
    turns: int = 0
    policy_tokens: int = 0
    observation_tokens: int = 0
    tool_calls: int = 0


def rlvr_batch(engine, prompts, params, budgets, generator, reuse_cache=True) -> Work:
    """All episodes through `run_episodes`, the KV cache kept between turns or not."""
    ids = encode_prompts(engine.tokenizer, prompts)
    env = lambda i: NudgingCalculator()  # noqa: E731
    gen = run_episodes(
        engine, engine.tokenizer, ids, env, params, budgets, generator, reuse_cache=reuse_cache
    )
    return Work(
        episodes=len(gen.episodes),
        turns=sum(e.turns for e in gen.episodes),
        policy_tokens=int((gen.response_mask - gen.forced_mask).sum()),
        observation_tokens=sum(e.observation_tokens for e in gen.episodes),
        tool_calls=sum(e.tool_calls for e in gen.episodes),
    )


def prefill_batch(engine, prompts, params, budgets, generator) -> Work:
    """`rlvr_batch` re-prefilling every turn's whole context."""
    return rlvr_batch(engine, prompts, params, budgets, generator, reuse_cache=False)


def naive_batch(engine, prompts, params, budgets, generator) -> Work:
    """Episode after episode, each through `naive_episode`."""
    work = Work()
    for prompt in prompts:
        for _ in range(params.group_size):
            naive_episode(engine, prompt, NudgingCalculator(), params, budgets, generator, work)
    return work


def naive_episode(engine, prompt, env, params, budgets, generator, work: Work) -> None:
    """One episode the way a hand-written loop plays it: the conversation is text, encoded
    again from scratch for every turn. Same budgets as `run_episodes`."""
    conversation, used, turns, calls = "", 0, 0, 0
    while turns < budgets.max_turns and used < params.max_new_tokens:
        left = params.max_new_tokens - used
        step = replace(
            params, group_size=1, max_new_tokens=min(left, budgets.max_turn_tokens or left)
        )
        gen = engine.generate([prompt + conversation], step, generator)
        turn, turns = gen.texts[0], turns + 1
        ends = [turn.find(s) + len(s) for s in env.stop if s in turn]
        if ends:
            turn = turn[: min(ends)]
            tokens = len(engine.tokenizer.encode(turn))
        else:
            tokens = int(gen.response_mask.sum())
        conversation, used = conversation + turn, used + tokens
        work.policy_tokens += tokens
        answered = not ends and not bool(gen.truncated[0])
        if answered or turns >= budgets.max_turns or (ends and calls >= budgets.max_tool_calls):
            break
        reply = env.step(turn)
        calls += reply.tool_call
        observation = engine.tokenizer.encode(reply.observation)[: left - tokens]
        conversation += engine.tokenizer.decode(observation)
        used += len(observation)
        work.observation_tokens += len(observation)
        if reply.done:
            break
    work.episodes, work.turns, work.tool_calls = (
        work.episodes + 1,
        work.turns + turns,
        work.tool_calls + calls,
    )


def embedded_policy(warm: bool):
    """The embedded default's shape: random weights (seed 0), or the cached warm start."""
    if warm:
        from rlvr.warmstart import load_policy

        model, tokenizer, _ = load_policy("embedded", "calculator", {}, 0, progress=False)
        return model, tokenizer
    tokenizer = CharTokenizer()
    return build_tiny_policy(tiny_qwen2_config(tokenizer.vocab_size), seed=0), tokenizer


def llama_policy():
    """A random Llama (hidden 256, 4 layers, 8 query / 2 key-value heads) and a byte-level
    BPE tokenizer trained here on calculator text (deterministic: the driver checks)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    task = make_task("calculator")
    texts = [p.prompt + " " + p.target for p in task.problems("train")[:500]] + [NUDGE] * 20
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    specials = ["<|pad|>", "<|eos|>"]
    trainer = trainers.BpeTrainer(vocab_size=384, special_tokens=specials, show_progress=False)
    core.train_from_iterator(texts, trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=specials[0], eos_token=specials[1]
    )
    tokenizer = HFTokenizer(hf)
    config = LlamaConfig(
        vocab_size=len(hf),
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    return model, tokenizer


def digest(model, tokenizer) -> str:
    """SHA-256 of the weights and of the tokenizer's ids for a probe text."""
    hashed = hashlib.sha256(json.dumps(tokenizer.encode("Q: 37*85=? A: <calc>")).encode())
    for name, tensor in sorted(model.state_dict().items()):
        hashed.update(name.encode())
        hashed.update(tensor.detach().contiguous().numpy().tobytes())
    return hashed.hexdigest()


def serve(args) -> None:
    """Child process: one contestant on one model. Prints {digest, threads, warmup_s}
    after a warm-up batch, then per line read one batch's {s, **Work} (seeded with the
    round), and at the end of input the peak memory its batches added."""
    torch.set_num_threads(args.threads)
    before = peak_bytes()
    model, tokenizer = embedded_policy(args.warm) if args.model == "embedded" else llama_policy()
    model.eval()
    engine = HFEngine(model, tokenizer)
    prompts = [p.prompt for p in make_task("calculator").problems("eval")[: args.prompts]]
    params = SamplingParams(group_size=args.group, max_new_tokens=args.max_new_tokens)
    budgets = EpisodeBudgets(max_turns=args.max_turns, max_turn_tokens=args.turn_tokens)
    batch = {"rlvr": rlvr_batch, "prefill": prefill_batch, "naive": naive_batch}[args.side]
    run = lambda seed: batch(engine, prompts, params, budgets, torch.Generator().manual_seed(seed))  # noqa: E731
    start = time.perf_counter()
    run(10**6)
    ready = {"digest": digest(model, tokenizer), "threads": torch.get_num_threads()}
    print(json.dumps({**ready, "warmup_s": time.perf_counter() - start}), flush=True)
    for seed, _ in enumerate(sys.stdin):
        start = time.perf_counter()
        work = run(seed)
        print(json.dumps({"s": time.perf_counter() - start, **vars(work)}), flush=True)
    print(json.dumps({"peak_mib": (peak_bytes() - before) / 2**20}), flush=True)


def measure(model: str, flags: list[str], rounds: int, threads: int) -> dict[str, dict]:
    """Every contestant on `model`, asked in turn for one batch per round (the order
    reversed every round); returns each one's per-round answers and its summary."""
    argv = lambda side: [sys.executable, __file__, f"--side={side}", f"--model={model}", *flags]  # noqa: E731
    with contestants(SIDES, argv) as procs:
        out = {side: {"rounds": [], **p.receive()} for side, p in procs.items()}
        if len({r["digest"] for r in out.values()}) != 1:
            raise RuntimeError(f"{model}: the contestants built different weights or tokenizers")
        if {r["threads"] for r in out.values()} != {threads}:
            raise RuntimeError(f"{model}: contestants' torch threads differ from {threads}")
        for i in range(rounds):
            for side in SIDES if i % 2 == 0 else SIDES[::-1]:
                out[side]["rounds"].append(procs[side].step())
        for side, proc in procs.items():
            out[side].update(proc.finish())
    return {side: {**r, **summary(r["rounds"])} for side, r in out.items()}


def summary(rounds: list[dict]) -> dict:
    """Medians over rounds of the rates; means per episode of the work."""
    episodes = sum(r["episodes"] for r in rounds)
    per_episode = {
        f"{key}_per_episode": sum(r[key] for r in rounds) / episodes
        for key in ("turns", "policy_tokens", "observation_tokens", "tool_calls")
    }
    return {
        "median_s": statistics.median(r["s"] for r in rounds),
        "tokens_per_s": statistics.median(r["policy_tokens"] / r["s"] for r in rounds),
        "episodes_per_s": statistics.median(r["episodes"] / r["s"] for r in rounds),
        **per_episode,
    }


def compare(sides: dict[str, dict], tolerance: float, other: str = "naive") -> dict:
    """The ratios rlvr / `other`, and whether both did comparable work."""
    ours, theirs = sides["rlvr"], sides[other]
    paired = statistics.median(
        (a["policy_tokens"] / a["s"]) / (b["policy_tokens"] / b["s"])
        for a, b in zip(ours["rounds"], theirs["rounds"], strict=True)
    )
    work = ours["policy_tokens_per_episode"] / theirs["policy_tokens_per_episode"]
    return {
        "tokens_per_s_ratio": ours["tokens_per_s"] / theirs["tokens_per_s"],
        "episodes_per_s_ratio": ours["episodes_per_s"] / theirs["episodes_per_s"],
        "paired_ratio": paired,
        "work_ratio": work,
        "comparable": abs(work - 1) <= tolerance,
    }


def print_model(model: str, result: dict) -> None:
    print(f"{model}:")
    for side in SIDES:
        r = result[side]
        print(
            f"  {side:<6} {r['median_s'] * 1000:9.1f} ms/batch {r['tokens_per_s']:8.0f} tokens/s "
            f"{r['episodes_per_s']:7.1f} episodes/s | per episode: {r['turns_per_episode']:.2f} "
            f"turns, {r['observation_tokens_per_episode']:.1f} observation tokens, "
            f"{r['tool_calls_per_episode']:.2f} tool calls, {r['policy_tokens_per_episode']:.1f} "
            f"policy tokens | warm-up {r['warmup_s']:.1f} s, peak +{r['peak_mib']:.0f} MiB"
        )
    for key, other in (("compare", "naive"), ("compare_prefill", "prefill")):
        c = result[key]
        print(
            f"  rlvr / {other}: {c['tokens_per_s_ratio']:.2f}x tokens/s, "
            f"{c['episodes_per_s_ratio']:.2f}x episodes/s (ratio of medians); per-round paired "
            f"{c['paired_ratio']:.2f}x | work (policy tokens per episode) rlvr / {other} "
            f"{c['work_ratio']:.3f}: " + ("comparable" if c["comparable"] else "NOT COMPARABLE")
        )


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated")
    parser.add_argument("--rounds", type=int, default=5, help="timed batches per contestant")
    parser.add_argument("--prompts", type=int, default=8, help="calculator prompts per batch")
    parser.add_argument("--group", type=int, default=4, help="episodes per prompt")
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--turn-tokens", type=int, default=10, help="tokens per policy turn")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="per trajectory")
    parser.add_argument("--warm", action="store_true", help="embedded: the warm start")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per contestant")
    parser.add_argument("--tolerance", type=float, default=0.1, help="work check, relative")
    parser.add_argument("--json", help="also write the report to this file")
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--model", choices=MODELS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    unknown = set(args.models.split(",")) - set(MODELS)
    if unknown:
        parser.error(f"--models: unknown {sorted(unknown)}; valid: {', '.join(MODELS)}")
    return args


def main() -> None:
    args = parse()
    if args.side:  # child process: one contestant, driven through stdin/stdout
        serve(args)
        return
    flags = [f"--{k.replace('_', '-')}={getattr(args, k)}" for k in ("prompts", "group")]
    flags += [f"--{k.replace('_', '-')}={getattr(args, k)}" for k in ("max_turns", "threads")]
    flags += [f"--turn-tokens={args.turn_tokens}", f"--max-new-tokens={args.max_new_tokens}"]
    flags += ["--warm"] if args.warm else []
    settings = {k: v for k, v in vars(args).items() if k not in ("side", "model", "json")}
    print(
        f"threads={args.threads}  {args.prompts} calculator prompts x {args.group} episodes, "
        f"<= {args.max_turns} turns of <= {args.turn_tokens} tokens, <= {args.max_new_tokens} "
        f"tokens per trajectory, temperature 1; {args.rounds} alternating rounds"
    )
    report = {"settings": settings, "models": {}}
    for model in args.models.split(","):
        result = measure(model, flags, args.rounds, args.threads)
        result["compare"] = compare(result, args.tolerance)
        result["compare_prefill"] = compare(result, args.tolerance, "prefill")
        report["models"][model] = result
        print_model(model + (" (warm start)" if model == "embedded" and args.warm else ""), result)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=1)
    checks = [
        r[key]["comparable"]
        for r in report["models"].values()
        for key in ("compare", "compare_prefill")
    ]
    if not all(checks):
        sys.exit(1)


if __name__ == "__main__":
    main()
