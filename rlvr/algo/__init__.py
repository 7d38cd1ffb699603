"""Pure tensor math of every design choice in docs/algorithms.md, and the named recipes.

Imports nothing else of rlvr but the leaf `rlvr.checks` (type checks of the recipe's
fields): a reader who opens this package sees the whole math. Rooms: `advantages/`
(estimators, GAE, groups, whitening, token returns), `policy/` (ratios, surrogates, masks,
token selection, covariance clips, aggregation, rollout correction), `recipes/` (the
named combinations); beside them the loss, the objective that prepares a batch,
regularizers (KL, value loss), teacher terms, entropy control and selection. Every
choice is registered where it is defined (`registry.py`); register your own with the
`register_*` decorators or name it as `module:function` in a recipe (docs/extending.md).
"""

from rlvr.algo.loss import policy_loss
from rlvr.algo.objective import (
    PreparedBatch,
    compute_advantages,
    prepare_batch,
    selection_metrics,
)
from rlvr.algo.policy.surrogates import SurrogateOut
from rlvr.algo.recipes import RECIPES, Recipe, get_recipe, recipe_fields
from rlvr.algo.registry import (
    AdvantageBatch,
    Params,
    per_response,
    register_advantage,
    register_aggregation,
    register_kl,
    register_ratio,
    register_selection,
    register_surrogate,
)
from rlvr.algo.step_stats import StepStats

__all__ = [
    "RECIPES",
    "AdvantageBatch",
    "Params",
    "PreparedBatch",
    "Recipe",
    "StepStats",
    "SurrogateOut",
    "compute_advantages",
    "get_recipe",
    "per_response",
    "policy_loss",
    "prepare_batch",
    "recipe_fields",
    "register_advantage",
    "register_aggregation",
    "register_kl",
    "register_ratio",
    "register_selection",
    "register_surrogate",
    "selection_metrics",
]
