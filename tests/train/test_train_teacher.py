"""The teacher of on-policy distillation in the loop (rlvr/train/teacher_model.py): what it
sees, that it scores the student's exact ids, tokenizer mismatches, config errors, and a
2-step run with teacher "self" on a tiny local model."""

from __future__ import annotations

import math

import pytest
import torch
from local_model import local_policy_dir, local_trainer
from rounding_testlib import logprob_atol

from rlvr.models.tokenizer import CharTokenizer
from rlvr.tasks.base import Problem
from rlvr.tasks.dataset_task import DataProblem
from rlvr.train.config import resolve_config
from rlvr.train.teacher_model import check_same_tokenizer, teacher_text

OPSD = {"model": "self", "prompt_template": "{prompt}{answer}\n{prompt}"}


def test_teacher_text_holds_what_the_student_never_sees():
    problem = Problem("arithmetic/train/0", "Q: 30+31=? A:", "61", " \\boxed{61}")
    assert teacher_text("{prompt}{answer}\n{prompt}", problem) == "Q: 30+31=? A:61\nQ: 30+31=? A:"
    row = DataProblem("d/train/1", "What is 2+2?", "4", " \\boxed{4}", {"solution": "2+2=4"})
    text = teacher_text("{prompt}\nReference: {solution} (so {answer})", row)
    assert text == "What is 2+2?\nReference: 2+2=4 (so 4)"
    with pytest.raises(ValueError, match=r"uses 'solution'.*fields: answer, prompt, row, target"):
        teacher_text("{prompt} {solution}", problem)


def _annotated(trainer):
    rollout = trainer._collect().rollout
    trainer._prepare(rollout)
    return rollout


def test_the_teacher_sees_the_answer_and_the_student_does_not(tmp_path):
    trainer = local_trainer(tmp_path, recipe="opsd", teacher=OPSD)
    rollout = _annotated(trainer)
    teacher_prompts = trainer.teacher.prompt_ids(rollout)
    for uid, student, teacher in zip(
        rollout.problem_uids, rollout.prompt_ids, teacher_prompts, strict=True
    ):
        problem = trainer.teacher.problems[uid]
        student_text = trainer.tokenizer.decode(student)
        assert student_text == problem.prompt and problem.answer not in student_text
        assert (
            trainer.tokenizer.decode(teacher)
            == f"{problem.prompt}{problem.answer}\n{problem.prompt}"
        )


def test_teacher_logprobs_are_of_the_students_exact_ids(tmp_path):
    # A direct forward of (teacher prompt ids + the row's response ids) through the teacher:
    # the logit at position P − 1 + t scores response token t.
    trainer = local_trainer(tmp_path, recipe="opsd", teacher=OPSD)
    rollout = _annotated(trainer)
    teacher_prompts = trainer.teacher.prompt_ids(rollout)
    assert rollout.teacher_logprobs.shape == rollout.response_ids.shape
    for b in range(len(rollout)):
        n = int(rollout.response_mask[b].sum())
        prompt = teacher_prompts[b]
        ids = torch.tensor([prompt + rollout.response_ids[b, :n].tolist()])
        with torch.no_grad():
            logits = trainer.teacher.model(input_ids=ids).logits[0].float()
        logp = torch.log_softmax(logits, -1)
        positions = torch.arange(len(prompt) - 1, len(prompt) - 1 + n)
        expected = logp[positions, rollout.response_ids[b, :n]]
        # The annotation's batched forward and this one add in other orders: within τ.
        tau = logprob_atol(trainer.teacher.model.config)
        torch.testing.assert_close(rollout.teacher_logprobs[b, :n], expected, atol=tau, rtol=0)
    # The teacher read a longer prompt, so its log-probs differ from the student's.
    assert not torch.allclose(rollout.teacher_logprobs, rollout.old_logprobs)


def test_two_steps_with_a_self_teacher_log_the_metrics(tmp_path):
    trainer = local_trainer(tmp_path, recipe="opsd", teacher=OPSD)
    before = {k: v.clone() for k, v in trainer.teacher.model.state_dict().items()}
    for _ in range(2):
        metrics = trainer.train_step()
        for key in ("distill/reverse_kl", "distill/reverse_kl_std", "distill/reverse_kl_seq"):
            assert math.isfinite(metrics[key]), key
        assert metrics["time/teacher_s"] >= 0.0
        assert metrics["train/update_skipped"] == 0.0 and math.isfinite(metrics["loss/policy"])
        assert "distill/reverse_kl_correct" in metrics or "distill/reverse_kl_wrong" in metrics
    # The student moved; the step-0 teacher did not.
    after = trainer.teacher.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert any(not torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())


def test_a_tokenizer_mismatch_is_refused_in_one_line(tmp_path):
    student, teacher = CharTokenizer(), CharTokenizer(CharTokenizer().characters[::-1])
    with pytest.raises(ValueError) as err:
        check_same_tokenizer(student, teacher, "other", [])
    assert "\n" not in str(err.value)
    assert "does not share the student's tokenizer ('The answer is 42.' encodes as" in str(
        err.value
    )
    # A checkpoint directory whose tokenizer has fewer characters: its vocabulary size.
    other = local_policy_dir(tmp_path)
    CharTokenizer("0123456789+=?:AQ ").save(other)
    with pytest.raises(ValueError, match=r"vocabulary of 19 tokens vs the student's 98"):
        local_trainer(tmp_path / "s", recipe="opd", teacher={"model": other})


def test_a_checkpoint_directory_teacher_scores_the_students_prompt(tmp_path):
    # Without a template the teacher reads the student's own prompt ids.
    teacher_dir = local_policy_dir(tmp_path / "t", initializer_range=0.5)
    trainer = local_trainer(tmp_path, recipe="opd", teacher={"model": teacher_dir})
    rollout = _annotated(trainer)
    assert trainer.teacher.prompt_ids(rollout) == rollout.prompt_ids
    assert not torch.allclose(rollout.teacher_logprobs, rollout.old_logprobs)


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"recipe": "opd"}, "recipe 'opd' has teacher_kl_coef=1 but the config has no teacher"),
        ({"recipe": "grpo", "teacher": OPSD}, "cannot take effect: recipe 'grpo'"),
        ({"recipe": "opsd", "teacher": {"model": "self"}}, "needs teacher.prompt_template"),
        ({"recipe": "opd", "teacher": {"model": "x/y", "temp": 1}}, "unknown teacher key"),
        ({"recipe": "opd", "teacher": {"model": "embedded"}}, "use 'self'"),
    ],
)
def test_config_errors_name_the_field(values, needle):
    with pytest.raises(ValueError) as err:
        resolve_config({"task_options": {"digits": 2, "ops": "+"}, **values})
    assert needle in str(err.value)


def test_a_lora_self_teacher_is_the_adapter_disabled_base(tmp_path):
    """With LoRA, `self` is the base without adapters (as π_ref): after a step that moved
    the adapters, the teacher still scores as the base model saved on disk does."""
    from rlvr.models.hf_policy import AdapterDisabledReference

    lora = {"lora": {"rank": 4, "alpha": 8, "target_modules": "all-linear"}}
    trainer = local_trainer(tmp_path, recipe="opsd", teacher=OPSD, policy=lora, lr=1e-2)
    assert isinstance(trainer.teacher.model, AdapterDisabledReference)
    trainer.train_step()
    rollout = _annotated(trainer)
    adapters = {k: v for k, v in trainer.model.state_dict().items() if "lora_B" in k}
    assert any(v.abs().sum() > 0 for v in adapters.values())  # the adapters moved
    ids = [trainer.teacher.prompt_ids(rollout)[0] + rollout.response_ids[0, :2].tolist()]
    from transformers import AutoModelForCausalLM

    disk = AutoModelForCausalLM.from_pretrained(tmp_path / "local_model")  # the base as saved
    with torch.no_grad():
        base = disk(input_ids=torch.tensor(ids)).logits[0].float().log_softmax(-1)
        taught = trainer.teacher.model(input_ids=torch.tensor(ids)).logits[0].float()
    # The same weights through peft's disabled adapters and the plain model: τ at most.
    tau = logprob_atol(disk.config)
    torch.testing.assert_close(taught.log_softmax(-1), base, atol=tau, rtol=0)
