"""Long work with progress (issue 42; the trial's §4): on a terminal a bar with its ETA,
elsewhere an opening line with what the work stops at, periodic lines with an ETA, and a
closing line. `rlvr eval` and `rlvr compare` use it; the warm start's own lines are in
tests/models/test_models_warmstart.py."""

from __future__ import annotations

import io

import pytest

from rlvr.runlog import progress as progress_module
from rlvr.runlog.progress import Progress, Timed


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress_module.time, "perf_counter", clock)
    return clock


def test_off_a_terminal_it_says_the_target_an_eta_and_how_it_ended(clock):
    out = io.StringIO()  # not a terminal
    bar = Progress("warm start", 3000, target="dev accuracy 0.30", every_s=30, file=out)
    clock.now = 10.0
    bar.update(100)  # 10 s < 30 s since the opening: no line yet
    clock.now = 40.0
    bar.update(100, dev_acc="0.125")  # 200 steps in 40 s: 2800 more take 560 s
    clock.now = 45.0
    bar.close("cached at /tmp/x")
    assert out.getvalue().splitlines() == [
        "warm start: stops at dev accuracy 0.30 or 3000 steps",
        "warm start: 200/3000 steps, 40 s elapsed, ETA 9 min 20 s, dev_acc 0.125",
        "warm start: done, 200 steps in 45 s; cached at /tmp/x",
    ]


def test_disabled_it_says_nothing(clock):
    out = io.StringIO()
    bar = Progress("x", 2, enabled=False, file=out)
    bar.update(2)
    bar.close("done")
    assert out.getvalue() == ""


def test_seconds_read_as_minutes_and_hours():
    assert progress_module.duration(59.4) == "59 s"
    assert progress_module.duration(185) == "3 min 05 s"
    assert progress_module.duration(3720) == "1 h 02 min"


def test_rlvr_eval_shows_its_progress_and_a_closing_line(tmp_path, monkeypatch, capsys):
    import yaml

    from rlvr.cli import main
    from rlvr.eval import run as eval_run
    from rlvr.eval.evaluate import EvalResult
    from rlvr.train.config import resolve_config

    run = tmp_path / "run"
    cfg = resolve_config({"eval_size": 2, "out": str(run)})
    (run / "checkpoint" / "policy").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    monkeypatch.setattr(eval_run, "open_engine", lambda *a: "engine")

    def evaluate_policy(engine, task, problems, progress=None, **settings):
        progress(len(problems))
        return EvalResult({"eval/accuracy": 0.5}, [0.5] * len(problems), [])

    monkeypatch.setattr(eval_run, "evaluate_policy", evaluate_policy)
    assert main(["eval", "--run", str(run)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[-2] == "rlvr eval (one sample and greedy): 2 problems"
    assert err[-1].startswith("rlvr eval (one sample and greedy): done, 2 problems in ")
    assert err[-1].endswith("; accuracy 0.500")


def test_a_matrix_says_its_eta_after_each_cell(clock):
    from rlvr.compare.matrix import Cell
    from rlvr.compare.runner import MatrixRun, _done

    result, said = MatrixRun(started=0.0), []
    summary = {"final": {"eval/accuracy": 0.5}, "seconds": {"wall_s": 30.0}}
    clock.now = 30.0
    cell = Cell(label="a", recipe="grpo", seed=0, overrides={}, config={})
    _done(cell, summary, result, said.append, total=4)
    clock.now = 60.0
    _done(cell, summary, result, said.append, total=4)
    # 2 cells in 60 s: the other 2 take 60 s more; the last cell says no ETA
    assert said[1].endswith("(30 s); matrix ETA 60 s")
    result.ran += ["c"]
    _done(cell, summary, result, said.append, total=4)
    assert said[2].endswith("(30 s)")


def test_short_work_with_after_s_prints_nothing(clock):
    out = io.StringIO()
    bar = Progress("cell a-seed0", 6, after_s=10, file=out)
    clock.now = 4.0
    bar.update(6)  # all 6 steps in 4 s < 10 s
    bar.close()
    assert out.getvalue() == ""


def test_long_work_with_after_s_opens_late_with_its_count_and_eta(clock):
    out = io.StringIO()
    bar = Progress("cell a-seed0", 50, after_s=10, every_s=30, file=out, initial=10)
    clock.now = 5.0
    bar.update(2)  # 5 s < 10 s: quiet
    clock.now = 12.0
    bar.update(2)  # 4 steps since the resume in 12 s: the 36 left take 108 s
    clock.now = 20.0
    bar.update(2)  # 8 s since the last line < 30 s: quiet
    clock.now = 42.0
    bar.update(4)  # 10 steps in 42 s: the 30 left take 126 s
    clock.now = 50.0
    bar.close(line=False)  # the matrix's own line closes a cell
    assert out.getvalue().splitlines() == [
        "cell a-seed0: 50 steps",
        "cell a-seed0: 14/50 steps, 12 s elapsed, ETA 1 min 48 s",
        "cell a-seed0: 20/50 steps, 42 s elapsed, ETA 2 min 06 s",
    ]


def test_a_timed_call_says_nothing_when_short(clock):
    out = io.StringIO()
    with Timed("rlvr service sample (64 × up to 512 tokens)", 40.0, file=out, tick_s=None) as t:
        clock.now = 9.0
        t.tick()  # 9 s < the 10 s after which a call is shown
    assert out.getvalue() == ""


def test_a_long_timed_call_says_its_eta_from_the_last_rate_and_how_long_it_took(clock):
    out = io.StringIO()
    desc = "rlvr service forward_backward (64 datums, 32,768 tokens)"
    with Timed(desc, expected_s=45.0, every_s=30, file=out, tick_s=None) as t:
        for clock.now in (5.0, 10.0, 20.0, 40.0, 50.0):
            t.tick()  # shown at 10 s, then again 30 s later (40 s), 50 s is past the 45 s
        clock.now = 70.0
        t.tick()  # 30 s after the line at 40 s
        clock.now = 71.0
    assert out.getvalue().splitlines() == [
        f"{desc}: 10 s elapsed, ETA 35 s (at the last call's rate)",
        f"{desc}: 40 s elapsed, ETA 5 s (at the last call's rate)",
        f"{desc}: 1 min 10 s elapsed, past the 45 s the last call's rate gave",
        f"{desc}: done in 1 min 11 s",
    ]


def test_a_first_long_call_has_no_eta_to_give(clock):
    out = io.StringIO()
    with Timed("rlvr service save_state (step-3, 1,000 parameters)", file=out, tick_s=None) as t:
        clock.now = 12.0
        t.tick()
        clock.now = 13.0
    assert out.getvalue().splitlines() == [
        "rlvr service save_state (step-3, 1,000 parameters): 12 s elapsed",
        "rlvr service save_state (step-3, 1,000 parameters): done in 13 s",
    ]


def _cell_at(out, steps: int = 50):
    from rlvr.compare.matrix import Cell

    return Cell("numberle", "grpo", 0, {}, {"out": str(out), "steps": steps})


def _log_steps(out, *steps: int) -> None:
    import json

    with (out / "metrics.jsonl").open("a") as fh:
        fh.writelines(json.dumps({"step": s, "reward/mean": 0.5}) + "\n" for s in steps)


def test_a_long_cell_says_its_steps_and_eta_off_a_terminal(clock, tmp_path):
    from rlvr.compare.runner import CellWatch

    out = io.StringIO()
    with CellWatch(poll_s=None, file=out, after_s=10) as watch:
        watch.start(_cell_at(tmp_path))
        watch.poll()  # no metrics.jsonl yet: nothing
        _log_steps(tmp_path, 0)  # the initial eval: the cell's progress starts here
        watch.poll()
        clock.now = 12.0
        _log_steps(tmp_path, 1, 2, 3, 4)
        watch.poll()  # 4 steps in 12 s: the 46 left take 138 s
        clock.now = 20.0
        _log_steps(tmp_path, 5)
        watch.poll()  # 8 s after the last line: quiet
        clock.now = 42.0
        _log_steps(tmp_path, 6, 7, 8, 9, 10, 11, 12, 13, 14)
        watch.poll()  # 14 steps in 42 s: the 36 left take 108 s
        watch.finish(_cell_at(tmp_path))  # the matrix's "[k/N]" line closes it
    assert out.getvalue().splitlines() == [
        "cell numberle-seed0: 50 steps",
        "cell numberle-seed0: 4/50 steps, 12 s elapsed, ETA 2 min 18 s",
        "cell numberle-seed0: 14/50 steps, 42 s elapsed, ETA 1 min 48 s",
    ]


def test_a_cells_metrics_are_told_from_a_previous_runs_by_their_state_not_time(clock, tmp_path):
    """A metrics.jsonl written after the cell started counts even when its modification
    time reads earlier than the start (file times come from the kernel's coarse clock, up to
    a tick behind `time.time()`: `make test` once saw it), and one there before counts only
    once it changes, even when its time reads later than the start."""
    import os

    from rlvr.compare.runner import CellWatch

    with CellWatch(poll_s=None, file=io.StringIO(), after_s=10) as watch:
        watch.start(_cell_at(tmp_path))
        _log_steps(tmp_path, 0)
        os.utime(tmp_path / "metrics.jsonl", (1.0, 1.0))  # stamped long before the start
        watch.poll()
        assert watch.cells["numberle-seed0"].bar is not None
    previous = tmp_path / "previous"
    previous.mkdir()
    _log_steps(previous, 0, 1)
    os.utime(previous / "metrics.jsonl", (4e9, 4e9))  # stamped in 2096
    with CellWatch(poll_s=None, file=io.StringIO(), after_s=10) as watch:
        watch.start(_cell_at(previous))
        watch.poll()
        assert watch.cells["numberle-seed0"].bar is None
        _log_steps(previous, 2)
        watch.poll()
        assert watch.cells["numberle-seed0"].step == 2


def test_a_short_cell_and_a_previous_runs_metrics_say_nothing(clock, tmp_path):
    import os

    from rlvr.compare.runner import CellWatch, last_step

    _log_steps(tmp_path, 0, 1, 2)
    os.utime(tmp_path / "metrics.jsonl", (1.0, 1.0))  # an interrupted run's, long ago
    assert last_step(tmp_path / "metrics.jsonl") == 2
    out = io.StringIO()
    with CellWatch(poll_s=None, file=out) as watch:
        watch.start(_cell_at(tmp_path, steps=6))
        watch.poll()
        assert watch.cells["numberle-seed0"].bar is None  # older than the cell's start
        (tmp_path / "metrics.jsonl").write_text("")
        _log_steps(tmp_path, 0)
        watch.poll()
        clock.now = 5.0
        _log_steps(tmp_path, 1, 2, 3, 4, 5, 6)
        watch.poll()  # all 6 steps within 5 s < CELL_AFTER_S = 30 s
    assert out.getvalue() == ""
