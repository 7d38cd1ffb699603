"""`benchmarks/bench_episodes.py`: its environment, the naive loop's budgets (it must play
the same episodes as `run_episodes` when sampling is all but greedy), and a tiny run of
the whole benchmark, whose report must show multi-turn episodes for every contestant and
the same episodes with the KV cache kept as without."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlvr.envs import EpisodeBudgets
from rlvr.rollout import HFEngine, SamplingParams

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_episodes import (
    NUDGE,
    NudgingCalculator,
    Work,
    embedded_policy,
    llama_policy,
    naive_batch,
    prefill_batch,
    rlvr_batch,
)

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_nudging_calculator_runs_calls_and_nudges_other_turns():
    env = NudgingCalculator()
    call = env.step(" <calc>37*85</calc>")
    assert (call.observation, call.tool_call, call.done) == ("=3145", True, False)  # 37·85
    other = env.step(" \\boxed{3145}")
    assert (other.observation, other.tool_call, other.done) == (NUDGE, False, False)


# Embedded, by hand: turn 8 + nudge 7 + turn 8 = 23 of 26 tokens; the second nudge is cut
# to 3 and the budget ends each episode: 2 turns, 16 policy and 10 observation tokens.
EMBEDDED = Work(episodes=4, turns=8, policy_tokens=64, observation_tokens=40)


@pytest.mark.parametrize(
    ("build", "expected"), [(lambda: embedded_policy(False), EMBEDDED), (llama_policy, None)]
)
def test_naive_loop_plays_the_same_episodes_as_run_episodes_when_near_greedy(build, expected):
    torch.manual_seed(0)
    model, tokenizer = build()
    engine = HFEngine(model.eval(), tokenizer)
    prompts = ["Q: 37*85=? A:", "Q: 12*34=? A:"]
    params = SamplingParams(group_size=2, temperature=1e-3, max_new_tokens=26)
    budgets = EpisodeBudgets(max_turns=4, max_turn_tokens=8)
    seed = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    ours = rlvr_batch(engine, prompts, params, budgets, seed())
    theirs = naive_batch(engine, prompts, params, budgets, seed())
    assert ours == theirs == prefill_batch(engine, prompts, params, budgets, seed())
    if expected is not None:  # a random policy, all but greedy: no EOS, no tool call
        assert ours == expected
    assert ours.episodes == 4 and ours.turns > ours.episodes
    assert ours.policy_tokens + ours.observation_tokens <= 4 * 26


def test_tiny_run_reports_multi_turn_work_for_every_contestant(tmp_path):
    report_file = tmp_path / "report.json"
    command = [sys.executable, str(BENCHMARKS / "bench_episodes.py"), "--rounds=1"]
    command += ["--models=embedded", "--prompts=2", "--group=2", "--max-turns=3", "--turn-tokens=4"]
    command += ["--max-new-tokens=24", "--tolerance=10", f"--json={report_file}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(report_file.read_text())
    assert set(report["models"]) == {"embedded"}  # the Llama's episodes: the test above
    for model, result in report["models"].items():
        assert result["rlvr"]["digest"] == result["naive"]["digest"], model
        assert result["rlvr"]["digest"] == result["prefill"]["digest"], model
        for side in ("rlvr", "prefill", "naive"):
            r = result[side]
            assert len(r["rounds"]) == 1
            assert r["rounds"][0]["episodes"] == 4  # 2 prompts × 2
            assert r["turns_per_episode"] > 1, (model, side)
            assert r["observation_tokens_per_episode"] > 0, (model, side)
            assert r["tokens_per_s"] > 0 and r["episodes_per_s"] > 0
        ratios = result["compare"]
        assert set(ratios) >= {"tokens_per_s_ratio", "paired_ratio", "work_ratio", "comparable"}
        # The same seeds, the same episodes: keeping the cache changes only the time.
        assert result["compare_prefill"]["work_ratio"] == 1.0
        for key in ("turns", "observation_tokens", "tool_calls"):
            assert result["rlvr"][f"{key}_per_episode"] == result["prefill"][f"{key}_per_episode"]
    assert "rlvr / naive:" in done.stdout and "rlvr / prefill:" in done.stdout
