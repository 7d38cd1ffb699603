"""A CPU training process's memory (rlvr/train/allocation.py): AdamW's state allocated with
the optimizer is the state its first step would make, and freed pages are kept for reuse
instead of being faulted in again."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from rlvr.train.allocation import SlicedAdamW, allocate_adamw_state


def _model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    unused = torch.nn.Parameter(torch.ones(2))  # trains, but no loss reaches it
    frozen = torch.nn.Parameter(torch.ones(5), requires_grad=False)  # LoRA's base weights
    return model, [*model.parameters(), unused, frozen]


def _train(params, model, optimizer, steps=3):
    torch.manual_seed(1)
    for _ in range(steps):
        optimizer.zero_grad()
        model(torch.randn(8, 4)).square().mean().backward()
        optimizer.step()


@pytest.mark.parametrize("amsgrad", [False, True])
def test_eager_state_trains_exactly_as_the_lazy_one(amsgrad):
    (lazy_model, lazy), (eager_model, eager) = _model(), _model()
    lazy_opt = torch.optim.AdamW(lazy, lr=0.1, weight_decay=0.1, amsgrad=amsgrad)
    eager_opt = allocate_adamw_state(
        torch.optim.AdamW(eager, lr=0.1, weight_decay=0.1, amsgrad=amsgrad)
    )
    # Before any step: every parameter that trains has step 0 and zero moments.
    assert [p for p in eager if eager_opt.state.get(p)] == eager[:5]
    first = eager_opt.state[eager[0]]
    assert first["step"] == 0 and first["step"].dtype == torch.float32
    assert not first["exp_avg"].any() and not first["exp_avg_sq"].any()
    assert ("max_exp_avg_sq" in first) == amsgrad
    _train(lazy, lazy_model, lazy_opt)
    _train(eager, eager_model, eager_opt)
    for a, b in zip(lazy, eager, strict=True):
        assert torch.equal(a, b)
    for a, b in zip(lazy[:4], eager[:4], strict=True):  # the parameters with gradients
        assert lazy_opt.state[a].keys() == eager_opt.state[b].keys()
        for key, value in lazy_opt.state[a].items():
            assert torch.equal(value, eager_opt.state[b][key]), key
        assert lazy_opt.state[a]["step"] == 3
    # The parameter no loss reaches keeps its untouched state; the frozen one has none.
    assert lazy_opt.state[lazy[4]] == {} and eager_opt.state[eager[4]]["step"] == 0
    assert eager[5] not in eager_opt.state  # no entry at all: a checkpoint holds none


def test_a_resumed_state_replaces_the_eager_one():
    (model, params), (_, other) = _model(), _model()
    optimizer = torch.optim.AdamW(params, lr=0.1)
    _train(params, model, optimizer, steps=2)
    resumed = allocate_adamw_state(torch.optim.AdamW(other, lr=0.1))
    resumed.load_state_dict(optimizer.state_dict())
    assert resumed.state[other[0]]["step"] == 2
    assert torch.equal(resumed.state[other[0]]["exp_avg"], optimizer.state[params[0]]["exp_avg"])


def _params():
    torch.manual_seed(0)
    shapes = [(40, 3), (7,), (5, 4), (1,)]
    params = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
    params.append(torch.nn.Parameter(torch.randn(4, 6).t()))  # not contiguous: stepped whole
    params.append(torch.nn.Parameter(torch.randn(9)))  # no gradient ever reaches it
    return params


@pytest.mark.parametrize(
    "options",
    [
        {"weight_decay": 0.0},
        {"weight_decay": 0.1, "amsgrad": True},
        {"weight_decay": 0.05, "maximize": True, "betas": (0.8, 0.95), "eps": 1e-6},
    ],
)
def test_sliced_adamw_gives_torchs_floats(options):
    """Slices of 7 elements (so a slice boundary falls inside rows and a last slice is
    short) give exactly torch's parameters and state, step after step, the learning rate
    changing between steps as a schedule changes it."""
    ours, theirs = _params(), _params()
    sliced = SlicedAdamW(ours, lr=0.1, slice_elements=7, **options)
    plain = torch.optim.AdamW(theirs, lr=0.1, **options)
    torch.manual_seed(1)
    for step in range(4):
        for a, b in zip(ours[:-1], theirs[:-1], strict=True):
            a.grad = torch.randn(a.shape) * 10 ** (step - 2)
            b.grad = a.grad.clone()
        for optimizer in (sliced, plain):
            optimizer.param_groups[0]["lr"] = 0.1 / (step + 1)
            optimizer.step()
        for a, b in zip(ours, theirs, strict=True):
            assert torch.equal(a, b), (step, a.shape)
    for a, b in zip(ours[:-1], theirs[:-1], strict=True):
        mine, torchs = sliced.state[a], plain.state[b]
        assert mine.keys() == torchs.keys() and mine["step"] == 4
        for key, value in torchs.items():
            assert torch.equal(mine[key], value), key
    assert ours[-1] not in sliced.state  # as torch: no state without a gradient
    assert sliced.state_dict()["state"].keys() == plain.state_dict()["state"].keys()


def test_sliced_adamw_needs_a_positive_slice():
    with pytest.raises(ValueError, match="slice_elements must be ≥ 1, got 0"):
        SlicedAdamW(_params(), slice_elements=0)


def test_sliced_adamw_hands_other_groups_to_torch(monkeypatch):
    """A group torch steps with its foreach kernels is not sliced (nor is anything else)."""
    params = _params()
    for p in params:
        p.grad = torch.ones(p.shape)
    sliced = SlicedAdamW(params, lr=0.1, foreach=True)
    monkeypatch.setattr(SlicedAdamW, "_step_in_slices", lambda *a: pytest.fail("sliced"))
    sliced.step()
    assert sliced.state[params[0]]["step"] == 1


FAULTS = """
import resource, sys, torch
sys.path.insert(0, {root!r})
from rlvr.train.allocation import keep_freed_pages
kept = keep_freed_pages() if {keep} else False
def faults_of_a_fresh_buffer():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.ones(16 * 2**20)  # 64 MiB, written once and freed
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(kept, [faults_of_a_fresh_buffer() for _ in range(4)][-1])  # after the heap has grown
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_pages_are_reused_not_faulted_in_again():
    """A 64 MiB buffer, freed and allocated again, a fourth time: glibc's default maps it
    afresh each time (16 384 pages of 4 KiB, each faulted in); with freed pages kept it
    reuses the heap's."""
    root = str(__import__("pathlib").Path(__file__).resolve().parents[2])
    counts = {}
    for keep in (False, True):
        out = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(FAULTS.format(root=root, keep=keep))],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout.split()
        assert out[0] == str(keep)
        counts[keep] = int(out[1])
    assert counts[False] >= 16 * 2**20 * 4 // 4096 // 2  # at least half its pages, each time
    assert counts[True] < 500


def test_a_step_frees_the_last_steps_gradients_before_its_rollout(small_config):
    """After a step its gradients are still there for whoever inspects them; the next step
    frees them before it samples, not at its first backward, through whose rollout they
    would otherwise stay allocated."""
    from rlvr.train import Trainer

    trainer = Trainer(small_config(lr=1e-2))
    metrics = trainer.train_step()
    assert metrics["train/optimizer_steps"] >= 1 and metrics["train/backward_skipped"] == 0
    assert any(p.grad is not None for p in trainer.model.parameters())
    held, generate = [], trainer.engine.generate

    def generate_and_look(*args, **kwargs):
        held.append(sum(p.grad is not None for p in trainer.model.parameters()))
        return generate(*args, **kwargs)

    trainer.engine.generate = generate_and_look
    trainer.train_step()
    assert held and held == [0] * len(held)
