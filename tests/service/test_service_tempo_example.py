"""examples/tempo/household_tempo.py, 1 warm-up step and 2 TD steps on a 2-step warm start
of the compact household task (the mechanism, not the learning: docs/21-tempo.md has the
measured run): segments pause and bootstrap the critic's value, the advantages are the
returns minus their group mean, critic rows join the agent's in the batch, and the
critic's error and parse rate are logged and finite."""

from __future__ import annotations

import functools
import importlib.util
import math
import sys
from pathlib import Path

from rlvr.algo.advantages.tempo import mean_centered, segment_returns

EXAMPLE = Path(__file__).parents[2] / "examples" / "tempo" / "household_tempo.py"
OPTIONS = {"text": "compact", "train_size": 16, "dev_size": 2, "eval_size": 2}


def load_example():
    sys.path.insert(0, str(EXAMPLE.parent))
    try:
        spec = importlib.util.spec_from_file_location("household_tempo", EXAMPLE)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(EXAMPLE.parent))


def test_two_tempo_steps_bootstrap_and_train_the_critic(tmp_path, monkeypatch):
    from rlvr.warmstart import load as warm_load

    # 2 warm-start steps in a private cache: the task's own warm start takes ~22 minutes.
    tiny = functools.partial(warm_load.warm_start, max_steps=2, cache_dir=tmp_path)
    monkeypatch.setattr(
        warm_load, "warm_start", lambda *a, **kw: tiny(*a, **{**kw, "max_steps": 2})
    )
    tempo = load_example()
    config = tempo.Config(
        steps=2,
        warmup_steps=1,
        states=2,
        branches=2,
        critic_samples=8,
        endpoint_samples=4,
        segment_turns=2,
        max_steps=6,
        warmup_games=1,
        eval_games=1,
        task_options=OPTIONS,
    )
    history = tempo.train(config)
    run = history.pop("run")
    assert len(history["td"]) == 2 and len(history["warmup"]) == 1
    for metrics in [*history["warmup"], *history["td"]]:
        assert math.isfinite(metrics["critic/abs_error"]) and 0 <= metrics["critic/abs_error"] <= 1
        assert 0 <= metrics["critic/parsed"] <= 1
    assert sum(m["train/critic_rows"] for m in history["td"]) > 0  # critic rows in the batch
    # Every start group: paused segments carry the critic's V̂ into their return.
    paused_values = []
    for group in run.groups:
        returns = segment_returns(group["rewards"], group["values"], group["ended"])
        assert group["returns"] == returns
        assert group["advantages"] == mean_centered(returns)
        paused_values += [v for v, d in zip(group["values"], group["ended"], strict=True) if not d]
    assert paused_values and any(v > 0 for v in paused_values)  # bootstrapped, not 0
    assert 0 <= history["eval/won"][0] <= 1 and len(history["eval/won"]) == 2
