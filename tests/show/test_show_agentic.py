"""`rlvr show` on an agentic run and on a comparison (issue 42; the trial's §2 and §3e):
the episodes' health where people look (failed fraction, tool errors, valid calls,
turns, observation tokens, the budget), the reason an environment failed on its row,
env curves beside reward and accuracy, filters by failure and turn count; a comparison
directory lists its cells and overlays their curves instead of exiting 2."""

from __future__ import annotations

import re

from agentic_testlib import REASON, write_agentic_run, write_comparison
from show_testlib import write_run

from rlvr.cli import main
from rlvr.show.comparison import comparison_page, comparison_text, load_comparison
from rlvr.show.html_run import run_page
from rlvr.show.load import detect_kind, load_run
from rlvr.show.text import run_text


def test_the_terminal_shows_the_episodes_and_what_needs_a_look(tmp_path):
    text = run_text(load_run(write_agentic_run(tmp_path / "run")), None, 6, color=False)
    episodes = text.split("\nepisodes\n")[1].split("\n\n")[0].splitlines()
    assert episodes == [
        "  env/turns                  1.75",
        "  env/tool_calls             1.25",
        "  env/failed_frac            0.25",
        "  env/tool_error_rate        0.2",
        "  env/valid_call_rate        0.8",
        "  env/tool_success_rate      0.8",
        "  env/observation_tokens     6.5",
        "  env/observations_cut       0",
        "  env/ended_budget           0.625",
        "  ! the environment failed on 25% of the episodes (env/failed_frac; each failed row says why)",
        "  ! 20% of tool calls failed",
        "  ! 62% of the episodes ran out of tokens (raise max_new_tokens)",
    ]
    assert f"  env failed  {REASON}" in text  # the row says why
    assert "  turns       2 (tool calls: 1; tool errors: 1; ended: answer)" in text


def test_a_one_turn_run_has_no_episode_section(tmp_path):
    run = load_run(write_run(tmp_path / "run"))
    assert "episodes" not in run_text(run, None, 4, color=False).split("completions at")[0]
    assert 'id="episodes"' not in run_page(run)[0]


def test_the_page_has_the_episode_panel_env_curves_and_filters(tmp_path):
    html, count = run_page(load_run(write_agentic_run(tmp_path / "run")))
    assert count == 12  # 6 rows at each of 2 steps
    panel = re.search(r'<section id="episodes">(.*?)</section>', html).group(1)
    assert "<span>env/failed_frac</span> 0.25" in panel
    assert "the environment failed on 25% of the episodes" in panel
    titles = re.findall(r'aria-label="([^"]+)"', html)
    assert titles == [
        "eval accuracy (held-out)",
        "training reward",
        "episode turns and tool calls",  # beside reward and accuracy
        "episode health (fractions)",
        "observation tokens per episode",
        "response length (tokens)",
        "clip fraction",
    ]
    health = html.split('aria-label="episode health (fractions)"')[1].split("</svg>")[0]
    assert re.findall(r'data-metric="([^"]+)"', health) == [
        "env/failed_frac",
        "env/tool_error_rate",
        "env/valid_call_rate",
        "env/ended_budget",
    ]
    options = re.findall(r'<option value="([^"]+)">', html.split('id="filter"')[1])
    assert options[-4:] == ["failed", "toolerror", "turns-1", "turns-2"]
    assert html.count(f"environment failed: {REASON.replace(chr(39), '&#x27;')}") == 2
    assert html.count('data-tags="wrong dropped multiturn failed turns-1"') == 2
    assert html.count("toolerror turns-2") == 2


def test_show_on_a_comparison_lists_its_cells(tmp_path):
    out = write_comparison(tmp_path / "cmp")
    assert detect_kind(out) == "comparison"
    lines = comparison_text(load_comparison(out)).splitlines()
    assert lines[:7] == [
        f"comparison {out}: 4 cells (newest values)",
        "",
        "cell            status              steps   accuracy  reward  turns  failed  tool errors",
        "numberle-seed0  finished            4 of 4  0.5       0.4     1.75   0.25    0.2",
        "numberle-seed1  running or stopped  4 of 4  0.5       0.4     1.75   0.25    0.2",
        "one_turn-seed0  finished            4 of 4  0.5       0.4     —      —       —",
        "one_turn-seed1  finished            4 of 4  0.5       0.4     —      —       —",
    ]
    assert lines[8].startswith(f"one cell: rlvr show {out / 'cells' / 'numberle-seed0'} [--html]")
    assert lines[9] == f"the comparison's report: {out / 'report.md'}"


def test_the_comparison_page_overlays_the_cells_curves(tmp_path):
    html = comparison_page(load_comparison(write_comparison(tmp_path / "cmp")))
    assert len(re.findall(r'<article class="row cell', html)) == 4
    options = re.findall(r'<option value="([^"]+)">', html)
    assert options == ["all", "numberle", "one_turn"]  # a filter per condition
    accuracy = html.split('aria-label="eval/accuracy"')[1]
    cells = re.findall(r'data-metric="([^"]+)"', accuracy.split("</svg>")[0])
    assert cells == ["numberle-seed0", "numberle-seed1", "one_turn-seed0", "one_turn-seed1"]
    turns = html.split('aria-label="env/turns"')[1].split("</svg>")[0]
    assert re.findall(r'data-metric="([^"]+)"', turns) == ["numberle-seed0", "numberle-seed1"]


def test_the_cli_shows_a_comparison_and_writes_its_page(tmp_path, capsys):
    out = write_comparison(tmp_path / "cmp")
    assert main(["show", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"comparison {out}: 4 cells")
    assert main(["show", str(out), "--html"]) == 0
    assert capsys.readouterr().out == f"wrote {out / 'show.html'} (4 cells, curves overlaid)\n"
    assert main(["show", str(out), "--rows", "2"]) == 2
    assert "a comparison lists every cell" in capsys.readouterr().err
    empty = tmp_path / "empty"
    (empty / "cells").mkdir(parents=True)
    assert main(["show", str(empty)]) == 2
    assert "a comparison with no cells yet" in capsys.readouterr().err
