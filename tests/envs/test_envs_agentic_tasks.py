"""The embedded agent tasks `lookup` (multi-hop questions through a lookup tool, a
Search-R1 analog) and `guess_number` (higher / lower replies): problems, environments,
verdicts and budgets worked by hand, and whole episodes played through the episode loop
by a scripted policy."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from rounding_testlib import RANDOM_LOGIT_SCALE, logprob_atol

sys.path.insert(0, str(Path(__file__).parents[1] / "rollout"))

from scripted_engine import EOS, ScriptedEngine

from rlvr.models import CharTokenizer
from rlvr.rollout import SamplingParams
from rlvr.rollout.episodes import generate_for
from rlvr.tasks import make_task
from rlvr.tasks.guess_number import GuessEnvironment, fewer_guesses
from rlvr.tasks.lookup import LookupTask

TOK = CharTokenizer()


def test_a_lookup_question_by_hand():
    task = LookupTask(hops=2, train_size=5, dev_size=1, eval_size=1)
    problem = task.problems("train")[0]
    entity = problem.prompt.removeprefix("Q: parent of parent of ").removesuffix("? A:")
    middle, last = task.facts(problem)[entity], problem.answer
    assert task.facts(problem) == {entity: middle, middle: last}
    assert problem.target == (
        f" <lookup>{entity}</lookup>={middle} <lookup>{middle}</lookup>={last} \\boxed{{{last}}}"
    )
    # 2 calls of " <lookup>kavo</lookup>=belu" (27 characters) + " \boxed{tira}" (13) = 67.
    assert task.longest_target_chars == 67 and task.default_max_new_tokens == 67 + 1 + 4
    env = task.environment(problem)
    env.reset(problem)
    assert env.step(f" <lookup>{entity}</lookup>").observation == f"={middle}"
    assert env.step(" <lookup>zzzz</lookup>").observation == "=unknown"
    assert env.step(f" \\boxed{{{last}}}").done
    budgets = task.episode_budgets  # hops + 2 turns, hops + 1 calls
    assert (budgets.max_turns, budgets.max_tool_calls) == (4, 3)
    assert task.verify(problem, f"... \\boxed{{{last}}}").correct
    verdict = task.verify(problem, f" \\boxed{{{middle}}}")
    assert not verdict.correct and verdict.formatted
    assert not task.verify(problem, last).formatted


def test_each_question_has_a_world_of_its_own():
    """Chains come from (seed, entity) alone: the environment rebuilds them from the
    prompt, and another seed gives another world; the no-tool control answers in one turn."""
    task, other = LookupTask(hops=2, seed=0), LookupTask(hops=2, seed=1)
    problem = task.problems("eval")[0]
    entity = problem.prompt.split()[-2].removesuffix("?")
    assert task.chain(entity) == task.chain(entity) != other.chain(entity)
    control = LookupTask(tools=False)
    assert control.episode_budgets is None
    assert control.problems("eval")[0].target == f" \\boxed{{{control.problems('eval')[0].answer}}}"
    # Facts of eval questions are (up to chance collisions of names) in no train target.
    train_text = "".join(p.target for p in task.problems("train"))
    eval_facts = [f"<lookup>{a}</lookup>={b}" for p in task.problems("eval") for a, b in task.facts(p).items()]  # fmt: skip
    assert sum(fact in train_text for fact in eval_facts) <= len(eval_facts) // 100
    with pytest.raises(ValueError, match="hops must be an integer from 1 to 3, got 4"):
        LookupTask(hops=4)
    one_hop = LookupTask(train_size=3, dev_size=0, eval_size=0).problems("train")[0]  # default
    assert one_hop.prompt.startswith("Q: parent of ") and one_hop.target.count("<lookup>") == 1
    assert "parent of parent" not in one_hop.prompt


@pytest.mark.parametrize("hops", [2, 3])
def test_longer_chains_keep_their_entities_in_one_split(hops):
    """tests/tasks' leak check covers the default (1 hop); the entity asked about is the
    problem's identity at any length of chain."""
    task = LookupTask(hops=hops, train_size=600, dev_size=100, eval_size=100)
    entities = {s: {p.prompt.split()[-2].rstrip("?") for p in task.problems(s)} for s in ("train", "dev", "eval")}  # fmt: skip
    assert [len(e) for e in entities.values()] == [600, 100, 100]
    assert not (entities["train"] & entities["dev"] or entities["train"] & entities["eval"])
    assert not entities["dev"] & entities["eval"]


def test_a_guessing_game_by_hand():
    env = GuessEnvironment(secret=10, max_guesses=3)
    assert env.step(" <guess>8</guess>").observation == " higher"
    reply = env.step(" <guess>12</guess>")
    assert (reply.observation, reply.done, reply.tool_call) == (" lower", False, True)
    reply = env.step(" <guess>11</guess>")  # the third wrong guess loses the game
    assert (reply.observation, reply.done) == (" lower", True)
    env = GuessEnvironment(secret=10, max_guesses=3)
    assert env.step("<guess>10</guess>").observation == " right" and env.guesses == 1
    assert env.step("no guess").done  # a turn without a guess is a final answer
    # fewer_guesses: won at guess 1 → 1, at guess 3 → 0.5, lost → 0
    completions = ["<guess>4</guess> right", "<guess>1</guess> higher" * 2 + "<guess>4</guess>"]
    assert fewer_guesses([], [*completions, "x"], [True, True, False]) == [1.0, 0.5, 0.0]


def test_warm_start_games_are_consistent_wins():
    task = make_task("guess_number", train_size=300, dev_size=10, eval_size=10)
    assert task.episode_budgets.max_turns == 5  # 4 guesses, the last one answered too
    for problem in task.problems("train"):
        env = task.environment(problem)
        turns = problem.target.split("</guess>")[:-1]
        low, high = 1, 15
        for i, turn in enumerate(turns):  # the replay hears what the target says it heard
            guess = int(turn.rsplit("<guess>", 1)[1])
            assert low <= guess <= high  # consistent with every reply so far
            reply = env.step(f" <guess>{guess}</guess>")
            heard = problem.target.split("</guess>")[i + 1].split(" <guess>")[0]
            assert reply.observation == heard
            low, high = (guess + 1, high) if heard == " higher" else (low, guess - 1)
        assert len(turns) <= 4 and problem.target.endswith(" right")
        assert task.verify(problem, problem.target).correct
    # A game with no guess is not formatted; a wrong last guess is formatted, not correct.
    problem = task.problems("eval")[0]
    assert not task.verify(problem, " right").formatted
    wrong = int(problem.answer) % 15 + 1
    assert task.verify(problem, f"<guess>{wrong}</guess>").formatted
    assert not task.verify(problem, f"<guess>{wrong}</guess>").correct


@pytest.mark.parametrize("name", ["lookup", "guess_number"])
def test_a_policy_that_plays_well_wins_through_the_episode_loop(name):
    """A scripted policy: lookups along the chain, or binary search, one turn per round."""
    options = {"hops": 2} if name == "lookup" else {}
    task = make_task(name, train_size=4, dev_size=0, eval_size=0, **options)
    problems = task.problems("train")

    def lookup_policy(context, k):
        said = context.split("? A:")[1]
        if "=" not in said:
            return " <lookup>" + context.split("? A:")[0].split()[-1] + "</lookup>"
        last = said.rsplit("=", 1)[1]
        if said.count("<lookup>") < 2:
            return f" <lookup>{last}</lookup>"
        return f" \\boxed{{{last}}}" + EOS

    def binary_search(context, k):
        low, high = 1, 15
        for guess, heard in zip(
            [int(g) for g in context.split("<guess>")[1:] for g in [g.split("<")[0]]],
            context.split("</guess>")[1:],
            strict=True,
        ):
            low, high = (guess + 1, high) if heard.startswith(" higher") else (low, guess - 1)
        return f" <guess>{(low + high) // 2}</guess>"

    engine = ScriptedEngine(TOK, lookup_policy if name == "lookup" else binary_search)
    params = SamplingParams(group_size=2, max_new_tokens=task.default_max_new_tokens)
    gen = generate_for(engine, task, problems, params, torch.Generator())
    verdicts = [task.verify(problems[i // 2], text) for i, text in enumerate(gen.texts)]
    assert all(v.correct for v in verdicts), gen.texts
    turns = [e.turns for e in gen.episodes]
    if name == "lookup":
        assert turns == [3] * 8 and all(e.tool_calls == 2 for e in gen.episodes)
    else:  # binary search over 1..15: at most 4 guesses, each a turn
        assert max(turns) <= 4 and all(e.ended_by == "env" for e in gen.episodes)


def test_the_warm_start_leaves_observations_out_of_its_loss():
    """`observation_spans` marks the environment's replies in a target; the supervised step
    averages −log π over the other target tokens and EOS only (the replies stay in the
    context). Checked against the loss computed by hand from one forward."""
    from rlvr.models.logprobs import response_logprobs
    from rlvr.models.tiny import build_tiny_policy, tiny_qwen2_config
    from rlvr.warmstart.supervised import _train_step

    lookup = LookupTask(hops=2, train_size=2, dev_size=0, eval_size=0)
    problem = lookup.problems("train")[0]  # " <lookup>kavo</lookup>=belu ..."
    replies = [problem.target[a:b] for a, b in lookup.observation_spans(problem.target)]
    assert replies == [f"={parent}" for parent in lookup.facts(problem).values()]
    guess = make_task("guess_number", train_size=1, dev_size=0, eval_size=0)
    game = guess.problems("train")[0].target  # " <guess>10</guess> lower ... right"
    replies = [game[a:b] for a, b in guess.observation_spans(game)]
    assert len(replies) == game.count("</guess>") and replies[-1] == " right"
    assert set(replies[:-1]) <= {" higher", " lower"}

    batch = lookup.problems("train")
    config = tiny_qwen2_config(TOK.vocab_size, hidden=32, layers=2, heads=2, kv_heads=2)
    model = build_tiny_policy(config, seed=0)
    ids = [[*TOK.encode(p.target), TOK.eos_token_id] for p in batch]
    response = torch.zeros((2, max(map(len, ids))), dtype=torch.long)
    mask = torch.zeros(response.shape)
    for b, row in enumerate(ids):
        response[b, : len(row)], mask[b, : len(row)] = torch.tensor(row), 1.0
    prompts = [TOK.encode(p.prompt) for p in batch]
    with torch.no_grad():
        logprobs = response_logprobs(model, prompts, response, mask, TOK.pad_token_id)
    kept = mask.clone()
    for b, problem in enumerate(batch):  # one character, one token: spans index tokens
        for start, end in lookup.observation_spans(problem.target):
            kept[b, start:end] = 0.0
    assert kept.sum() == mask.sum() - 2 * 2 * 5  # two rows, two replies of "=" + 4 letters
    expected = -(logprobs * kept).sum() / kept.sum()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    loss = _train_step(model, TOK, batch, optimizer, lookup.observation_spans)
    # The step's forward and this no-grad one add in other orders: a mean of log-probs
    # each within τ (rounding_testlib.logprob_atol; a random model's logits: M = 4).
    tau = logprob_atol(config, RANDOM_LOGIT_SCALE)
    assert loss == pytest.approx(expected.item(), abs=tau)
    assert abs(loss - (-logprobs.sum() / mask.sum()).item()) > tau  # observations counted
