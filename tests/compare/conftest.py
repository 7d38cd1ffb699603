"""A tiny finished matrix (2 recipes × 2 seeds, 2 steps each), run once per session and
copied by the tests that change it."""

from __future__ import annotations

import shutil

import pytest
import torch
from compare_testlib import tiny_spec

from rlvr.compare import run_matrix


@pytest.fixture(scope="session")
def one_thread():
    """Serial and parallel cells must compute alike: one torch thread everywhere."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def finished_matrix(tmp_path_factory, one_thread):
    out = tmp_path_factory.mktemp("matrix") / "cmp"
    run = run_matrix(tiny_spec(), out, jobs=1, log=lambda message: None)
    assert not run.failed, run.failed
    return out


@pytest.fixture
def matrix_copy(finished_matrix, tmp_path):
    """A private copy of the finished matrix, with cell paths rewritten to the copy."""
    out = tmp_path / "cmp"
    shutil.copytree(finished_matrix, out)
    for config in out.glob("cells/*/config.yaml"):
        config.write_text(config.read_text().replace(str(finished_matrix), str(out)))
    return out
