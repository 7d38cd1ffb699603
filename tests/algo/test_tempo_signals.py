"""TEMPO's signals (rlvr/algo/advantages/tempo.py), worked by hand, then against the lab's
own functions (agentic-rl-lab 09-tempo `tempo.py` and `critic.py`) on the same inputs."""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest

from rlvr.algo.advantages.tempo import (
    critic_rewards,
    endpoint_value,
    mean_centered,
    parse_value,
    segment_returns,
    value_target,
)

LAB = Path(
    os.environ.get(
        "RLVR_AGENTIC_RL_LAB", Path(__file__).resolve().parents[2].parent / "shared/agentic-rl-lab"
    )
)
LAB_TEMPO = LAB / "09-tempo"


def test_parse_value_reads_the_last_tag_and_clips():
    assert parse_value("think <value>0.25</value>") == 0.25
    assert parse_value("<value>0.1</value> then <VALUE> .75 </value>") == 0.75  # the last
    assert parse_value("<value>3</value>") == 1.0  # clipped to [0, 1]
    assert parse_value("<value>0</value>") == 0.0


@pytest.mark.parametrize(
    "text",
    ["", "0.4", "<value>0.4", "<value>-0.2</value>", "<value>high</value>", "<value>1e-3</value>"],
)
def test_parse_value_refuses_what_is_malformed(text):
    assert parse_value(text) is None


def test_endpoint_value_means_the_parsed_and_counts_the_failed():
    # (0.2 + 0.6) / 2 = 0.4, one failure; all failed → 0.0 (no bootstrap), two failures.
    assert endpoint_value([0.2, None, 0.6]) == (pytest.approx(0.4, abs=1e-15), 1)
    assert endpoint_value([None, None]) == (0.0, 2)


def test_returns_target_and_advantages_by_hand():
    # Four segments from one start: won in it (r = 1, ended), lost at the step limit (ended),
    # two stopped at the boundary with V̂ 0.5 and 0.25 (TD).
    rewards, values, ended = [1.0, 0.0, 0.0, 0.0], [0.9, 0.7, 0.5, 0.25], [True, True, False, False]
    returns = segment_returns(rewards, values, ended)
    assert returns == [1.0, 0.0, 0.5, 0.25]  # the ended ones ignore their V̂
    g = value_target(returns)
    assert g == 0.4375  # (1 + 0 + 0.5 + 0.25) / 4 = 1.75 / 4, exact in binary
    assert mean_centered(returns) == [0.5625, -0.4375, 0.0625, -0.1875]
    # The critic's four estimates of the start: |0.5 − 0.4375| = 0.0625, |0 − 0.4375|,
    # a failed parse (error 1), |1 − 0.4375| = 0.5625.
    rewards_c, errors = critic_rewards([0.5, 0.0, None, 1.0], g)
    assert errors == [0.0625, 0.4375, 1.0, 0.5625]
    assert rewards_c == [-0.0625, -0.4375, -1.0, -0.5625]
    # Their mean is −2.0625/4 = −0.515625; centred: 0.453125, 0.078125, −0.484375, −0.046875.
    assert mean_centered(rewards_c) == [0.453125, 0.078125, -0.484375, -0.046875]


def test_errors_name_what_is_wrong():
    with pytest.raises(ValueError, match="2 rewards, 1 values and 2 ended"):
        segment_returns([0.0, 1.0], [0.5], [False, True])
    with pytest.raises(ValueError, match="at least one segment"):
        value_target([])
    with pytest.raises(ValueError, match="r_max=0"):
        critic_rewards([0.5], 0.5, r_max=0)


def _lab():
    """The lab's tempo.py and critic.py, imported as they are. Their imports that need
    ALFWorld or a tokenizer (rollout, states, protocol) stand in as empty modules: the
    functions compared read only plain attributes."""
    stubs = {
        "rollout": ["MacroGroup", "Trajectory"],
        "states": ["MacroState"],
        "protocol": ["stop_sequences"],
    }
    saved = {name: sys.modules.get(name) for name in [*stubs, "critic", "tempo"]}
    try:
        for name, attrs in stubs.items():
            module = types.ModuleType(name)
            for attr in attrs:
                setattr(module, attr, object)
            sys.modules[name] = module
        loaded = {}
        for name in ("critic", "tempo"):
            spec = importlib.util.spec_from_file_location(name, LAB_TEMPO / f"{name}.py")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            loaded[name] = module
        return loaded["critic"], loaded["tempo"]
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


@pytest.mark.skipif(not (LAB_TEMPO / "tempo.py").is_file(), reason=f"the lab is not at {LAB}")
def test_equals_the_labs_functions():
    pytest.importorskip("pytrio")
    lab_critic, lab_tempo = _lab()
    texts = [
        "<value>0.42</value>",
        "reasoning... <value> 0.9 </value>",
        "<value>0.1</value><value>2.5</value>",
        "no tag",
        "<value>.3</value>",
        "<value>-1</value>",
    ]
    for text in texts:
        assert parse_value(text) == lab_critic.parse_value(text), text
    values = [0.3, None, 0.8, 0.55]
    samples = [types.SimpleNamespace(value=v) for v in values]
    assert endpoint_value(values) == lab_critic.endpoint_value(samples)

    # One start, five segments: boundary stops bootstrap, ended ones do not.
    stops = ["macro_boundary", "won", "macro_boundary", "max_steps", "macro_boundary"]
    rewards = [0.0, 1.0, 0.0, 0.0, 0.0]
    endpoint = [0.7, 0.2, 0.1, 0.9, 0.45]
    group = types.SimpleNamespace(
        trajectories=[
            types.SimpleNamespace(segment_reward=r, endpoint_value=v, stop_reason=s)
            for r, v, s in zip(rewards, endpoint, stops, strict=True)
        ]
    )
    signals = lab_tempo.assemble_actor_group(group)
    returns = segment_returns(rewards, endpoint, [s != "macro_boundary" for s in stops])
    # Same sums in the same order: equal to the last bit.
    assert returns == signals.returns
    assert value_target(returns) == signals.value_target
    assert mean_centered(returns) == signals.advantages

    critic = lab_tempo.assemble_critic_group(samples, signals.value_target)
    rewards_c, errors = critic_rewards(values, signals.value_target)
    assert (rewards_c, errors) == (critic.rewards, critic.errors)
    assert mean_centered(rewards_c) == critic.advantages
    assert sum(v is None for v in values) == critic.parse_failures
