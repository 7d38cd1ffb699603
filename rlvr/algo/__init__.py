"""Pure tensor math of every design choice in docs/algorithms.md, and the named recipes.

Imports nothing else of rlvr: a reader who opens this package sees the whole math.
"""

from rlvr.algo.loss import policy_loss
from rlvr.algo.objective import PreparedBatch, compute_advantages, prepare_batch
from rlvr.algo.recipes import RECIPES, Recipe, get_recipe, recipe_fields
from rlvr.algo.stats import StepStats

__all__ = [
    "RECIPES",
    "PreparedBatch",
    "Recipe",
    "StepStats",
    "compute_advantages",
    "get_recipe",
    "policy_loss",
    "prepare_batch",
    "recipe_fields",
]
