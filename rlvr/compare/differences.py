"""What differed between cells: the recorded, fully resolved config of every cell against
the baseline cell of the same seed, every differing field listed.

Each difference is one of three kinds:
- `compared`: a field the comparison is about: the matrix's `compares` list, or, when it
  has none, the fields its overrides set (and the recipe name itself);
- `package`: a field the compared recipes (or overrides) set differently that `compares`
  does not name: the conditions differ in more than the compared choice;
- `stray`: a field nothing in the matrix explains (a cell left over from another config):
  a confound, warned about.

The report prints ✔ only when every difference is `compared` and every compared field
does differ; otherwise ✘ with the list. `seed` and `out` name the run, and `warm_seed`
may differ between seeds (`warm_seed: per_seed`); none of them is a setting compared here.
Under a budget of equal optimizer updates each cell's `steps` follows from its budget and
is not a difference either (the report's budget line states the steps measured).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import MISSING, dataclass, fields
from typing import Any

from rlvr.algo.recipes import RECIPES
from rlvr.compare.results import CellResult
from rlvr.train.config import RECIPE_KEYS, TrainConfig

RUN_IDENTITY = frozenset({"seed", "out"})
PER_SEED = frozenset({"warm_seed"})
KINDS = ("compared", "package", "stray")


@dataclass(frozen=True)
class Difference:
    cell: str
    baseline_cell: str
    label: str
    key: str
    baseline_value: Any
    value: Any
    kind: str

    @property
    def allowed(self) -> bool:
        """Explained by the matrix (compared or the recipes' own fields), not a confound."""
        return self.kind != "stray"

    def text(self) -> str:
        return f"`{self.key}`: {self.baseline_value!r} → {self.value!r}"

    def warning(self) -> str:
        return (
            f"cell {self.cell} differs from {self.baseline_cell} in uncompared field "
            f"{self.key!r}: {self.value!r} vs {self.baseline_value!r}"
        )


def package_keys(cell: CellResult, baseline: CellResult) -> set[str]:
    """The fields the matrix sets differently for the two cells: the recipe name, each
    recipe field whose default differs between the two recipes, and every override."""
    keys = set(cell.cell.overrides) | set(baseline.cell.overrides)
    mine, theirs = RECIPES.get(cell.cell.recipe), RECIPES.get(baseline.cell.recipe)
    if mine is not None and theirs is not None and mine.name != theirs.name:
        keys.add("recipe")
        keys |= {k for k in RECIPE_KEYS if getattr(mine, k) != getattr(theirs, k)}
    return keys


def compared_keys(cell: CellResult, baseline: CellResult, compares: Sequence[str]) -> set[str]:
    """The declared `compares` fields, else the overrides' fields; always the recipe name."""
    declared = set(compares) or set(cell.cell.overrides) | set(baseline.cell.overrides)
    return declared | {"recipe"}


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


def _inert(key: str, cell: CellResult, baseline: CellResult) -> bool:
    # The KL estimator is multiplied by kl_coef in the loss: with kl_coef 0 in both cells
    # the two estimators contribute nothing, so their names do not differ in effect.
    return key == "kl" and recorded(cell, "kl_coef") == 0 == recorded(baseline, "kl_coef")


def config_differences(
    cell: CellResult,
    baseline: CellResult,
    compares: Sequence[str] = (),
    budget_keys: frozenset[str] = frozenset(),
) -> list[Difference]:
    """Every setting whose value differs between `cell` and `baseline` (`recorded`), but
    `budget_keys`: the fields the matrix budget sets per cell."""
    compared = compared_keys(cell, baseline, compares)
    package = package_keys(cell, baseline)
    ignored = RUN_IDENTITY | budget_keys
    ignored |= PER_SEED if cell.cell.seed != baseline.cell.seed else set()
    keys = sorted(set(cell.config) | set(baseline.config) | compared - ignored)
    found = []
    for key in keys:
        before, after = recorded(baseline, key), recorded(cell, key)
        if key in ignored or before == after or _inert(key, cell, baseline):
            continue
        kind = "compared" if key in compared else "package" if key in package else "stray"
        found.append(
            Difference(
                cell.cell.name, baseline.cell.name, cell.cell.label, key, before, after, kind
            )
        )
    return found


def baseline_for(cell: CellResult, baselines: dict[int, CellResult]) -> CellResult | None:
    """The baseline cell of the same seed, else of the lowest seed."""
    if cell.cell.seed in baselines:
        return baselines[cell.cell.seed]
    return baselines[min(baselines)] if baselines else None


def all_differences(
    results: list[CellResult],
    baseline_label: str,
    compares: Sequence[str] = (),
    budget_keys: frozenset[str] = frozenset(),
) -> list[Difference]:
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
        found += config_differences(result, other, compares, budget_keys)
    return found


def difference_check(
    diffs: Sequence[Difference], labels: Sequence[str], baseline: str, compares: Sequence[str]
) -> tuple[bool, list[str]]:
    """(✔?, why not): ✔ iff every difference is a compared field and, when `compares` is
    declared, each condition other than the baseline differs in every declared field."""
    beyond: dict[tuple[str, str], list[str]] = {}
    for d in diffs:
        if d.kind != "compared":
            keys = beyond.setdefault((d.label, d.kind), [])
            keys += [] if d.key in keys else [d.key]
    why = {"package": "set by the recipes or overrides", "stray": "set by nothing in the matrix"}
    problems = [
        f"{label} differs beyond the compared fields in {', '.join(f'`{k}`' for k in keys)} "
        f"({why[kind]})"
        for (label, kind), keys in beyond.items()
    ]
    for label in labels:
        seen = {d.key for d in diffs if d.label == label and d.kind == "compared"}
        missing = [k for k in compares if k not in seen]
        if label != baseline and missing:
            problems.append(f"{label} does not differ in compared field(s) {', '.join(missing)}")
    return not problems, problems
