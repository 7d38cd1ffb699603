"""Dynamic sampling with refill, its cost accounting, the skipped update, retirement."""

from __future__ import annotations

import pytest
import torch

from rlvr.algo import prepare_batch
from rlvr.algo.recipes import get_recipe
from rlvr.rollout import Generation, SamplingParams
from rlvr.tasks import Problem
from rlvr.train import Trainer
from rlvr.train.collect import collect_rollouts
from rlvr.train.prompt_pool import PromptPool
from rlvr.train.records.step_metrics import step_metrics
from rlvr.verify import Verdict

G = 4


class ScriptedEngine:
    """Responses spelled out per prompt: the prompt text is the pattern, e.g. '1100'."""

    def sync_weights(self):
        pass

    def generate(self, prompts, params, generator):
        texts = [ch for p in prompts for ch in p[: params.group_size]]
        rows = len(texts)
        lengths = torch.tensor([3 if t == "1" else 5 for t in texts])
        steps = int(lengths.max())
        mask = (torch.arange(steps)[None, :] < lengths[:, None]).float()
        return Generation(
            prompt_ids=[[7]] * rows,
            response_ids=torch.full((rows, steps), 9) * mask.long(),
            response_mask=mask,
            sampler_logprobs=-0.5 * mask,
            truncated=torch.zeros(rows, dtype=torch.bool),
            prompt_index=torch.arange(len(prompts)).repeat_interleave(params.group_size),
            texts=texts,
        )


class PatternTask:
    name = "pattern"

    def verify(self, problem, completion):
        return Verdict(completion == "1", True, completion)


class FixedOrderPool:
    def __init__(self, patterns):
        self.problems = [Problem(f"p{i}", pat, "1", "1") for i, pat in enumerate(patterns)]
        self.position = 0
        self.active_size = len(patterns)

    def next(self, count):
        drawn = self.problems[self.position : self.position + count]
        self.position += count
        return drawn

    def record(self, uid, correct, sampled):
        return False


class Stepped:
    """The collected batch and the step's metrics, as the loop logs them."""

    def __init__(self, collected, metrics):
        self.rollout, self.metrics = collected.rollout, metrics


def _collect(patterns, rounds, per_step=2, dynamic=True, **recipe_fields):
    recipe = get_recipe("dapo", max_refill_rounds=rounds, dynamic_sampling=dynamic, **recipe_fields)
    collected = collect_rollouts(
        ScriptedEngine(),
        PatternTask(),
        FixedOrderPool(patterns),
        recipe,
        SamplingParams(group_size=G),
        per_step,
        torch.Generator(),
    )
    prepared = None
    if collected.rollout is not None:
        r = collected.rollout
        prepared = prepare_batch(
            recipe,
            rewards=r.rewards,
            correct=r.correct,
            truncated=r.truncated,
            response_mask=r.loss_mask,
            group_ids=r.group_ids,
            max_new_tokens=100,  # responses are 3 or 5 tokens: the overlong ramp never applies
        )
    return Stepped(collected, step_metrics(collected, prepared, per_step))


def test_refills_over_several_rounds_until_the_batch_is_full():
    # Round 0: [uniform, mixed] keeps 1; round 1: [uniform, uniform] keeps 0;
    # round 2: [mixed, mixed] keeps 2 → 3 ≥ 2, stop; the third kept group is discarded.
    got = _collect(["1111", "1100", "0000", "1111", "1000", "0110", "1010"], rounds=5)
    m = got.metrics
    assert m["rollout/refill_rounds"] == 2 and m["rollout/candidate_groups"] == 6
    assert m["rollout/kept_groups"] == 2
    assert got.rollout.problem_uids[::G] == ["p1", "p4"]
    # Tokens: a correct response has 3 tokens, a wrong one 5.
    generated = sum(
        3 * p.count("1") + 5 * p.count("0")
        for p in ["1111", "1100", "0000", "1111", "1000", "0110"]
    )
    trained = (3 * 2 + 5 * 2) + (3 * 1 + 5 * 3)  # "1100" and "1000"
    assert m["rollout/generated_tokens"] == generated
    assert m["rollout/trained_tokens"] == trained
    assert m["rollout/discarded_tokens"] == generated - trained


def test_stops_at_the_refill_bound_with_a_partial_batch():
    got = _collect(["1111", "1100", "0000", "1111", "1010", "1010"], rounds=1)
    assert got.metrics["rollout/refill_rounds"] == 1
    assert got.metrics["rollout/kept_groups"] == 1
    assert len(got.rollout) == G


def test_nothing_kept_gives_no_rollout():
    got = _collect(["1111", "0000", "0000", "1111"], rounds=1)
    assert got.rollout is None
    assert got.metrics["rollout/kept_groups"] == 0
    assert got.metrics["rollout/trained_tokens"] == 0
    assert got.metrics["rollout/discarded_tokens"] == got.metrics["rollout/generated_tokens"] > 0


def test_without_dynamic_sampling_everything_is_kept_in_one_round():
    got = _collect(["1111", "0000"], rounds=3, dynamic=False)
    assert got.metrics["rollout/refill_rounds"] == 0 and len(got.rollout) == 2 * G


def test_zero_variance_filter_after_collection_is_counted_as_discarded():
    # Without dynamic sampling both groups are collected; the zero-variance filter of the
    # prepared batch then drops "1111" (12 tokens), so only "1100" is trained:
    # generated 12 + (3+3+5+5) = 28, trained 16, discarded 12; kept 1 of 2 groups.
    got = _collect(["1111", "1100"], rounds=0, dynamic=False, zero_variance_filter=True)
    m = got.metrics
    assert (m["rollout/generated_tokens"], m["rollout/trained_tokens"]) == (28, 16)
    assert m["rollout/discarded_tokens"] == 12
    assert (m["rollout/kept_groups"], m["rollout/candidate_groups"]) == (1, 2)
    assert m["time/discarded_rollout_s"] == pytest.approx(m["time/rollout_s"] * 12 / 28)


def test_all_filtered_batch_skips_the_update(small_config):
    trainer = Trainer(small_config(recipe="dapo", max_refill_rounds=1))
    trainer.engine = ScriptedEngine()  # every response "0" or "1"-only: uniform groups
    trainer.pool = FixedOrderPool(["0000"] * 8)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    with pytest.warns(UserWarning, match="sync_probe is off: the rollout engine ScriptedEngine"):
        metrics = trainer.train_step()
    assert metrics["train/update_skipped"] == 1.0
    assert metrics["rollout/refill_rounds"] == 1.0
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(), strict=True))


def test_retirement_removes_a_prompt_once_it_crosses_the_threshold():
    problems = [Problem(f"q{i}", f"prompt {i}", "1", "1") for i in range(3)]
    pool = PromptPool(problems, seed=0, retire_threshold=0.9)
    assert not pool.record("q1", 7, 8)  # 0.875 < 0.9
    assert pool.record("q1", 8, 8)  # running 15/16 = 0.9375 ≥ 0.9
    assert pool.active_size == 2
    drawn = {p.uid for p in pool.next(30)}
    assert drawn == {"q0", "q2"}


def test_pool_state_round_trips():
    problems = [Problem(f"q{i}", f"prompt {i}", "1", "1") for i in range(5)]
    pool = PromptPool(problems, seed=3, retire_threshold=0.9)
    pool.next(7)
    pool.record("q2", 4, 4)
    clone = PromptPool(problems, seed=3, retire_threshold=0.9)
    clone.load_state_dict(pool.state_dict())
    assert [p.uid for p in clone.next(9)] == [p.uid for p in pool.next(9)]


def test_overlong_ramp_inside_the_answers_is_warned_about(small_config):
    # " \boxed{NNN}" + EOS is up to 13 tokens; 14 − 4 = 10 < 13.
    with pytest.warns(UserWarning, match="overlong"):
        Trainer(small_config(recipe="dapo", max_new_tokens=14, overlong_cache=4))


def test_a_warm_start_short_of_its_target_is_warned_about(small_config, monkeypatch):
    import rlvr.train.loop as loop

    real = loop.load_policy

    def short_of_target(*args, **kwargs):
        model, tokenizer, info = real(*args, **kwargs)
        return model, tokenizer, {**info, "reached_target": False, "dev_accuracy": 0.05}

    monkeypatch.setattr(loop, "load_policy", short_of_target)
    with pytest.warns(UserWarning, match="dev accuracy 0.05"):
        Trainer(small_config(recipe="grpo"))
