"""Multi-turn episodes: turns cut at tool calls, observations inserted as forced context,
every budget, and environment failures that cost the sample — worked by hand on a
scripted engine — and, on a real model, the trainer's log-probs equal the sampler's."""

from __future__ import annotations

import math
import time

import pytest
import torch
from rounding_testlib import logprob_atol
from scripted_engine import EOS, ScriptedEngine

from rlvr.envs.base import Environment, Reply
from rlvr.envs.budgets import EpisodeBudgets
from rlvr.envs.tools import ToolEnvironment
from rlvr.models import CharTokenizer, build_tiny_policy, response_logprobs, tiny_qwen2_config
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.episodes import run_episodes
from rlvr.tasks.calculator import calc

TOK = CharTokenizer()


def _run(reply, env_factory, budgets=None, max_new_tokens=40, group_size=1, prompts=("P:",)):
    engine = ScriptedEngine(TOK, reply)
    budgets = budgets or EpisodeBudgets()
    ids = [TOK.encode(p) for p in prompts]
    params = SamplingParams(group_size=group_size, max_new_tokens=max_new_tokens)
    gen = run_episodes(engine, TOK, ids, env_factory, params, budgets, torch.Generator())
    return gen, engine


def _calculator(i):
    return ToolEnvironment({"calc": calc}, observation_format="={result}")


def _tool_user(context, k):
    """Calls the tool once (and rambles past the closing tag), then answers."""
    if "=" not in context:
        return "<calc>6*7</calc>ramble"
    return " \\boxed{42}" + EOS


def test_a_tool_call_ends_the_turn_and_its_result_is_inserted_as_forced_context():
    gen, engine = _run(_tool_user, _calculator)
    text = "<calc>6*7</calc>=42 \\boxed{42}"
    assert gen.texts == [text]
    # Turn 1: "<calc>6*7</calc>" (16 tokens, "ramble" cut); observation "=42" (3, forced);
    # turn 2: " \boxed{42}" (11) and EOS: 16 + 3 + 12 = 31 tokens.
    assert gen.response_mask[0].sum() == 31
    forced = gen.forced_mask[0].tolist()
    assert forced[:16] == [0.0] * 16 and forced[16:19] == [1.0] * 3 and sum(forced) == 3
    assert gen.sampler_logprobs[0, 16:19].tolist() == [0.0] * 3  # never sampled
    assert gen.sampler_logprobs[0, :16].tolist() == [-0.5] * 16
    # Token in, token out: turn 2 continued from the exact ids, observation included.
    assert engine.calls[1] == ["P:<calc>6*7</calc>=42"]
    record = gen.episodes[0]
    assert (record.turns, record.tool_calls, record.observation_tokens) == (2, 1, 3)
    assert record.ended_by == "answer" and record.env_failed is None and not gen.truncated[0]
    assert record.calls == ["<calc>6*7</calc>"]  # the answered turn's call; the answer asks none


def test_a_group_forks_after_its_prompt_and_live_episodes_decode_together():
    def reply(context, k):  # sample 0 answers at once, sample 1 uses the tool
        if k == 0 and "=" not in context and "<calc>" not in context:
            return " \\boxed{1}" + EOS
        return _tool_user(context, k)

    gen, engine = _run(reply, _calculator, group_size=2, prompts=("A:", "B:"))
    assert engine.calls[0] == ["A:", "B:"]  # one call, group_size 2 each
    assert engine.calls[1] == ["A:<calc>6*7</calc>=42", "B:<calc>6*7</calc>=42"]  # live only
    assert [e.turns for e in gen.episodes] == [1, 2, 1, 2]
    assert gen.prompt_index.tolist() == [0, 0, 1, 1]


def test_limits_of_turns_tool_calls_and_observation_length():
    always_calls = lambda context, k: "<calc>1+1</calc>"  # noqa: E731
    gen, _ = _run(
        always_calls, _calculator, EpisodeBudgets(max_turns=5, max_tool_calls=2), max_new_tokens=80
    )
    # Two calls answered, the third ends the episode without running.
    assert gen.episodes[0].tool_calls == 2 and gen.episodes[0].ended_by == "max_tool_calls"
    assert gen.texts[0] == "<calc>1+1</calc>=2<calc>1+1</calc>=2<calc>1+1</calc>"
    gen, _ = _run(always_calls, _calculator, EpisodeBudgets(max_turns=2, max_tool_calls=9))
    assert gen.episodes[0].turns == 2 and gen.episodes[0].ended_by == "max_turns"

    class Verbose(Environment):
        def step(self, turn):
            return Reply("abcdefghij")  # 10 characters

    gen, _ = _run(
        lambda c, k: "x", lambda i: Verbose(), EpisodeBudgets(max_turns=2, max_observation_tokens=6)
    )
    # Cut to 6 tokens, the last 3 being the marker "...": "abc...".
    assert gen.texts[0] == "xabc...x" and gen.episodes[0].observations_cut == 1


def test_the_trajectory_budget_counts_observations_and_truncates():
    gen, _ = _run(lambda c, k: "<calc>6*7</calc>", _calculator, max_new_tokens=20)
    # 16 policy tokens + 3 observation tokens = 19; the next turn has room for 1 token.
    assert gen.response_mask[0].sum() == 20 and gen.truncated[0]
    assert gen.episodes[0].ended_by == "budget"


class _Broken(Environment):
    def __init__(self, how):
        self.how = how

    def step(self, turn):
        if self.how == "raise":
            raise ConnectionError("search API rate limit")
        if self.how == "hang":
            time.sleep(30)
        if self.how == "bad reward":
            return Reply("ok", reward=float("nan"))
        if self.how == "bad observation":
            return Reply(observation=None)
        return "not a Reply"


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("raise", "error: ConnectionError: search API rate limit"),
        ("hang", "timeout: step ran past 0.3s"),
        ("garbage", "type: step returned str, not a Reply"),
        ("bad reward", "type: Reply.reward is nan, not a finite number"),
        ("bad observation", "type: Reply.observation is NoneType"),
    ],
)
def test_a_failing_environment_ends_the_episode_flagged(how, reason):
    started = time.perf_counter()
    gen, _ = _run(lambda c, k: "x", lambda i: _Broken(how), EpisodeBudgets(env_timeout_s=0.3))
    assert time.perf_counter() - started < 10
    assert gen.episodes[0].env_failed == reason and gen.episodes[0].ended_by == "env_failed"
    assert gen.texts[0] == "x"


def test_a_failing_tool_answers_with_an_error_observation():
    def reply(context, k):
        return "<calc>6*</calc>" if "error" not in context else " \\boxed{0}" + EOS

    gen, _ = _run(reply, _calculator, max_new_tokens=120)
    assert gen.texts[0].startswith("<calc>6*</calc>=error: ExpressionError")
    assert gen.texts[0].endswith(" \\boxed{0}")
    record = gen.episodes[0]
    assert record.tool_calls == 1 and record.tool_errors == 1 and record.ended_by == "answer"


def test_trainer_logprobs_equal_the_samplers_across_observations():
    """Token in, token out on a real model: every policy token's log-prob, recomputed by
    the trainer over the whole trajectory (observations attended), equals the sampler's:
    the on-policy ratio is 1 at every policy token, after every observation."""

    class Echo(Environment):
        def step(self, turn):
            return Reply(f"<{turn[:2]}>")

    model = build_tiny_policy(
        tiny_qwen2_config(TOK.vocab_size, hidden=32, layers=2, heads=2, kv_heads=2), seed=0
    )
    engine = HFEngine(model, TOK)
    budgets = EpisodeBudgets(max_turns=4, max_turn_tokens=3)
    params = SamplingParams(group_size=3, max_new_tokens=24)
    prompts = [TOK.encode("Q: 1+2=? A:"), TOK.encode("Q: 9*9=? A:")]
    gen = run_episodes(
        engine, TOK, prompts, lambda i: Echo(), params, budgets, torch.Generator().manual_seed(0)
    )
    assert gen.forced_mask.sum() > 0 and max(e.turns for e in gen.episodes) > 1
    trainer = response_logprobs(
        model, gen.prompt_ids, gen.response_ids, gen.response_mask, TOK.pad_token_id
    )
    policy = (gen.response_mask - gen.forced_mask) > 0
    # Decode vs full forward add in other orders: log-probs within τ, ratios within
    # e^τ − 1 of 1 (rounding_testlib.py); an observation left out of the context would be
    # off by whole log-probs.
    tau = logprob_atol(model.config)
    torch.testing.assert_close(trainer[policy], gen.sampler_logprobs[policy], atol=tau, rtol=0)
    # ratio exp(trainer − sampler) is 1 on every policy token after an observation
    after = policy & (gen.forced_mask.cumsum(-1) > 0)
    assert after.any()
    ratio = (trainer[after] - gen.sampler_logprobs[after]).exp()
    torch.testing.assert_close(ratio, torch.ones_like(ratio), atol=math.expm1(tau), rtol=0)


def test_per_turn_reward_parts_are_summed_for_the_record():
    class Scoring(Environment):
        def step(self, turn):
            return Reply("ok", reward=0.25)

    gen, _ = _run(lambda c, k: "x", lambda i: Scoring(), EpisodeBudgets(max_turns=3))
    # three turns, two answered (the last turn gets no reply): 2 × 0.25
    assert gen.episodes[0].turn_reward == 0.5 and gen.episodes[0].turns == 3


def test_an_environment_that_fails_to_start_costs_its_episode_only():
    class BadReset(Environment):
        def reset(self, problem):
            raise RuntimeError("reset blew up")

        def step(self, turn):
            return Reply("ok")

    def make(i):  # prompt 0's environment fails to start, prompt 1's works
        env = BadReset() if i == 0 else _calculator(i)
        env.reset(None)
        return env

    gen, engine = _run(_tool_user, make, group_size=2, prompts=("A:", "B:"))
    failed = [e.env_failed for e in gen.episodes]
    assert failed[:2] == ["error: starting the environment: RuntimeError: reset blew up"] * 2
    assert (
        failed[2:] == [None, None] and [e.ended_by for e in gen.episodes[:2]] == ["env_failed"] * 2
    )
    assert gen.texts[2:] == ["<calc>6*7</calc>=42 \\boxed{42}"] * 2  # prompt 1 played on
    assert gen.response_mask[:2].sum() == 0  # nothing sampled for a failed start is kept
    assert engine.calls[1] == ["B:<calc>6*7</calc>=42"] * 2


def test_a_stop_string_merged_into_a_bpe_token_still_ends_the_turn():
    """Byte-level BPE merges ')</' into one token, so the ids of '</calc>' alone never
    occur in the turn; the stop is found on the text."""
    from hf_testlib import build_tokenizer

    from rlvr.models.tokenizer import HFTokenizer
    from rlvr.rollout.stops import stop_end

    texts = ["<calc>2*(3+4)</calc>=14 and (1+2)</calc> again )</calc>"] * 50
    tokenizer = HFTokenizer(build_tokenizer(texts))
    ids = tokenizer.encode(" <calc>2*(3+4)</calc>=14 tail")
    standalone = tokenizer.encode("</calc>")
    assert not any(ids[k : k + len(standalone)] == standalone for k in range(len(ids)))
    end = stop_end(ids, ["</calc>"], lambda part: tokenizer.decode(part, skip_special=False))
    # The shortest prefix that holds the tag (its last token may run past it: '>=').
    assert "</calc>" in tokenizer.decode(ids[:end])
    assert "</calc>" not in tokenizer.decode(ids[: end - 1])


def test_the_environment_sees_the_turn_up_to_its_stop_string():
    """When the token that completes a tool call's tag runs past it (BPE's '>='), the
    environment still hears the call ending with the tag; the sampled tokens are kept."""
    from hf_testlib import build_tokenizer

    from rlvr.models.tokenizer import HFTokenizer
    from rlvr.rollout.episodes import turn_text

    texts = ["<calc>2*(3+4)</calc>=14 and (1+2)</calc> again )</calc>"] * 50
    tokenizer = HFTokenizer(build_tokenizer(texts))
    env = _calculator(0)
    ids = tokenizer.encode(" <calc>2*(3+4)</calc>=14 tail")
    length, text = turn_text(ids, env, tokenizer)
    assert text == " <calc>2*(3+4)</calc>" and env.step(text).observation == "=14"
    assert tokenizer.decode(ids[:length]).startswith(text)


def test_the_episodes_time_limit_is_not_reported_as_the_tools():
    """A tool slower than the episode's env_timeout_s (but within its own 5 s) is an
    environment failure at the episode's limit, not a tool time-out at the tool's."""

    def slow(expression: str) -> str:
        time.sleep(3)
        return "late"

    tools = lambda i: ToolEnvironment({"slow": slow})  # noqa: E731
    gen, _ = _run(lambda c, k: "<slow>x</slow>", tools, EpisodeBudgets(env_timeout_s=0.5))
    record = gen.episodes[0]
    assert record.env_failed == "timeout: step ran past 0.5s" and record.tool_timeouts == 0
