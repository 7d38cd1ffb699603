"""The step bar's counter (what a user watching a resumed run sees)."""

from __future__ import annotations

from rlvr.runlog.progress import progress_bar


def test_the_bar_counts_from_its_initial_step(capsys):
    bar = progress_bar(10, True, "grpo arithmetic", initial=4)
    bar.update({"reward/mean": 0.5}, 0.25)
    bar.close()
    shown = capsys.readouterr().err
    assert "5/10" in shown and "0/10" not in shown  # 4 finished before + 1 now
