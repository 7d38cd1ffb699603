"""examples/service_opd.py: the teacher scores the student's exact ids, β = 0 trains on
nothing, and `--fast` (a self-teacher) runs within its 120-line budget."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from rlvr.service import APIFuture, ModelInput, SamplingParams
from rlvr.tasks import make_task

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "service_opd.py"


@pytest.fixture(scope="module")
def opd():
    spec = importlib.util.spec_from_file_location("service_opd_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class RecordingTeacher:
    """Returns fixed log-probs and keeps the ids it was asked to score."""

    def __init__(self, logprobs: list[float | None]) -> None:
        self.logprobs, self.seen = logprobs, None

    def compute_logprobs(self, prompt: ModelInput) -> APIFuture[list[float | None]]:
        self.seen = prompt.to_ints()
        return APIFuture(self.logprobs)


def test_teacher_scores_the_student_exact_ids(opd):
    # Teacher prompt [5, 6], student tokens [7, 8, 1]: the teacher reads 5 6 7 8 1, and
    # positions 2, 3, 4 (log-probs −0.2, −0.3, −0.4) are those of 7, 8, 1; None and −0.1
    # belong to the prompt.
    teacher = RecordingTeacher([None, -0.1, -0.2, -0.3, -0.4])
    assert opd.teacher_logprobs(teacher, [5, 6], [7, 8, 1]) == [-0.2, -0.3, -0.4]
    assert teacher.seen == [5, 6, 7, 8, 1]


def test_self_teacher_reproduces_the_sampler_logprobs(opd, service):
    # The same weights score the sampled ids as the sampler drew them: k_t = 0 per token.
    trainer = service.create_training_client("embedded:arithmetic")
    sampler = trainer.save_weights_and_get_sampling_client("student")
    teacher = service.create_training_client("embedded:arithmetic")
    teacher = teacher.save_weights_and_get_sampling_client("teacher")
    problem = make_task("arithmetic").problems("eval")[0]
    prompt = trainer.get_tokenizer().encode(problem.prompt)
    params = SamplingParams(max_tokens=8, temperature=1.0, seed=3)
    (seq,) = sampler.sample(ModelInput.from_ints(prompt), 1, params).result().sequences
    scored = opd.teacher_logprobs(teacher, prompt, seq.tokens)
    assert len(scored) == len(seq.tokens)
    assert scored == pytest.approx(seq.logprobs, abs=1e-5)


def test_advantages_hand_worked_and_zero_at_beta_zero(opd):
    # log π_S = (−1.0, −0.5), log π_T = (−0.2, −0.5): log π_S − log π_T = (−0.8, 0), so at
    # β = 0.5, A = −0.5·(−0.8, 0) = (0.4, 0): the token the teacher prefers is pushed up.
    assert opd.opd_advantages([-1.0, -0.5], [-0.2, -0.5], 0.5) == pytest.approx([0.4, 0.0])
    assert opd.opd_advantages([-1.0, -0.5, -3.0], [-0.2, -2.0, -0.1], 0.0) == [0.0] * 3


def test_datum_is_shifted_by_one(opd):
    # Prompt [3, 4], tokens [5, 1]: input 3 4 5 predicts 4 5 1; the prompt's one target
    # (4) carries log-prob and advantage 0.
    datum = opd.make_datum([3, 4], [5, 1], [-0.1, -0.2], [0.5, 0.6])
    assert datum.model_input.to_ints() == [3, 4, 5]
    assert list(datum.loss_fn_inputs["target_tokens"]) == [4, 5, 1]
    assert list(datum.loss_fn_inputs["logprobs"]) == [0.0, -0.1, -0.2]
    assert list(datum.loss_fn_inputs["advantages"]) == [0.0, 0.5, 0.6]


def test_a_teacher_is_required_outside_fast(opd, capsys):
    with pytest.raises(SystemExit):
        opd.main([])
    assert "--teacher PATH is required" in capsys.readouterr().err


def test_example_runs_fast(opd, capsys):
    history = opd.main(["--fast"])
    kl, accuracy = history["distill/reverse_kl"], history["eval/accuracy"]
    assert len(kl) == 3 and all(math.isfinite(k) for k in kl)
    assert abs(kl[0]) < 1e-5  # step 0: the student is the self-teacher's weights
    assert len(accuracy) == 2 and all(0.0 <= a <= 1.0 for a in accuracy)
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in printed[:3]] == ["step 0", "step 1", "step 2"]
    assert printed[3].startswith("eval/accuracy on 2 held-out problems: ")
    assert len(EXAMPLE.read_text().splitlines()) <= 120
