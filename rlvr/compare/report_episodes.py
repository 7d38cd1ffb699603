"""The report's episodes section (`rlvr compare` with multi-turn conditions): each
condition's `env/` training metrics and its final eval's turns, beside accuracy."""

from __future__ import annotations

from rlvr.compare.markdown import md_table, mean_text
from rlvr.compare.results import ENV_KEYS, CellResult


def env_table(groups: dict[str, list[CellResult]]) -> str | None:
    """Each condition's episodes: the `env/` training metrics averaged over steps (mean over
    seeds), and the turns of its final eval; None when no cell ran episodes. A one-turn
    condition reads "—"."""
    cells = [c for group in groups.values() for c in group]
    if not any(any(k in r for r in c.records) for c in cells for k in ENV_KEYS):
        return None
    header = ["condition", *(k.removeprefix("env/") for k in ENV_KEYS), "eval turns"]
    rows = [
        [label]
        + [mean_text([c.mean_metric(k) for c in group], "{:.3f}") for k in ENV_KEYS]
        + [mean_text([c.summary["final"].get("eval/turns") for c in group], "{:.2f}")]
        for label, group in groups.items()
    ]
    return md_table(header, rows)


def env_section(groups: dict[str, list[CellResult]]) -> list[str]:
    table = env_table(groups)
    if table is None:
        return []
    return [
        "## Episodes per condition",
        "Multi-turn conditions: the `env/` training metrics (docs/metrics.md), each averaged "
        "over the training steps of a cell, then over its seeds: policy turns and tool calls "
        "per episode, the valid-call, tool-error and failed fractions, observation tokens per "
        "episode and the fraction of episodes the token budget ended; and the mean turns of "
        "the final eval's episodes. — where a condition runs one turn.",
        table,
    ]
