"""curves.png: what each panel draws, read back from the figure itself."""

from __future__ import annotations

import matplotlib.pyplot as plt

from rlvr.runlog.plots import panel_series, plot_run


def _records() -> list[dict]:
    # Two training steps with reward_funcs, so reward/mean (the weighted reward the
    # advantages used) differs from reward/accuracy (raw correctness); eval at step 0 and 2.
    return [
        {"step": 0, "eval/accuracy": 0.25, "eval/greedy_accuracy": 0.5},
        {"step": 1, "reward/mean": 0.9, "reward/accuracy": 0.5, "reward/format_rate": 1.0},
        {
            "step": 2,
            "reward/mean": 1.4,
            "reward/accuracy": 0.75,
            "reward/format_rate": 1.0,
            "eval/accuracy": 0.5,
            "eval/greedy_accuracy": None,  # a missing value is a gap, not a zero
        },
    ]


def test_training_reward_panel_plots_reward_mean_beside_accuracy():
    reward = panel_series(_records())["training reward"]
    assert reward["reward/mean"] == ([1, 2], [0.9, 1.4])
    assert reward["reward/accuracy"] == ([1, 2], [0.5, 0.75])
    assert reward["reward/format_rate"] == ([1, 2], [1.0, 1.0])
    held_out = panel_series(_records())["eval accuracy (held-out)"]
    assert held_out == {
        "eval/accuracy": ([0, 2], [0.25, 0.5]),
        "eval/greedy_accuracy": ([0], [0.5]),
    }


def test_the_png_draws_the_series(tmp_path, monkeypatch):
    drawn = {}
    close = plt.close

    def keep(fig):  # read the figure's lines just before it is closed
        for ax in fig.axes:
            drawn[ax.get_title()] = {
                line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
                for line in ax.lines
            }
        close(fig)

    monkeypatch.setattr(plt, "close", keep)
    path = plot_run(_records(), tmp_path / "curves.png", title="t")
    assert path.stat().st_size > 0
    assert drawn["training reward"]["reward/mean"] == ([1, 2], [0.9, 1.4])
    assert set(drawn["training reward"]) == {"reward/mean", "reward/accuracy", "reward/format_rate"}
    assert drawn["clip fraction"] == {}  # no clip metrics: an empty panel, not an error


ONE_TURN = [
    "eval accuracy (held-out)",
    "training reward",
    "response length (tokens)",
    "clip fraction",
]
EPISODES = [
    "episode turns and tool calls",
    "episode health (fractions)",
    "observation tokens per episode",
]


def _agentic_records() -> list[dict]:
    # The one-turn records plus one step of an environment's metrics (issue 42: the
    # trial's failing Numberle runs had env/failed_frac 1.0 and no panel showed it).
    records = _records()
    records[1].update({"env/turns": 1.78, "env/failed_frac": 1.0, "env/tool_error_rate": 0.25})
    return records


def test_the_panels_depend_on_the_metrics_the_run_logged():
    assert list(panel_series(_records())) == ONE_TURN  # no env/ metric: no episode panel
    panels = panel_series(_agentic_records())
    assert list(panels) == ONE_TURN[:2] + EPISODES + ONE_TURN[2:]  # beside reward, accuracy
    assert panels["episode turns and tool calls"] == {"env/turns": ([1], [1.78])}
    assert panels["episode health (fractions)"] == {
        "env/failed_frac": ([1], [1.0]),
        "env/tool_error_rate": ([1], [0.25]),
    }
    assert panels["observation tokens per episode"] == {}  # not logged: an empty panel


def test_the_png_of_a_multi_turn_run_draws_the_episode_panels(tmp_path, monkeypatch):
    titles = []
    close = plt.close

    def keep(fig):
        titles.extend(ax.get_title() for ax in fig.axes)
        close(fig)

    monkeypatch.setattr(plt, "close", keep)
    plot_run(_agentic_records(), tmp_path / "curves.png")
    assert titles == ONE_TURN[:2] + EPISODES + ONE_TURN[2:]  # 7 axes: the 8th slot removed
