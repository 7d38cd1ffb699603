"""An agentic run directory and a comparison directory for the `rlvr show` tests, written by
hand to the schemas of docs/metrics.md (what training writes: test_show_real_run.py)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from show_testlib import multi_turn_row, single_turn_row, write_run

ENV = {
    "env/turns": 1.75,
    "env/tool_calls": 1.25,
    "env/failed_frac": 0.25,
    "env/tool_error_rate": 0.2,
    "env/valid_call_rate": 0.8,
    "env/tool_success_rate": 0.8,
    "env/observation_tokens": 6.5,
    "env/observations_cut": 0.0,
    "env/ended_budget": 0.625,
}
REASON = "error: KeyError: 'secret not found'"


def failed_row(step: int) -> dict:
    """An episode whose environment raised in its first step."""
    return {
        **single_turn_row(step, 3, 0, False),
        "kept": False,
        "advantage": None,
        "turns": [
            {
                "turn": 0,
                "policy": " \\boxed{121}",
                "tool_call": None,
                "observation": None,
                "ended": "env_failed",
            }
        ],
        "env_failed": REASON,
        "tool_errors": 0,
        "invalid_calls": 0,
    }


def tool_error_row(step: int) -> dict:
    return {**multi_turn_row(step), "group": 4, "tool_errors": 1, "invalid_calls": 0}


def write_agentic_run(out: Path, steps=(2, 4)) -> Path:
    """`write_run`'s 4-step run with `env/` metrics at every step and, at each logged step,
    its rows plus an episode whose environment failed and one whose tool failed."""
    write_run(out, steps)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for record in records[1:]:
        record.update({k: v * record["step"] / 4 for k, v in ENV.items()})
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    for step in steps:
        path = out / "completions" / f"step_{step:06d}.jsonl"
        extra = [failed_row(step), tool_error_row(step)]
        path.write_text(path.read_text() + "".join(json.dumps(r) + "\n" for r in extra))
    return out


def write_comparison(out: Path) -> Path:
    """A 2 × 2 comparison: `one_turn` and `numberle` (agentic), seeds 0 and 1; the last
    cell has not finished."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "matrix.yaml").write_text(yaml.safe_dump({"recipes": ["grpo"], "seeds": [0, 1]}))
    for label in ("one_turn", "numberle"):
        for seed in (0, 1):
            cell = out / "cells" / f"{label}-seed{seed}"
            if label == "numberle":
                write_agentic_run(cell)
            else:
                write_run(cell)
            if (label, seed) == ("numberle", 1):
                (cell / "summary.json").unlink()
    (out / "report.md").write_text("# Comparison\n")
    return out
