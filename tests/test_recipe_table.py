"""`rlvr recipes` hides no choice (issue 29): every field off its default shows in the row,
in a column or as `name=value` under `other`."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from rlvr.algo.recipes import RECIPES, Recipe, get_recipe
from rlvr.cli.recipes import COLUMN_FIELDS, RECIPE_COLUMNS, other_fields, recipe_row

DEFAULTS = {f.name: f.default for f in dataclasses.fields(Recipe)}


def test_column_fields_name_recipe_fields():
    # A misspelt name would make that field's moves vanish from `other` unseen.
    for column, names in COLUMN_FIELDS.items():
        assert column in (*RECIPE_COLUMNS, "recipe", "source")
        assert set(names) <= set(DEFAULTS), column


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_moved_field_of_a_recipe_changes_its_row(name):
    recipe = RECIPES[name]
    moved = [
        f for f, d in DEFAULTS.items() if f not in ("name", "source") and getattr(recipe, f) != d
    ]
    for field in moved:
        try:
            back = dataclasses.replace(recipe, **{field: DEFAULTS[field]})
        except ValueError:  # refused alone (kl without kl_coef, opd's advantage without
            # a teacher): then a column must show it whatever its value
            assert any(field in names for names in COLUMN_FIELDS.values()), field
            continue
        assert recipe_row(back) != recipe_row(recipe), f"{name}: {field} is not shown"


def test_the_second_generation_fields_show_under_other():
    recipe = get_recipe(
        "grpo",
        top_entropy_quantile=0.2,
        kl_ratio_correction=True,
        entropy_coef=0.01,
        entropy_target=0.2,
        offpolicy_mask_delta=0.5,
    )
    # In the dataclass's field order; a True flag by its name alone.
    assert recipe_row(recipe)["other"] == (
        "offpolicy_mask_delta=0.5 entropy_coef=0.01 entropy_target=0.2 "
        "top_entropy_quantile=0.2 kl_ratio_correction"
    )
    assert recipe_row(get_recipe("dppo", dppo_anchor="old"))["other"] == "dppo_anchor=old"
    assert recipe_row(RECIPES["grpo_trl_vllm"])["other"] == (
        "rollout_correction=sequence_mis rc_upper=3"
    )
    assert recipe_row(RECIPES["grpo"])["other"] == "—"


def test_bounds_show_under_other_only_where_the_clip_column_cannot():
    # sapo's gate has no bounds: the clip column says —, so moved bounds go to `other`.
    assert other_fields(get_recipe("sapo", clip_high=0.3)) == [("clip_high", 0.3)]
    assert other_fields(get_recipe("grpo", clip_high=0.3)) == []
    assert recipe_row(get_recipe("grpo", clip_high=0.3))["clip"] == "0.8..1.3"


def test_cli_json_carries_the_other_column():
    done = subprocess.run(
        [sys.executable, "-m", "rlvr", "recipes", "--json"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    rows = {row["recipe"]: row for row in json.loads(done.stdout)}
    assert rows["vapo"]["other"] == "value_pretrain_steps=20"
    assert rows["ppo"]["other"] == "whiten_advantages"
