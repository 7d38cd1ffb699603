"""A CPU training process's memory (rlvr/train/allocation.py): AdamW's state allocated with
the optimizer is the state its first step would make, and freed pages are kept for reuse
instead of being faulted in again."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from rlvr.train.allocation import allocate_adamw_state


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
