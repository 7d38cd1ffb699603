"""The experiment matrix: recipes × overrides × seeds, every other condition held fixed.

A `MatrixSpec` is a base training config (a dict, as in a YAML config) plus the compared
choices. Each `Cell` is one training run: its label (the compared condition), its seed
and the full config dict that `resolve_config` turns into a `TrainConfig`. A cell lives in
`DIR/cells/<label>-seed<k>/` and is finished iff its `summary.json` exists (the loop writes
it last).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlvr.checks import check_int
from rlvr.compare.verdict import hypothesis_from_dict
from rlvr.train.config import (
    RECIPE_KEYS,
    TRAIN_KEYS,
    apply_override,
    load_yaml,
    resolve_config,
)

BUDGET_MODES = ("steps", "tokens", "updates")
SPEC_KEYS = {"base", "recipes", "overrides", "seeds", "budget", "baseline", "hypothesis"}
SPEC_KEYS |= {"compares", "warm_seed"}
WARM_SEEDS = ("shared", "per_seed")
# Tokens mode needs a step cap too; it only guards against a budget that is never reached.
DEFAULT_MAX_STEPS = 100_000


@dataclass(frozen=True)
class Budget:
    """Equal budget per cell: the same training `steps` (rollout batches), the same
    generated `tokens` (so samples that dynamic sampling discards count against the recipe
    that drew them), or the same optimizer `updates` (steps = value / (num_minibatches ×
    ppo_epochs) per cell: more minibatches per rollout batch, fewer rollout batches)."""

    mode: str = "steps"
    value: int = 50
    max_steps: int = DEFAULT_MAX_STEPS

    def __post_init__(self) -> None:
        if self.mode not in BUDGET_MODES:
            raise ValueError(
                f"budget.mode={self.mode!r} is unknown; valid: {', '.join(BUDGET_MODES)}"
            )
        for name in ("value", "max_steps"):
            check_int(f"budget.{name}", getattr(self, name))

    def describe(self) -> str:
        # A step is one rollout batch; the optimizer updates per step (minibatches ×
        # epochs) may differ between cells, so the budget line reports them measured.
        if self.mode == "steps":
            return f"equal training steps (rollout batches): {self.value} per cell"
        if self.mode == "updates":
            return (
                f"equal optimizer updates: {self.value} per cell (training steps = "
                f"{self.value} / (num_minibatches × ppo_epochs) of each cell)"
            )
        return (
            f"equal generated tokens: each cell stops after the step at which its cumulative "
            f"generated tokens reach {self.value:,} (discarded samples count; cap "
            f"{self.max_steps} steps)"
        )

    @property
    def per_cell_keys(self) -> frozenset[str]:
        """Config fields this budget sets to a different value per cell."""
        return frozenset({"steps"}) if self.mode == "updates" else frozenset()

    def config_fields(self, updates_per_step: int = 1) -> dict[str, Any]:
        """The TrainConfig fields that impose this budget on a cell taking
        `updates_per_step` optimizer updates per training step."""
        if self.mode == "steps":
            return {"steps": self.value}
        if self.mode == "updates":
            if self.value % updates_per_step:
                raise ValueError(
                    f"budget.mode='updates': value {self.value} is not a multiple of the "
                    f"{updates_per_step} optimizer updates per step (num_minibatches × "
                    f"ppo_epochs); choose a value every condition divides"
                )
            return {"steps": self.value // updates_per_step}
        if "max_generated_tokens" not in TRAIN_KEYS:
            raise ValueError(
                "budget.mode='tokens' needs TrainConfig.max_generated_tokens, which this "
                "version of rlvr.train lacks; use budget.mode='steps'"
            )
        return {"steps": self.max_steps, "max_generated_tokens": self.value}


@dataclass(frozen=True)
class Cell:
    """One run of the matrix."""

    label: str
    recipe: str
    seed: int
    overrides: dict[str, Any]
    config: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.label}-seed{self.seed}"


@dataclass(frozen=True)
class MatrixSpec:
    """What to compare: `recipes` × `overrides` (label → {field: value}) × `seeds`."""

    base: dict[str, Any] = field(default_factory=dict)
    recipes: tuple[str, ...] = ("grpo",)
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    seeds: tuple[int, ...] = (0,)
    budget: Budget = field(default_factory=Budget)
    baseline: str | None = None
    hypothesis: dict[str, Any] | None = None
    """Pre-registered claim and predictions (`rlvr.compare.verdict`); the report judges it."""
    compares: tuple[str, ...] = ()
    """The config fields the comparison is about; the report's difference check prints ✔
    only when exactly these differ between conditions (empty: the overrides' fields)."""
    warm_seed: str = "shared"
    """'shared': every cell starts from the base config's warm_seed; 'per_seed': cell k's
    warm start uses warm_seed = k (each cached), so seeds vary the warm start too."""

    def __post_init__(self) -> None:
        if not self.recipes:
            raise ValueError("recipes must name at least one recipe")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct and non-empty, got {list(self.seeds)}")
        for key in ("recipe", "seed", "out", "steps"):
            if key in self.base:
                raise ValueError(f"base.{key} is set by the matrix; remove it from base")
        for label, values in self.overrides.items():
            if not isinstance(values, dict):
                raise ValueError(f"overrides.{label} must map fields to values")
            bad = {"recipe", "seed", "out", "steps", "max_generated_tokens"} & set(values)
            if bad:
                raise ValueError(
                    f"overrides.{label} sets {sorted(bad)}: set by the matrix (its budget "
                    f"sets steps; budget.mode 'updates' gives each cell its own)"
                )
        labels = self.labels()
        duplicates = sorted({label for label in labels if labels.count(label) > 1})
        if duplicates:
            raise ValueError(
                f"duplicate condition(s) {', '.join(duplicates)}: each recipe and override "
                f"label may appear once (recipes {list(self.recipes)})"
            )
        if self.baseline is not None and self.baseline not in labels:
            raise ValueError(f"baseline={self.baseline!r} is not a label; valid: {labels}")
        if self.hypothesis is not None:
            hypothesis_from_dict(self.hypothesis, labels)
        self._check_compares_and_warm_seed()

    def _check_compares_and_warm_seed(self) -> None:
        unknown = [k for k in self.compares if k not in TRAIN_KEYS | RECIPE_KEYS]
        if unknown:
            raise ValueError(f"compares names unknown config field(s) {unknown}")
        if self.warm_seed not in WARM_SEEDS:
            raise ValueError(
                f"warm_seed={self.warm_seed!r} is unknown; valid: {', '.join(WARM_SEEDS)}"
            )
        setters = ["base"] * ("warm_seed" in self.base) + [
            f"overrides.{label}"
            for label, values in self.overrides.items()
            if "warm_seed" in values
        ]
        if self.warm_seed == "per_seed" and setters:
            raise ValueError(
                f"warm_seed: per_seed sets each cell's warm_seed to its seed; remove warm_seed "
                f"from {', '.join(setters)}"
            )

    def _conditions(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(label, recipe, overrides) for every compared condition, in order."""
        conditions = self.overrides or {"": {}}
        out = []
        for recipe in self.recipes:
            for key, values in conditions.items():
                if not key:
                    label = recipe
                elif len(self.recipes) == 1:
                    label = key
                else:
                    label = f"{recipe}+{key}"
                out.append((safe_label(label), recipe, dict(values)))
        return out

    def labels(self) -> list[str]:
        return [label for label, _, _ in self._conditions()]

    @property
    def baseline_label(self) -> str:
        return self.baseline or self.labels()[0]

    def cells(self, out_dir: str | Path) -> list[Cell]:
        """Every cell, each with its full config dict; configs are validated here."""
        cells = []
        for seed in self.seeds:
            for label, recipe, values in self._conditions():
                cell_dir = Path(out_dir) / "cells" / f"{label}-seed{seed}"
                config = {**self.base, **values, "recipe": recipe}
                try:
                    config |= self.budget.config_fields(_updates_per_step(config))
                    config.update(recipe=recipe, seed=seed, out=str(cell_dir), progress=False)
                    if self.warm_seed == "per_seed":
                        config["warm_seed"] = seed
                    resolve_config(config)
                except ValueError as err:
                    raise ValueError(f"cell {label}-seed{seed}: {err}") from None
                cells.append(Cell(label, recipe, seed, values, config))
        return cells

    def to_dict(self) -> dict[str, Any]:
        budget = {"mode": self.budget.mode, "value": self.budget.value}
        if self.budget.mode == "tokens":
            budget["max_steps"] = self.budget.max_steps
        return {
            "base": self.base,
            "recipes": list(self.recipes),
            "overrides": self.overrides,
            "seeds": list(self.seeds),
            "budget": budget,
            "baseline": self.baseline_label,
            **({"hypothesis": self.hypothesis} if self.hypothesis is not None else {}),
            **({"compares": list(self.compares)} if self.compares else {}),
            **({"warm_seed": self.warm_seed} if self.warm_seed != "shared" else {}),
        }


def _updates_per_step(config: dict[str, Any]) -> int:
    """Optimizer updates per training step of a cell's config (recipe defaults applied)."""
    resolved = resolve_config(config)
    return resolved.num_minibatches * resolved.ppo_epochs


def safe_label(label: str) -> str:
    """A label usable as a directory name: other characters become '_'."""
    return re.sub(r"[^A-Za-z0-9_.=+-]", "_", label)


def spec_from_dict(data: dict[str, Any]) -> MatrixSpec:
    """A spec from a YAML mapping; `base` may be a mapping or the path of a train config."""
    unknown = sorted(set(data) - SPEC_KEYS)
    if unknown:
        raise ValueError(f"unknown matrix key(s) {unknown}; valid: {sorted(SPEC_KEYS)}")
    base = data.get("base") or {}
    if isinstance(base, str):
        base = load_yaml(base)
    budget = data.get("budget") or {}
    if not isinstance(budget, dict):
        raise ValueError(f"budget must be a mapping {{mode, value}}, got {budget!r}")
    if budget.get("mode") == "tokens" and "value" not in budget:
        raise ValueError("budget.mode='tokens' needs budget.value (generated tokens per cell)")
    recipes = data.get("recipes", ["grpo"])
    seeds = data.get("seeds", [0])
    return MatrixSpec(
        base=dict(base),
        recipes=tuple([recipes] if isinstance(recipes, str) else recipes),
        overrides=dict(data.get("overrides") or {}),
        seeds=tuple(range(seeds)) if isinstance(seeds, int) else tuple(seeds),
        budget=Budget(**budget),
        baseline=data.get("baseline"),
        hypothesis=data.get("hypothesis"),
        compares=_field_list("compares", data.get("compares")),
        warm_seed=data.get("warm_seed", "shared"),
    )


def _field_list(name: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{name} must be a list of config field names, got {value!r}")
    return tuple(value)


def load_spec(path: str | Path) -> MatrixSpec:
    """Read a matrix YAML (keys: base, recipes, overrides, seeds, budget, baseline)."""
    return spec_from_dict(load_yaml(path))


def save_spec(spec: MatrixSpec, out_dir: str | Path) -> Path:
    path = Path(out_dir) / "matrix.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(spec.to_dict(), sort_keys=False))
    return path


def parse_seeds(text: str) -> tuple[int, ...]:
    """'3' → (0, 1, 2); '0,4,7' → (0, 4, 7)."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--seeds expects a count or a comma list of ints, got {text!r}") from None
    if len(values) == 1 and "," not in text:
        if values[0] < 1:
            raise ValueError(f"--seeds count must be ≥ 1, got {values[0]}")
        return tuple(range(values[0]))
    return tuple(values)


def _merge_budget(budget, mode, steps, tokens, default_steps, updates=None) -> dict[str, Any]:
    """The budget mapping after command-line values: in steps mode `steps` (else the base
    config's steps) is the value; in tokens mode `tokens` is the value, `steps` the cap; in
    updates mode `updates` is the value (training steps follow per cell)."""
    if budget is not None and not isinstance(budget, dict):
        raise ValueError(f"budget must be a mapping {{mode, value}}, got {budget!r}")
    budget = dict(budget or {})
    implied = "tokens" if tokens else "updates" if updates else None
    mode = mode or implied or budget.get("mode", "steps")
    if mode != budget.get("mode", "steps"):
        budget = {}  # a value in other units must not carry over
    budget["mode"] = mode
    for name, given in (("--steps", steps), ("--tokens", tokens), ("--updates", updates)):
        if given is not None and (isinstance(given, bool) or given < 1):
            raise ValueError(f"{name} must be an integer ≥ 1, got {given!r}")
    applies = {"--tokens": mode == "tokens", "--updates": mode == "updates"}
    applies["--steps"] = mode != "updates"  # tokens: the step cap
    given = {"--steps": steps, "--tokens": tokens, "--updates": updates}
    wrong = [name for name, value in given.items() if value and not applies[name]]
    if wrong:
        raise ValueError(f"{wrong[0]} does not apply to budget.mode={mode!r}")
    if mode == "tokens":
        budget.update({k: v for k, v in (("value", tokens), ("max_steps", steps)) if v})
        return budget
    if mode == "updates":
        budget.update({"value": updates} if updates else {})
        return budget
    value = steps or budget.get("value") or default_steps
    if value:
        budget["value"] = value
    return budget


def spec_from_options(
    *,
    matrix: dict[str, Any] | None = None,
    train_config: dict[str, Any] | None = None,
    sets: list[str] | None = None,
    recipes: list[str] | None = None,
    seeds: tuple[int, ...] | None = None,
    budget_mode: str | None = None,
    steps: int | None = None,
    tokens: int | None = None,
    baseline: str | None = None,
    updates: int | None = None,
) -> MatrixSpec:
    """Merge a matrix YAML, a training config used as the base (its recipe, seed, out and
    steps are dropped: the matrix sets them; its steps become the default step budget),
    base-field overrides and explicit command-line values (highest priority). In tokens
    mode `steps` is the step cap; in updates mode `updates` is the budget."""
    data = dict(matrix or {})
    base = dict(train_config or {})
    default_steps = base.get("steps")
    for key in ("recipe", "seed", "out", "steps", "progress"):
        base.pop(key, None)
    given = data.get("base") or {}
    data["base"] = {**base, **(load_yaml(given) if isinstance(given, str) else given)}
    for assignment in sets or []:
        apply_override(data["base"], assignment)
    explicit = {"recipes": recipes, "seeds": list(seeds) if seeds else None}
    data.update({k: v for k, v in explicit.items() if v is not None})
    data["budget"] = _merge_budget(
        data.get("budget"), budget_mode, steps, tokens, default_steps, updates
    )
    if baseline is not None:
        data["baseline"] = baseline
    return spec_from_dict(data)
