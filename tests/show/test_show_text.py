"""`rlvr show RUN` in the terminal: config summary, newest metrics, completions with token
classes distinct (bracket markers, or ANSI colours on a terminal), errors that name things."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from show_testlib import multi_turn_row, write_run

from rlvr.cli import main
from rlvr.cli.show import use_color
from rlvr.show.load import NO_COMPLETIONS, ShowError, latest_metrics, load_run, read_rows
from rlvr.show.text import render_segments, run_text


def rlvr(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["show", *args])
    return code, out.getvalue(), err.getvalue()


def test_run_view_summarises_config_metrics_and_newest_completions(tmp_path) -> None:
    code, out, _ = rlvr(str(write_run(tmp_path / "run")))
    assert code == 0
    assert "task arithmetic {digits: 2}   recipe grpo   model embedded" in out
    assert "steps 4 of 4   seed 7   batch 2 prompts × 2   status finished" in out
    # The last record (step 4) holds all three metrics: reward/mean = 4/10.
    assert "metrics at step 4\n" in out
    assert "  eval/accuracy              0.5\n" in out
    assert "  reward/mean                0.4\n" in out
    assert "completions at step 4: showing 4 of 4 rows (2 steps logged, logged every 2" in out
    assert out.count("[group ") == 4


def test_metrics_at_an_earlier_step_say_when_each_was_logged(tmp_path) -> None:
    run = load_run(write_run(tmp_path / "run"))
    # At step 2: reward/mean = 2/10 from step 2; eval/accuracy last logged at step 0.
    latest = latest_metrics(run.metrics, 2)
    assert latest["reward/mean"] == (0.2, 2)
    assert latest["eval/accuracy"] == (0.25, 0)
    text = run_text(run, 2, 1, color=False)
    assert "  eval/accuracy              0.25  (step 0)\n" in text
    assert "completions at step 2: showing 1 of 4 rows" in text
    assert text.count("[group ") == 1


def test_bracket_markers_show_each_token_class() -> None:
    row = multi_turn_row(4)
    text = render_segments(row["segments"], color=False)
    assert (
        text
        == " <calc>59+63</calc>⟦obs: <result>122</result>⟧⟦forced:  Final answer:⟧ \\boxed{122}"
    )
    masked = render_segments([{"kind": "masked", "text": "x"}], color=False)
    assert masked == "⟦masked: x⟧"


def test_colours_show_each_token_class_without_markers() -> None:
    row = multi_turn_row(4)
    text = render_segments(row["segments"], color=True)
    # observation cyan (36), forced yellow (33), policy text unstyled
    assert text == (
        " <calc>59+63</calc>\x1b[36m<result>122</result>\x1b[0m\x1b[33m Final answer:\x1b[0m"
        " \\boxed{122}"
    )
    assert render_segments([{"kind": "masked", "text": "x"}], color=True) == "\x1b[2;9mx\x1b[0m"


def test_multi_turn_row_lists_rewards_and_turns(tmp_path) -> None:
    _, out, _ = rlvr(str(write_run(tmp_path / "run")), "--no-color")
    assert "[group 1 · sample 0] ✓ correct  reward 1.5  advantage +0.25  length 40  kept" in out
    assert "  rewards     correct=1  fewer_tries=0.5\n" in out
    assert "  turns       2 (tool calls: 1; ended: answer)\n" in out


def test_model_text_cannot_send_terminal_escapes(tmp_path) -> None:
    run = load_run(write_run(tmp_path / "run"))
    for color in (False, True):
        text = run_text(run, None, 4, color)
        hostile = next(line for line in text.splitlines() if "alert(1)" in line)
        # The clear-screen and title sequences are shown as text, not sent.
        assert "\\x1b[2J\\x1b]0;owned\\x07 done" in hostile
        assert "\x07" not in text and "\x1b[2J" not in text
    assert "\x1b" not in run_text(run, None, 4, color=False)
    assert "advantage —  length 13  truncated  dropped" in run_text(run, None, 4, False)


def test_colour_only_on_a_terminal(monkeypatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    assert use_color(no_color=False)
    assert not use_color(no_color=True)
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_color(no_color=False)
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setattr("sys.stdout.isatty", lambda: False)
    assert not use_color(no_color=False)


def test_piped_output_uses_markers(tmp_path) -> None:
    _, out, _ = rlvr(str(write_run(tmp_path / "run")))  # stdout is a StringIO: not a TTY
    assert "⟦obs: <result>122</result>⟧" in out
    assert "\x1b" not in out


def test_run_without_completions_shows_the_rest(tmp_path) -> None:
    code, out, _ = rlvr(str(write_run(tmp_path / "run", completions=False)))
    assert code == 0
    assert "  reward/mean                0.4\n" in out
    assert out.rstrip().endswith(f"completions: {NO_COMPLETIONS}")


def test_a_run_file_names_its_run(tmp_path) -> None:
    run = write_run(tmp_path / "run")
    assert rlvr(str(run / "metrics.jsonl"))[1] == rlvr(str(run))[1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--step", "3"], "--step 3: no completions logged at that step in"),
        (["--step", "3"], "logged steps: 2, 4 (last 4)"),
        (["--rows", "0"], "--rows must be an integer ≥ 1, got 0"),
        (["--score", "maj"], "--score applies to two items files A B, not to a run"),
        (["--html", "--rows", "2"], "--rows sets the terminal view"),
    ],
)
def test_bad_options_are_named(tmp_path, args, message) -> None:
    code, out, err = rlvr(str(write_run(tmp_path / "run")), *args)
    assert code == 2 and out == ""
    assert message in err


def test_paths_that_are_not_runs_are_named(tmp_path) -> None:
    assert "no such file or directory" in rlvr(str(tmp_path / "nope"))[2]
    (tmp_path / "empty").mkdir()
    assert (
        "not a run directory (no config.yaml or metrics.jsonl)" in rlvr(str(tmp_path / "empty"))[2]
    )
    (tmp_path / "notes.txt").write_text("hello\n")
    err = rlvr(str(tmp_path / "notes.txt"))[2]
    assert "neither a run directory nor an `rlvr eval --items` file" in err
    run = write_run(tmp_path / "run")
    err = rlvr(str(run), str(run))[2]
    assert "got 2 paths (run, run)" in err


def test_bad_completions_files_name_file_and_line(tmp_path, capsys) -> None:
    run = write_run(tmp_path / "run")
    path = run / "completions" / "step_000004.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    with pytest.raises(ShowError, match=r"step_000004.jsonl:2: not valid JSON"):
        read_rows(path)
    # A half-written last line (a run still writing) is skipped, with a warning.
    path.write_text("\n".join([*lines, lines[0][:20]]) + "\n")
    assert len(read_rows(path)) == 4
    assert "step_000004.jsonl:5: incomplete last line skipped" in capsys.readouterr().err
    row = json.loads(lines[0])
    path.write_text(json.dumps({**row, "segments": [{"kind": "tool", "text": "x"}]}) + "\n")
    with pytest.raises(ShowError, match="segment kind 'tool' is not one of policy, observation"):
        read_rows(path)
    del row["correct"]
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(ShowError, match="row 1 has no 'correct'"):
        read_rows(path)


def test_unknown_schema_is_refused(tmp_path) -> None:
    run = write_run(tmp_path / "run")
    (run / "completions" / "index.json").write_text(json.dumps({"schema": 2}))
    code, _, err = rlvr(str(run))
    assert code == 2 and "schema=2; this rlvr reads schema 1" in err


def test_shaped_reward_and_cut_text_are_named() -> None:
    from rlvr.show.text import row_lines

    row = {**multi_turn_row(4), "shaped_reward": 1.25, "cut": True}
    head = row_lines(row, color=False)[0]
    assert "reward 1.5  shaped 1.25  advantage +0.25" in head
    assert head.endswith("kept  text cut when logged")
    plain = row_lines({**row, "shaped_reward": 1.5, "cut": False}, color=False)[0]
    assert "shaped" not in plain and "cut" not in plain  # equal to the reward: not repeated
