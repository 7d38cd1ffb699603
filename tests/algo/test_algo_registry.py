"""The registries: valid names and errors come from them, a decorator or a `module:function`
reference adds a choice, and parameters reach every surrogate the same way."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch
from algo_testlib import F64

from rlvr.algo import get_recipe, policy_loss, register_surrogate
from rlvr.algo.policy.surrogates import SurrogateOut, clip
from rlvr.algo.registry import (
    ADVANTAGES,
    AGGREGATIONS,
    KL_ESTIMATORS,
    RATIOS,
    SELECTIONS,
    SURROGATES,
    Registry,
)

DOC = (Path(__file__).resolve().parents[2] / "docs" / "algorithms.md").read_text()


def test_every_registered_name_is_in_the_contract():
    for registry in (ADVANTAGES, RATIOS, SURROGATES, AGGREGATIONS):
        for name in registry.names():
            assert f"`{name}`" in DOC, f"{registry.kind} {name!r} is not in docs/algorithms.md"
    for name in KL_ESTIMATORS.names():  # k1 = …, k2 = …, k3 = … or a row `k3+`
        assert f"{name} =" in DOC or f"`{name}`" in DOC, f"kl {name!r} is not in algorithms.md"


def test_properties_live_on_the_entries():
    assert {e.name for e in ADVANTAGES if e.needs_critic} == {"gae", "vapo_gae"}
    assert {e.name for e in ADVANTAGES if e.token_rewards} == {"reinforce_pp", "gae", "vapo_gae"}
    assert {e.name for e in RATIOS if e.sequence_level} == {"sequence", "sequence_token"}
    assert set(SELECTIONS.names()) == {"dynamic_sampling", "zero_variance_filter"}


@pytest.mark.parametrize(
    ("field", "registry"),
    [("advantage", ADVANTAGES), ("ratio", RATIOS), ("surrogate", SURROGATES),
     ("aggregation", AGGREGATIONS), ("kl", KL_ESTIMATORS)],
)  # fmt: skip
def test_errors_list_the_registered_names(field, registry):
    with pytest.raises(ValueError) as err:
        get_recipe("grpo", **{field: "nonesuch"})
    message = str(err.value)
    assert message.startswith(f"{field}='nonesuch' is not valid")
    assert all(name in message for name in registry.names())


def test_a_registered_name_becomes_valid():
    registry = Registry("thing", special=False)
    registry.register("a", lambda: 1)
    registry.register("b", lambda: 2, special=True)
    assert registry.names() == ("a", "b")
    assert [e.special for e in registry] == [False, True]
    with pytest.raises(ValueError, match=r"unknown properties \['specal'\]; valid: special"):
        registry.register("c", lambda: 3, specal=True)


def test_bad_references_are_named():
    with pytest.raises(ValueError, match=r"surrogate='no_such_module_x:f': cannot import it"):
        get_recipe("grpo", surrogate="no_such_module_x:f")
    with pytest.raises(ValueError, match=r"surrogate='math:nothere': cannot import it"):
        get_recipe("grpo", surrogate="math:nothere")
    with pytest.raises(ValueError, match=r"surrogate='math:pi' is not a function"):
        get_recipe("grpo", surrogate="math:pi")


def _one_token_loss(recipe, ratio_value, advantage):
    logprobs = torch.tensor([[0.0]], dtype=F64, requires_grad=True)
    old = torch.full_like(logprobs, -torch.log(torch.tensor(ratio_value, dtype=F64)).item())
    ones = torch.ones_like(logprobs)
    adv = torch.full_like(logprobs, advantage)
    loss, _ = policy_loss(
        recipe, logprobs=logprobs, old_logprobs=old, advantages=adv,
        loss_weights=ones, response_mask=ones,
    )  # fmt: skip
    return loss.item()


def test_params_reach_every_surrogate_the_same_way():
    # ρ = 5, Â = −1: clip gives −min(−5, −1.2) = 5; dual_clip bounds it by −c·Â = c.
    assert _one_token_loss(get_recipe("grpo", kl_coef=0.0), 5.0, -1.0) == pytest.approx(5.0)
    for c in (2.0, 4.0):
        recipe = get_recipe("grpo", kl_coef=0.0, surrogate="dual_clip", dual_clip_c=c)
        assert _one_token_loss(recipe, 5.0, -1.0) == pytest.approx(c)


def test_decorator_registers_a_surrogate_by_name():
    @register_surrogate("test_halved_clip")
    def halved_clip(ratio, advantages, logprobs, params) -> SurrogateOut:
        out = clip(ratio, advantages, logprobs, params)
        return SurrogateOut(0.5 * out.loss, out.clipped_low, out.clipped_high)

    recipe = get_recipe("grpo", kl_coef=0.0, surrogate="test_halved_clip")
    # ρ = 5, Â = −1: the clip loss 5 (above), halved.
    assert _one_token_loss(recipe, 5.0, -1.0) == pytest.approx(2.5)
    assert "test_halved_clip" in SURROGATES.names()


def test_a_decorated_function_named_by_reference_keeps_its_properties(tmp_path, monkeypatch):
    (tmp_path / "rlvr_test_critic_adv.py").write_text(
        "from rlvr.algo import register_advantage\n"
        "@register_advantage('test_critic_adv', needs_critic=True)\n"
        "def estimate(batch, params):\n"
        "    return batch.values, batch.values\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    recipe = get_recipe("grpo", advantage="rlvr_test_critic_adv:estimate")
    assert recipe.needs_critic
    assert "rlvr_test_critic_adv" in sys.modules
    assert re.search(r"test_critic_adv\b", ", ".join(ADVANTAGES.names()))
