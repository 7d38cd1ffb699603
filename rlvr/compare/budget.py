"""What was actually equal across conditions, measured from the cells' metrics.jsonl.

The matrix budget fixes one quantity (training steps or generated tokens); the others
follow from the recipes: a step of 8 minibatches is 8 optimizer updates, dynamic sampling
generates more tokens per step. The report states, per condition, the measured training
steps, prompts trained per step, generated tokens and optimizer updates, and says which
are equal across conditions and which are not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlvr.compare.results import CellResult


@dataclass(frozen=True)
class Quantity:
    name: str
    per_label: dict[str, list[float]]  # label → one value per cell
    source: str = "measured"

    def equal(self, rel_tol: float = 0.0) -> bool:
        values = [v for vs in self.per_label.values() for v in vs]
        if not values:
            return False
        low, high = min(values), max(values)
        return high - low <= rel_tol * max(abs(high), 1e-12)

    def describe(self, fmt: str = "{:,.0f}") -> str:
        parts = []
        for label, values in self.per_label.items():
            text = fmt.format(float(np.mean(values)))
            if len(values) > 1 and min(values) != max(values):
                text += f" [{fmt.format(min(values))}–{fmt.format(max(values))}]"
            parts.append(f"{label} {text}")
        return "; ".join(parts)


def training_steps(cell: CellResult) -> float:
    return float(sum(1 for r in cell.records if r.get("step", 0) >= 1 and _trained(r)))


def _trained(record: dict) -> bool:
    # Eval-only records (the final eval at the last step) carry no rollout metrics.
    return record.get("rollout/generated_tokens") is not None


def _sum(cell: CellResult, key: str) -> float | None:
    values = [r[key] for r in cell.records if r.get("step", 0) >= 1 and r.get(key) is not None]
    return float(sum(values)) if values else None


def optimizer_updates(cell: CellResult) -> tuple[float, str]:
    """Policy optimizer updates the cell took: the sum of `train/optimizer_steps` over its
    steps, else (older cells) steps × num_minibatches × ppo_epochs from its config."""
    logged = _sum(cell, "train/optimizer_steps")
    if logged is not None:
        return logged, "measured"
    per_step = cell.config.get("num_minibatches", 1) * cell.config.get("ppo_epochs", 1)
    return training_steps(cell) * per_step, "from config"


def prompts_per_step(cell: CellResult) -> float:
    """Mean prompt groups trained per step (`rollout/kept_groups`), else the config's."""
    kept = [
        r["rollout/kept_groups"] for r in cell.records if r.get("rollout/kept_groups") is not None
    ]
    return float(np.mean(kept)) if kept else float(cell.config.get("prompts_per_step", 0))


def quantities(groups: dict[str, list[CellResult]]) -> list[Quantity]:
    updates = {label: [optimizer_updates(c) for c in cells] for label, cells in groups.items()}
    sources = {source for pairs in updates.values() for _, source in pairs}
    return [
        Quantity("training steps", {k: [training_steps(c) for c in v] for k, v in groups.items()}),
        Quantity("prompts trained per step", {k: [prompts_per_step(c) for c in v] for k, v in groups.items()}),
        Quantity("generated tokens", {k: [c.summary.get("generated_tokens", 0.0) for c in v] for k, v in groups.items()}),
        Quantity(
            "optimizer updates",
            {label: [n for n, _ in pairs] for label, pairs in updates.items()},
            " and ".join(sorted(sources)),
        ),
    ]  # fmt: skip


def budget_lines(groups: dict[str, list[CellResult]]) -> list[str]:
    """The report's "what was equal" lines: equal quantities, then unequal ones with the
    value per condition (mean over seeds, [min–max] when seeds differ)."""
    equal, unequal = [], []
    for q in quantities(groups):
        fmt = "{:,.2f}" if q.name.startswith("prompts") else "{:,.0f}"
        values = [v for vs in q.per_label.values() for v in vs]
        if q.equal():
            equal.append(f"{q.name} ({fmt.format(values[0])} per cell, {q.source})")
        else:
            means = [float(np.mean(v)) for v in q.per_label.values() if v]
            ratio = (
                f"; largest/smallest condition mean {max(means) / min(means):.2f}"
                if min(means) > 0
                else ""
            )
            unequal.append(
                f"{q.name} ({q.source}, mean [min–max] over seeds): {q.describe(fmt)}{ratio}"
            )
    lines = ["- **Equal across conditions** (measured): " + (", ".join(equal) or "nothing") + "."]
    lines += [f"- **Not equal**: {text}." for text in unequal]
    return lines
