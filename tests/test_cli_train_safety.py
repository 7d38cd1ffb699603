"""`rlvr train` never damages an output directory; divergence is one line, not a traceback."""

from __future__ import annotations

import hashlib

import pytest

from rlvr.cli import main

SMALL = [
    "--set", "prompts_per_step=4",
    "--set", "group_size=4",
    "--set", "eval_size=8",
    "--set", "task_options.digits=2",
    "--set", "task_options.ops=+",
    "--no-progress",
]  # fmt: skip


def _snapshot(root):
    """Every file and folder under `root` with its content hash and mtime."""
    return {
        str(p.relative_to(root)): (
            hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir",
            p.stat().st_mtime_ns,
        )
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("finished") / "run"
    assert main(["train", "--steps", "1", "--out", str(out), *SMALL]) == 0
    return out


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--task", "foo", "--overwrite"], "foo"),
        (["--model", "/nonexistent/model", "--overwrite"], "/nonexistent/model"),
        (["--set", "lr=-1", "--overwrite"], "lr"),
        (["--recipe", "grpoo", "--overwrite"], "grpoo"),
        ([], "--resume"),  # an existing run is refused without --resume/--overwrite
    ],
)
def test_a_rejected_rerun_leaves_the_run_directory_untouched(finished_run, extra, named, capsys):
    before = _snapshot(finished_run)
    assert main(["train", "--steps", "1", "--out", str(finished_run), *SMALL, *extra]) == 2
    err = capsys.readouterr().err
    assert named in err and err.count("\n") == 1
    assert _snapshot(finished_run) == before


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--set", "lr=0.5"], "lr=0.0001"),  # a resumed run may not change what it computes
        (["--seed", "7"], "seed"),
        ([], "already finished"),
        (["--overwrite"], "exclude"),
    ],
)
def test_a_rejected_resume_leaves_the_run_directory_untouched(finished_run, extra, named, capsys):
    before = _snapshot(finished_run)
    assert main(["train", "--resume", str(finished_run), *extra]) == 2
    err = capsys.readouterr().err
    assert named in err and err.count("\n") == 1
    assert _snapshot(finished_run) == before


@pytest.mark.parametrize("out", ["", " ", "."])
def test_empty_or_current_out_is_refused(out, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--out", out, *SMALL]) == 2
    err = capsys.readouterr().err
    assert "out" in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_a_huge_learning_rate_ends_in_one_diverged_line(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["train", "--steps", "6", "--out", str(out), "--set", "lr=1e9", *SMALL])
    err = capsys.readouterr().err
    assert code == 1, err
    assert err.startswith("rlvr: error: diverged at step ") and err.count("\n") == 1
    assert "last good checkpoint at" in err or "no good checkpoint" in err
    assert (out / "checkpoint.crash").is_dir() and not (out / "summary.json").exists()
