"""A teacher scores image prompts with their pictures (issue 46, item 1: "scorer (π_old,
π_ref, teacher) … all see the same pixels"): on the student's own prompts (OPD) the
teacher's forward gets each row's image, so perturbing one image moves exactly its rows'
teacher log-probs; a teacher prompt rebuilt from text (OPSD's prompt_template) would drop
the pictures, and is refused by name instead of scoring blind."""

from __future__ import annotations

import pytest
import torch
from vision_testlib import TOK, images, rollout_of, small_vlm, vlm_logprob_atol

from rlvr.models import response_logprobs
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.train.records.rollout_record import Rollout
from rlvr.train.teacher_model import Teacher, TeacherSpec
from rlvr.vision import ImagePrompt

TEXTS = ["How many? <image> A:", "<image>Count:"]


def _scored(teacher: Teacher, rollout: Rollout) -> torch.Tensor:
    def forward(model, r: Rollout) -> torch.Tensor:  # the trainer's no-gradient pass
        with torch.no_grad():
            return r.forward_rows(lambda p, y, m: response_logprobs(model, p, y, m, 0), 4)

    return teacher.logprobs(rollout, forward)


@pytest.fixture()
def sampled():
    student, pixels = small_vlm(seed=0), images(2, seed=0)
    prompts = [TOK.encode_images(t, p) for t, p in zip(TEXTS, pixels, strict=True)]
    gen = HFEngine(student, TOK).generate_ids(
        prompts, SamplingParams(group_size=2, max_new_tokens=5), torch.Generator()
    )
    return gen, pixels


def test_a_teacher_on_the_students_prompts_sees_each_rows_picture(sampled):
    gen, pixels = sampled
    teacher_model = small_vlm(seed=1)  # another VLM: the teacher is not the student
    teacher = Teacher(teacher_model, TOK, TeacherSpec("teacher-dir"), problems=[])
    before = _scored(teacher, rollout_of(gen))
    perturbed = pixels.clone()
    perturbed[0, 0, :, :4, :4] += 0.5  # image 0 only: rows 0 and 1 show it
    moved_ids = [ImagePrompt(p, perturbed[i // 2], p.spans) for i, p in enumerate(gen.prompt_ids)]
    after = _scored(teacher, rollout_of(gen, moved_ids))
    mask = gen.response_mask.bool()
    atol = vlm_logprob_atol(teacher_model)
    assert (after[:2] - before[:2])[mask[:2]].abs().min() > 0  # every token of image 0's rows
    assert torch.equal(after[2:], before[2:])  # rows of image 1: bit for bit
    # and the teacher is not the student: its log-probs differ beyond rounding (atol: two
    # forwards of one VLM that add in other orders, vision_testlib.vlm_logprob_atol)
    student = _scored(Teacher(small_vlm(seed=0), TOK, TeacherSpec("x"), []), rollout_of(gen))
    assert (student - before)[mask].abs().max() > atol


def test_a_teacher_prompt_template_on_image_prompts_is_refused(sampled):
    gen, _ = sampled
    spec = TeacherSpec("self", prompt_template="{prompt} (the answer is {answer})")
    teacher = Teacher(small_vlm(seed=1), TOK, spec, problems=[])
    with pytest.raises(ValueError) as err:
        _scored(teacher, rollout_of(gen))
    assert str(err.value) == (
        "teacher.prompt_template='{prompt} (the answer is {answer})' rebuilds the teacher's "
        "prompt from text, which would drop the prompts' pictures; a teacher on a task that "
        "shows images reads the student's own prompt (leave out prompt_template)"
    )
