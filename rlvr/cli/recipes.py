"""`rlvr recipes`: one row per recipe, each column a choice, and `other` naming every
field the columns do not show that differs from its default, so no choice is hidden."""

from __future__ import annotations

import argparse
import json
from dataclasses import fields

from rlvr.algo.recipes import RECIPES, Recipe, clip_band, recipe_fields
from rlvr.algo.registry import SURROGATES
from rlvr.cli.common import format_table

RECIPE_COLUMNS = (
    "advantage",
    "ratio",
    "surrogate",
    "clip",
    "aggregation",
    "kl",
    "selection",
    "other",
)

# The fields each column shows (whatever their value); `other` lists the rest that moved.
COLUMN_FIELDS = {
    "recipe": ("name",),
    "source": ("source",),
    "advantage": ("advantage", "teacher_kl_coef", "teacher_weight"),
    "ratio": ("ratio",),
    "surrogate": ("surrogate",),
    "aggregation": ("aggregation",),
    "kl": ("kl", "kl_coef", "kl_in_reward"),
    "selection": (
        "dynamic_sampling",
        "overlong_penalty",
        "overlong_filter",
        "zero_adv_skip",
        "zero_variance_filter",
        "retire_threshold",
        "fp32_head",
        "nll_coef",
    ),
}
_DEFAULTS = {f.name: f.default for f in fields(Recipe)}


def recipe_row(recipe: Recipe) -> dict[str, str]:
    """The recipe's row: column name → text."""
    kl = "—"
    if recipe.kl:
        kl = f"{recipe.kl} β={recipe.kl_coef:g} " + (
            "in reward" if recipe.kl_in_reward else "in loss"
        )
    flags = {
        "dynamic sampling": recipe.dynamic_sampling,
        "soft overlong": recipe.overlong_penalty,
        "overlong filter": recipe.overlong_filter,
        "zero-adv skip": recipe.zero_adv_skip,
        "zero-var filter": recipe.zero_variance_filter,
        f"retire ≥{recipe.retire_threshold}": recipe.retire_threshold is not None,
        "FP32 head": recipe.fp32_head,
        "critic": recipe.needs_critic,
        f"NLL μ={recipe.nll_coef:g}": recipe.nll_coef > 0,
    }
    return {
        "recipe": recipe.name,
        "advantage": recipe.advantage + _teacher_term(recipe),
        "ratio": recipe.ratio,
        "surrogate": recipe.surrogate,
        "clip": clip_band(recipe),
        "aggregation": recipe.aggregation,
        "kl": kl,
        "selection": ", ".join(k for k, on in flags.items() if on) or "—",
        "other": " ".join(_setting(name, value) for name, value in other_fields(recipe)) or "—",
        "source": recipe.source,
    }


def other_fields(recipe: Recipe) -> list[tuple[str, object]]:
    """(field, value) of every field off its default that no column shows. The clip
    column shows clip_low/clip_high only for a surrogate that has bounds."""
    shown = {name for names in COLUMN_FIELDS.values() for name in names}
    if SURROGATES.get(recipe.surrogate).bounds != "none":
        shown |= {"clip_low", "clip_high"}
    return [
        (name, getattr(recipe, name))
        for name, default in _DEFAULTS.items()
        if name not in shown and getattr(recipe, name) != default
    ]


def _setting(name: str, value: object) -> str:
    """`name=value`, numbers as %g; a True flag by its name alone."""
    if value is True:
        return name
    if isinstance(value, float):
        return f"{name}={value:g}"
    return f"{name}={value}"


def _teacher_term(recipe: Recipe) -> str:
    """' + teacher β=…' when the recipe adds a teacher's term (λ shown when not 1)."""
    if not recipe.teacher_kl_coef:
        return ""
    weight = f" λ={recipe.teacher_weight:g}" if recipe.teacher_weight != 1.0 else ""
    return f" + teacher β={recipe.teacher_kl_coef:g}{weight}"


def cmd_recipes(args: argparse.Namespace) -> int:
    rows = [recipe_row(r) for r in RECIPES.values()]
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return 0
    print(format_table(rows, ("recipe", *RECIPE_COLUMNS, "source")))
    if args.fields:
        print("\nFields (override any with --set FIELD=VALUE):")
        for name, doc in recipe_fields().items():
            print(f"  {name:22} {doc}")
    return 0


def add_recipes_parser(sub) -> None:
    p = sub.add_parser("recipes", help="list the named recipes and the choices they make")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--fields", action="store_true", help="also document every recipe field")
    p.set_defaults(func=cmd_recipes)
