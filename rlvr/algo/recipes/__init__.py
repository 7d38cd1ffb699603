"""The named recipes of docs/algorithms.md §8: each a frozen dataclass of independent choices
(`choices.py`: the fields and their docs; `checks.py`: what a combination must satisfy;
`table.py`: `Recipe`, the named table `RECIPES` and `get_recipe`). This is the only place
where a method's name means anything: the loop and the loss read the fields."""

from rlvr.algo.recipes.table import RECIPES, Recipe, clip_band, get_recipe, recipe_fields

__all__ = ["RECIPES", "Recipe", "clip_band", "get_recipe", "recipe_fields"]
