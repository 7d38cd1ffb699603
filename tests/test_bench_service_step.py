"""The service contestant of `benchmarks/step_vs_trl.py --service`
(`benchmarks/step_vs_trl_service_side.py`): its client-side GRPO math by hand, one step
on the tiny model that trains on exactly the benchmark's work, and its gradient against
GRPO's loss written by hand (no timing is asserted)."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import step_vs_trl_work as work
from step_vs_trl_service_side import EPS, ServiceSide, group_advantages, row_scales
from step_vs_trl_work import Work, build_work


def test_group_advantages_by_hand():
    # rewards 0, 1, 2: mean 1, unbiased std sqrt((1 + 0 + 1) / 2) = 1 → Â = (−1, 0, 1)/(1 + ε)
    assert group_advantages([0.0, 1.0, 2.0]) == pytest.approx(
        [-1 / (1 + EPS), 0.0, 1 / (1 + EPS)], rel=1e-15, abs=0
    )  # rel 1e-15: a few float64 roundings (≈1.1e-16 each) of numbers of size 1
    assert group_advantages([0.5, 0.5, 0.5, 0.5]) == [0.0] * 4  # no spread: exactly 0


def test_row_scales_turn_the_token_sum_into_the_losses_means():
    # GRPO: B = 2 rows of 4 and 2 tokens → 1/(2·4), 1/(2·2); DAPO: 1/(4 + 2) each
    assert row_scales([4, 2], "grpo") == [1 / 8, 1 / 4]
    assert row_scales([4, 2], "dapo") == [1 / 6, 1 / 6]


@pytest.fixture
def small_work():
    """Each test sets its own `work.WORK`; the module's is restored after."""
    saved = work.WORK
    yield
    work.WORK = saved


@pytest.mark.parametrize("lora", [0, 4])
def test_one_service_step_trains_on_exactly_the_benchmarks_work(small_work, lora):
    work.WORK = Work(prompts=2, lora=lora)
    torch.manual_seed(0)
    hf_tok, model = build_work("3m")
    side = ServiceSide(model, hf_tok, "grpo", tokens=6, group=4)
    trained = {
        n: p.detach().clone() for n, p in side.trainer.model.named_parameters() if p.requires_grad
    }
    frozen = {
        n: p.detach().clone()
        for n, p in side.trainer.model.named_parameters()
        if not p.requires_grad
    }
    out = side.step()
    assert out["rows"] == 2 * 4  # prompts × group
    assert out["new_tokens"] == [6, 6]  # exactly the budget: the tokenizer's EOS is unreachable
    params = dict(side.trainer.model.named_parameters())
    moved = [n for n, before in trained.items() if not torch.equal(params[n], before)]
    # Adam's first step moves every weight with a nonzero gradient by about lr; the LoRA
    # B matrices start at 0, so their step is what moves (A gets no gradient while B = 0).
    assert moved, "no trained weight moved"
    assert all(torch.equal(params[n], before) for n, before in frozen.items())
    assert (len(frozen) > 0) == bool(lora)  # LoRA: the base stays frozen
    for phase in ("generation", "logprob", "backward", "forward_backward", "optimizer", "sync"):
        assert out[phase] > 0, phase
    assert side.trainer.step == 1


def grads(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])


def test_the_service_gradient_is_grpos_on_the_same_rows(small_work):
    """The datums' token sum through `importance_sampling` has the gradient of GRPO's loss
    (1/B) Σ_i (1/|y_i|) Σ_t −Â_i·π/π_old written by hand with a plain HF forward."""
    work.WORK = Work(prompts=2)
    torch.manual_seed(0)
    hf_tok, model = build_work("3m")
    side = ServiceSide(model, hf_tok, "grpo", tokens=6, group=4)
    datums, lengths = side._rollout()
    side.trainer.forward_backward(datums, "importance_sampling").result()
    model = side.trainer.model
    service = grads(model)
    model.zero_grad(set_to_none=True)
    rows = len(datums)
    loss = torch.zeros(())
    for datum, n in zip(datums, lengths, strict=True):
        inputs = datum.model_input.to_ints()
        targets = torch.tensor(datum.loss_fn_inputs["target_tokens"][-n:])
        logits = model(torch.tensor([inputs])).logits[0, -n:].float()  # (n, V): predict y
        logp = torch.log_softmax(logits, -1).gather(1, targets[:, None])[:, 0]
        advantage = datum.loss_fn_inputs["advantages"][-1] * rows * n  # undo 1/(B·|y_i|)
        ratio = torch.exp(logp - logp.detach())  # on-policy: 1, with π's gradient
        loss = loss + (-advantage * ratio).mean() / rows
    loss.backward()
    by_hand = grads(model)
    assert by_hand.abs().max() > 0  # some group has spread, so there is a gradient
    # Both sides are fp32 and differ only in summation order (the service's float32 head
    # is a separate matmul): per reduction of length K ≤ 768 the rounding is at most
    # K·ε = 768 · 1.2e-7 ≈ 9e-5 relative, over 4 layers forward and back ≈ 4e-4 of the
    # largest entry; 1e-3 of it is that bound with margin. A wrong sign or a scale off by
    # B = 8 or |y| = 6 is an error of order 1 of it.
    assert (service - by_hand).abs().max() <= 1e-3 * by_hand.abs().max()
