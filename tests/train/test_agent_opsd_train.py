"""AgentOPSD in the one loop (docs/20-agent-opsd.md): the current policy as teacher, a
teacher prompt picked per row, turn spans from the episode record, and a 2-step run on a
multi-turn task with the embedded model whose turn weights move off 1."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from local_model import local_trainer

from rlvr.envs.household import TASK_TYPES
from rlvr.rollout.episodes import EpisodeRecord
from rlvr.runlog.logger import read_metrics
from rlvr.tasks.base import Problem
from rlvr.tasks.household import HouseholdTask
from rlvr.train import run_training
from rlvr.train.config import resolve_config
from rlvr.train.records.rollout_record import Rollout
from rlvr.train.teacher_model import (
    SkillSpec,
    Teacher,
    TeacherSpec,
    rollout_turn_ids,
    teacher_text,
)

CURRENT = {"model": "current", "prompt_template": "{prompt}{answer}\n{prompt}"}
ECHO = {
    "environment": "user_envs:Echo",
    "episode": {"max_turns": 4, "max_turn_tokens": 3},
    "max_new_tokens": 24,
}
SKILLS = {t: f"skill for {t.replace('_', ' ')}." for t in TASK_TYPES}
BY_TYPE = {"field": "answer", "pattern": r"^([a-z_]+)/", "texts": SKILLS}
DIGITS = "test_agent_opsd_train:digits"


def digits(prompts, completions, **_):
    """A reward with variance on a random model's text: the share of digits."""
    return [sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]


# ------------------------------------------------------------------ the current policy


def test_the_current_teacher_scores_with_the_weights_of_each_step(tmp_path):
    # digits() gives the random model's groups variance, so the step moves the weights;
    # AdamW's first step moves each by ~lr = 1e-2, far beyond rounding.
    trainer = local_trainer(tmp_path, recipe="agent_opsd", teacher=CURRENT, reward_funcs=[DIGITS])
    for group in trainer.optimizer.param_groups:
        group["lr"] = 1e-2
    assert trainer.teacher.model is trainer.model  # not a copy: the live policy
    rollout = trainer._collect().rollout
    before = trainer.teacher.logprobs(rollout, trainer._logprobs)
    student = trainer._logprobs(trainer.model, rollout)
    policy = rollout.loss_mask > 0
    assert not torch.equal(before[policy], student[policy])  # its own prompt, not the student's
    metrics = trainer.train_step()
    assert metrics["train/update_skipped"] == 0.0
    after = trainer.teacher.logprobs(rollout, trainer._logprobs)
    assert (after[policy] - before[policy]).abs().max() > 1e-3
    # ... and exactly what the updated policy says after the teacher's prompt.
    prompts = trainer.teacher.prompt_ids(rollout)
    fresh = trainer._logprobs(trainer.model, dataclasses.replace(rollout, prompt_ids=prompts))
    torch.testing.assert_close(after, fresh, rtol=0, atol=0)


def test_a_self_teacher_stays_at_step_0(tmp_path):
    # The contrast: 'self' is the frozen copy, whatever the update did.
    self_teacher = {**CURRENT, "model": "self"}
    trainer = local_trainer(
        tmp_path, recipe="agent_opsd", teacher=self_teacher, reward_funcs=[DIGITS]
    )
    for group in trainer.optimizer.param_groups:
        group["lr"] = 1e-2
    assert trainer.teacher.model is not trainer.model
    rollout = trainer._collect().rollout
    before = trainer.teacher.logprobs(rollout, trainer._logprobs)
    assert trainer.train_step()["train/update_skipped"] == 0.0
    after = trainer.teacher.logprobs(rollout, trainer._logprobs)
    torch.testing.assert_close(after, before, rtol=0, atol=0)


# ------------------------------------------------------------------ the prompt per row


def test_the_skill_follows_the_rows_task_type():
    task = HouseholdTask(train_size=60, dev_size=6, eval_size=6)
    problems = task.problems("train")
    skills = SkillSpec.from_dict(BY_TYPE)
    seen = set()
    for problem in problems:
        kind = problem.answer.split("/")[0]
        text = teacher_text("{skill}\n{prompt}", problem, skills)
        assert text == f"{SKILLS[kind]}\n{problem.prompt}"
        seen.add(kind)
    assert len(seen) >= 3  # rows of several task types got several skills


def test_the_teacher_prompt_ids_are_per_row():
    problems = [
        Problem("h/train/0", "P0>", "pick_clean_then_place_in_recep/5", ""),
        Problem("h/train/1", "P1>", "pick_and_place_simple/9", ""),
    ]
    spec = TeacherSpec.from_dict(
        {**CURRENT, "prompt_template": "{skill} {prompt}", "skills": BY_TYPE}
    )

    class Chars:  # a tokenizer of code points, enough to read the ids back
        def encode(self, text):
            return [ord(c) for c in text]

    teacher = Teacher(None, Chars(), spec, problems)
    rows = type("Rows", (), {"problem_uids": ["h/train/1", "h/train/0", "h/train/1"]})()
    texts = ["".join(map(chr, ids)) for ids in teacher.prompt_ids(rows)]
    pick, clean = SKILLS["pick_and_place_simple"], SKILLS["pick_clean_then_place_in_recep"]
    assert texts == [f"{pick} P1>", f"{clean} P0>", f"{pick} P1>"]


@pytest.mark.parametrize(
    ("teacher", "needle"),
    [
        ({"model": "current"}, "teacher.model='current' needs teacher.prompt_template"),
        ({**CURRENT, "skills": BY_TYPE}, "does not use"),
        ({**CURRENT, "skills": {**BY_TYPE, "by": 1}}, "unknown teacher.skills key(s) ['by']"),
        ({**CURRENT, "skills": {**BY_TYPE, "texts": {}}}, "texts must be a non-empty mapping"),
        ({**CURRENT, "skills": {**BY_TYPE, "pattern": "("}}, "must be a regular expression"),
    ],
)
def test_teacher_config_errors_name_the_field(teacher, needle):
    with pytest.raises(ValueError) as err:
        resolve_config(
            {"task_options": {"digits": 2, "ops": "+"}, "recipe": "agent_opsd", "teacher": teacher}
        )
    assert needle in str(err.value)


def test_a_recipe_that_reads_a_teacher_needs_one():
    with pytest.raises(ValueError, match="advantage='turn_belief', which reads a teacher"):
        resolve_config({"task_options": {"digits": 2, "ops": "+"}, "recipe": "agent_opsd"})


def test_a_row_the_skills_cannot_place_is_named():
    problem = Problem("h/train/3", "P>", "fly_a_kite/1", "")
    with pytest.raises(ValueError, match=r"no entry 'fly_a_kite' \(problem 'h/train/3'\)"):
        teacher_text("{skill}{prompt}", problem, SkillSpec.from_dict(BY_TYPE))
    other = SkillSpec.from_dict({**BY_TYPE, "field": "difficulty"})
    with pytest.raises(ValueError, match="'difficulty' is not a field of problem 'h/train/3'"):
        teacher_text("{skill}{prompt}", problem, other)
    with pytest.raises(ValueError, match=r"pattern='\^\(\[a-z_\]\+\)/' does not match"):
        teacher_text("{skill}", Problem("h/train/4", "P>", "7", ""), SkillSpec.from_dict(BY_TYPE))


# ------------------------------------------------------------------ turn spans


def _rollout(loss_rows: list[list[int]], forced_rows: list[list[int]], episodes) -> Rollout:
    n, width = len(loss_rows), len(loss_rows[0])
    mask = torch.tensor(
        [
            [1.0 if lo or f else 0.0 for lo, f in zip(a, b, strict=True)]
            for a, b in zip(loss_rows, forced_rows, strict=True)
        ]
    )
    zeros = torch.zeros(n)
    return Rollout(
        prompt_ids=[[5]] * n,
        response_ids=torch.zeros(n, width, dtype=torch.long),
        response_mask=mask,
        sampler_logprobs=torch.zeros(n, width),
        truncated=torch.zeros(n, dtype=torch.bool),
        group_ids=torch.zeros(n, dtype=torch.long),
        problem_uids=["p"] * n,
        texts=[""] * n,
        correct=zeros,
        formatted=zeros,
        rewards=zeros,
        forced_mask=torch.tensor(forced_rows, dtype=torch.float32),
        episodes=episodes,
    )


def test_turn_ids_by_hand_from_the_record():
    # Row 0: P P O O P O P pad (spans [0,2) [4,5) [6,7)); row 1: a single-turn response
    # without a record: one turn over its policy tokens; row 2: an empty observation
    # between two turns (P P | P): the record still tells them apart, a mask could not.
    forced = [[0, 0, 1, 1, 0, 1, 0, 0], [0] * 8, [0] * 8]
    policy = [[1, 1, 0, 0, 1, 0, 1, 0], [1, 1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0, 0]]
    records = [
        EpisodeRecord(spans=[(0, 2), (4, 5), (6, 7)]),
        None,
        EpisodeRecord(spans=[(0, 2), (2, 3)]),
    ]
    ids = rollout_turn_ids(_rollout(policy, forced, records))
    assert ids.tolist() == [
        [1, 1, 0, 0, 2, 0, 3, 0],
        [1, 1, 1, 1, 1, 0, 0, 0],
        [1, 1, 2, 0, 0, 0, 0, 0],
    ]
    # A batch without episodes (a single-turn task): None, each response one turn.
    assert rollout_turn_ids(_rollout(policy, forced, None)) is None


def test_turn_spans_of_real_episodes_tile_the_policy_tokens(tmp_path):
    # Echo answers every turn: its record's spans hold exactly the policy tokens, one
    # turn per span, with only observation tokens between two spans.
    trainer = local_trainer(tmp_path, recipe="agent_opsd", teacher=CURRENT, **ECHO)
    rollout = trainer._collect().rollout
    ids = rollout_turn_ids(rollout)
    assert torch.equal(ids > 0, rollout.loss_mask > 0)
    for row, record in enumerate(rollout.episodes):
        assert len(record.spans) == record.turns
        assert ids[row].max() == record.turns
        for (_, end), (start, _) in zip(record.spans, record.spans[1:], strict=False):
            assert (rollout.forced_mask[row, end:start] == 1).all() and end <= start
    assert max(e.turns for e in rollout.episodes) > 1


# ------------------------------------------------------------------ end to end


def test_two_steps_on_the_calculator_episodes_move_the_turn_weights(tmp_path):
    """The calculator with its tool (episodes: a call, the `=result` observation, the
    answer), the embedded policy warm-started as tests/train/test_train_episodes.py does
    (cached), the current policy as teacher with a skill per answer's last digit. The turn
    weights must leave 1 somewhere: mean |w − 1| > 0 is logged and used."""
    skills = {"field": "answer", "pattern": r"(\d)$", "texts": {str(d): f"{d}!" for d in range(10)}}
    cfg = resolve_config(
        {
            "task": "calculator",
            "warm_target": 1.0,
            "warm_max_steps": 100,
            "recipe": "agent_opsd",
            "teacher": {"model": "current", "prompt_template": "{skill}{prompt}", "skills": skills},
            "reward_funcs": [DIGITS],  # the calculator's warm start wins no episode yet
            "steps": 2,
            "prompts_per_step": 4,
            "group_size": 4,
            "eval_size": 8,
            "eval_every": 2,
            "progress": False,
            "out": str(tmp_path / "run"),
        }
    )
    with pytest.warns(UserWarning, match="warm start on 'calculator' stopped after 100 steps"):
        run_training(cfg)
    steps = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["step"] >= 1]
    assert [r["step"] for r in steps] == [1, 2]
    for record in steps:
        assert record["train/update_skipped"] == 0.0 and math.isfinite(record["loss/policy"])
        assert 0.8 <= record["turn/weight_min"] <= record["turn/weight_max"] <= 1.2
    assert max(r["turn/turns_mean"] for r in steps) > 1.0  # multi-turn episodes
    assert max(r["turn/weight_dev_mean"] for r in steps) > 0.0  # the mechanism is active
    assert max(r["turn/evidence_abs_mean"] for r in steps) > 0.0


def test_two_steps_on_the_household_world_with_a_skill_per_task_type(tmp_path):
    """The household world through the loop: a random local Qwen2 with room for a game
    (the embedded model's 128 positions hold none), the teacher shown its row's task-type
    skill, turns from the episodes' records. The random policy never wins, so the reward
    is `digits` (in [0, 1], see the chapter on rewards ≤ 0)."""
    trainer = local_trainer(
        tmp_path,
        model_attributes={"max_position_embeddings": 2048},
        task="household",
        task_options={"max_steps": 3, "train_size": 40, "dev_size": 4, "eval_size": 4},
        max_new_tokens=200,
        recipe="agent_opsd",
        reward_funcs=[DIGITS],
        teacher={"model": "current", "prompt_template": "{skill}\n{prompt}", "skills": BY_TYPE},
    )
    rollout = trainer._collect().rollout
    for uid, ids in zip(rollout.problem_uids, trainer.teacher.prompt_ids(rollout), strict=True):
        kind = trainer.teacher.problems[uid].answer.split("/")[0]
        assert trainer.tokenizer.decode(ids).startswith(SKILLS[kind] + "\n")
    assert max(e.turns for e in rollout.episodes) > 1
    metrics = [trainer.train_step() for _ in range(2)]
    assert all(m["train/update_skipped"] == 0.0 for m in metrics)
    assert max(m["turn/turns_mean"] for m in metrics) > 1.0
    assert max(m["turn/weight_dev_mean"] for m in metrics) > 0.0
