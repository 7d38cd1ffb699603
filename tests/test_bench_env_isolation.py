"""`benchmarks/bench_env_isolation.py` runs, and isolation on and off play the same
episodes in it (it exits 1 when they differ)."""

import re
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_a_tiny_run_plays_the_same_episodes_both_ways():
    command = [sys.executable, "bench_env_isolation.py", "--rounds", "2", "--prompts", "2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=BENCHMARKS)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "same episodes: yes" in done.stdout
    for setting in ("none", "process"):
        assert re.search(rf"env_isolation {setting} +\d+\.\d ms/batch", done.stdout)
