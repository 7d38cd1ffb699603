"""The tinker-cookbook's rl_loop, transcribed in tinker_rl_loop.py, runs unmodified against
the local service through the `tinker` drop-in: two steps on the embedded model, with the
learning signal plumbed through (finite loss, rewards recorded, a fresh sampler per step,
the old one still drawing from its own step's weights, LoRA weights moved), and its first step equal to rlvr's own loss.

rl_loop's step is Σ over every response token of importance_sampling with Â_i = r_i −
mean(r_group): rlvr's `policy_loss` with the `reinforce` surrogate (−sg(ρ)·Â·log π has the
same gradient ρ·Â·∇log π), π_old = the sampler's log-probs, and loss weights 1 on every
response token (a plain sum, no aggregation).
"""

from __future__ import annotations

import copy
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rounding_testlib import assert_within, forward_terms, reorder_atol

from rlvr.algo.loss import policy_loss
from rlvr.algo.recipes import Recipe
from rlvr.models.logprobs import response_logprobs
from rlvr.service import TrainingClient
from rlvr.service.as_tinker import installed

LOOP = Path(__file__).with_name("tinker_rl_loop.py")
REPO = Path(__file__).parents[2]


class Recorder:
    """Wraps the TrainingClient calls the loop makes, to look at what went through."""

    def __init__(self, monkeypatch):
        self.clients, self.samplers, self.datums, self.grads, self.before = [], [], [], [], []
        fb, step, sampler = (
            TrainingClient.forward_backward,
            TrainingClient.optim_step,
            TrainingClient.save_weights_and_get_sampling_client,
        )

        def forward_backward(client, datums, loss_fn, loss_fn_config=None):
            self.clients.append(client)
            self.datums.append((list(datums), loss_fn))
            self.before.append(copy.deepcopy(client.model))
            return fb(client, datums, loss_fn, loss_fn_config)

        def optim_step(client, adam_params):
            self.grads.append([p.grad.clone() for p in client.trainable])
            return step(client, adam_params)

        def save_weights(client, name=None):
            self.samplers.append(sampler(client, name))
            return self.samplers[-1]

        monkeypatch.setattr(TrainingClient, "forward_backward", forward_backward)
        monkeypatch.setattr(TrainingClient, "optim_step", optim_step)
        monkeypatch.setattr(TrainingClient, "save_weights_and_get_sampling_client", save_weights)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tinker")
    with pytest.MonkeyPatch.context() as monkeypatch:
        recorder = Recorder(monkeypatch)
        with installed(root=str(root)):
            loop = runpy.run_path(str(LOOP))  # `import tinker` resolves to the drop-in
            config = loop["Config"](log_path=str(root / "log"), max_steps=2, batch_size=2)
            metrics = loop["main"](config)
    assert "tinker" not in sys.modules or sys.modules["tinker"].__name__ == "tinker"
    return metrics, recorder, root


def test_two_steps_plumb_the_learning_signal(run):
    metrics, recorder, root = run
    assert [m["progress/batch"] for m in metrics] == [0, 1]
    assert len(recorder.datums) == 2  # both batches had a group with mixed rewards
    for m in metrics:
        assert 0 < m["reward/total"] < 1 and torch.isfinite(torch.tensor(m["loss:sum"]))
    assert [m["optim/step"] for m in metrics] == [1, 2]
    # one fresh sampler per step; the first keeps step 0's weights after both steps: it
    # scores exactly as a client over the copy taken before step 1 (same weights, same
    # computation, so to the bit)
    assert len(recorder.samplers) == 2
    client = recorder.clients[-1]
    prompt = recorder.datums[0][0][0].model_input
    then = TrainingClient(recorder.before[0], client.tokenizer, root).compute_logprobs(prompt)
    assert recorder.samplers[0].compute_logprobs(prompt).result() == then
    assert recorder.samplers[1].compute_logprobs(prompt).result() != then
    assert client.is_lora and client.lora.rank == 32 and client.step == 2
    before = dict(recorder.before[0].named_parameters())
    moved = [n for n, p in client.model.named_parameters() if not torch.equal(p, before[n])]
    assert moved and all("lora_" in n for n in moved)
    assert (root / "final" / "state" / "trainer_state.pt").is_file()  # save_state ("both")
    assert (root / "final" / "sampler" / "config.json").is_file()  # save_weights_for_sampler
    assert (root / "log" / "checkpoints.jsonl").read_text().count('"name": "final"') == 1


def test_the_first_step_is_rlvrs_reinforce_sum(run):
    _, recorder, _ = run
    datums, loss_fn = recorder.datums[0]
    assert loss_fn == "importance_sampling"
    model = recorder.before[0]
    prompts, responses, olds, advantages = [], [], [], []
    for datum in datums:
        inputs = {k: v.to_torch() for k, v in datum.loss_fn_inputs.items()}
        ob_len = int((inputs["advantages"] == 0).long().cumprod(0).sum())  # the prompt's
        ids = datum.model_input.to_ints()
        prompts.append(ids[: ob_len + 1])
        responses.append(inputs["target_tokens"][ob_len:])
        olds.append(inputs["logprobs"][ob_len:])
        advantages.append(float(inputs["advantages"][ob_len]))
        assert ids[ob_len + 1 :] == responses[-1][:-1].tolist()  # the shift rl_loop makes
    width = max(map(len, responses))
    pad = recorder.clients[0].tokenizer.pad_token_id
    ids = torch.full((len(datums), width), pad, dtype=torch.long)
    mask, old = torch.zeros(len(datums), width), torch.zeros(len(datums), width)
    for i, (r, o) in enumerate(zip(responses, olds, strict=True)):
        ids[i, : len(r)], mask[i, : len(r)], old[i, : len(r)] = r, 1.0, o
    logprobs = response_logprobs(model, prompts, ids, mask, pad, 1.0, True)
    loss, _ = policy_loss(
        Recipe(surrogate="reinforce", kl=None),
        logprobs=logprobs,
        old_logprobs=old,
        advantages=torch.tensor(advantages)[:, None] * mask,
        loss_weights=mask,  # a plain sum over response tokens
        response_mask=mask,
    )
    loss.backward()
    expected = [p.grad for p in model.parameters() if p.requires_grad]
    assert any(g.abs().max() > 0 for g in expected)
    # Both sides sum a weight's gradient over every response token and through the model's
    # chain of sums, in other orders (other batch shapes): n·ε·max|g| apart at most.
    grad_terms = mask.numel() + forward_terms(model.config)
    for i, (got, want) in enumerate(zip(recorder.grads[0], expected, strict=True)):
        assert_within(got, want, reorder_atol(grad_terms, want.abs().max().item()), f"grad {i}:")


def test_as_tinker_runs_the_unmodified_script(tmp_path):
    command = [sys.executable, "-m", "rlvr.service.as_tinker", "--root", str(tmp_path)]
    command += [
        str(LOOP),
        "--log-path",
        str(tmp_path / "log"),
        "--max-steps",
        "1",
        "--batch-size",
        "1",
    ]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"progress/batch": 0' in done.stdout and (tmp_path / "final").is_dir()
