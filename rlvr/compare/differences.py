"""What differed between cells: the recorded, fully resolved config of every cell against
the baseline cell. Only the compared choice may differ (the recipe and the fields it sets,
the cell's overrides), plus `seed` and `out`; anything else is a warning, because then
the comparison no longer changes one thing at a time.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Any

from rlvr.algo.recipes import RECIPES
from rlvr.compare.results import CellResult
from rlvr.train.config import RECIPE_KEYS, TrainConfig

ALWAYS_ALLOWED = frozenset({"seed", "out"})


@dataclass(frozen=True)
class Difference:
    cell: str
    baseline_cell: str
    label: str
    key: str
    baseline_value: Any
    value: Any
    allowed: bool

    def warning(self) -> str:
        return (
            f"cell {self.cell} differs from {self.baseline_cell} in uncompared field "
            f"{self.key!r}: {self.value!r} vs {self.baseline_value!r}"
        )


def allowed_keys(cell: CellResult, baseline: CellResult) -> set[str]:
    """The fields the compared choice explains: the recipe name, each recipe field whose
    default differs between the two recipes, and every field either cell overrides."""
    keys = set(ALWAYS_ALLOWED) | set(cell.cell.overrides) | set(baseline.cell.overrides)
    mine, theirs = RECIPES.get(cell.cell.recipe), RECIPES.get(baseline.cell.recipe)
    if mine is not None and theirs is not None and mine.name != theirs.name:
        keys.add("recipe")
        keys |= {k for k in RECIPE_KEYS if getattr(mine, k) != getattr(theirs, k)}
    return keys


def recorded(result: CellResult, key: str) -> Any:
    """The cell's value of `key`: as its config.yaml records it, or, for a field added to
    rlvr after the cell ran, the value that field has by default (the recipe's, for a
    recipe field): what the cell computed with, since the field did not exist."""
    if key in result.config:
        return result.config[key]
    recipe = RECIPES.get(result.config.get("recipe", result.cell.recipe))
    if key in RECIPE_KEYS and recipe is not None:
        return getattr(recipe, key)
    field = next((f for f in fields(TrainConfig) if f.name == key), None)
    if field is None:
        return None
    return field.default_factory() if field.default is MISSING else field.default


def config_differences(cell: CellResult, baseline: CellResult) -> list[Difference]:
    """Every field whose value differs between `cell` and `baseline` (`recorded`)."""
    allowed = allowed_keys(cell, baseline)
    keys = sorted(set(cell.config) | set(baseline.config))
    values = {k: (recorded(baseline, k), recorded(cell, k)) for k in keys}
    return [
        Difference(
            cell.cell.name, baseline.cell.name, cell.cell.label, key, *values[key], key in allowed
        )
        for key in keys
        if values[key][0] != values[key][1]
    ]


def baseline_for(cell: CellResult, baselines: dict[int, CellResult]) -> CellResult | None:
    """The baseline cell of the same seed, else of the lowest seed."""
    if cell.cell.seed in baselines:
        return baselines[cell.cell.seed]
    return baselines[min(baselines)] if baselines else None


def all_differences(results: list[CellResult], baseline_label: str) -> list[Difference]:
    """Differences of every non-baseline cell (and every baseline seed) from the baseline."""
    baselines = {r.cell.seed: r for r in results if r.cell.label == baseline_label}
    if not baselines:
        return []
    reference = baselines[min(baselines)]
    found = []
    for result in results:
        if result is reference:
            continue
        other = (
            reference if result.cell.label == baseline_label else baseline_for(result, baselines)
        )
        found += config_differences(result, other)
    return found
