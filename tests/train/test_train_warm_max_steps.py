"""warm_max_steps bounds the embedded warm start (a matched control's equal supervised
budget), reaches warm_start, and is refused where it cannot take effect."""

from __future__ import annotations

import pytest

from rlvr.train import loop
from rlvr.train.config import resolve_config


def test_warm_max_steps_reaches_the_warm_start(monkeypatch, tmp_path):
    seen = {}

    def fake_load_policy(model, task, options, seed, **warm):
        seen.update(warm)
        raise RuntimeError("stop here")

    monkeypatch.setattr(loop, "load_policy", fake_load_policy)
    cfg = resolve_config({"warm_max_steps": 200, "out": str(tmp_path / "r"), "progress": False})
    with pytest.raises(RuntimeError, match="stop here"):
        loop.Trainer(cfg)
    assert seen == {"target_accuracy": 0.3, "max_steps": 200, "progress": False}


def test_warm_max_steps_is_checked():
    with pytest.raises(ValueError, match="warm_max_steps must be an integer ≥ 1, got 0"):
        resolve_config({"warm_max_steps": 0})
    with pytest.raises(ValueError, match="warm_max_steps=200 only applies to model='embedded'"):
        resolve_config({"warm_max_steps": 200, "model": "some/model"})
