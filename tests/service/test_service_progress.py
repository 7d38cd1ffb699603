"""The service's long calls show progress (issue 42): a sample, forward_backward, save or
load that lasts past `AFTER_S` says its elapsed time, an ETA from the same call's earlier
rate and a closing line; a short call says nothing (the lines themselves, by a fake clock,
are in tests/test_agent_builder_progress.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hf_testlib import build_tiny_hf_model

from rlvr.service import Datum, ModelInput, SamplingParams, ServiceClient
from rlvr.service import progress as service_progress


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_hf_model(tmp_path_factory.mktemp("tiny") / "model")


def _calls(trainer) -> None:
    datum = Datum(
        ModelInput.from_ints([5, 6, 7]), {"target_tokens": [6, 7, 8], "weights": [1.0, 1.0, 1.0]}
    )
    trainer.forward_backward([datum, datum], "cross_entropy").result()
    sampler = trainer.save_weights_and_get_sampling_client()
    sampler.sample(ModelInput.from_ints([5, 6]), 4, SamplingParams(max_tokens=3, seed=0)).result()
    trainer.save_state("s1").result()


def test_short_calls_print_nothing(tiny, tmp_path, capsys):
    trainer = ServiceClient(root=tmp_path).create_training_client(str(tiny))
    capsys.readouterr()
    _calls(trainer)  # each well under AFTER_S = 10 s
    assert "rlvr service" not in capsys.readouterr().err


def test_long_calls_say_what_they_were_and_how_long_they_took(tiny, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(service_progress, "AFTER_S", 0.0)  # every call counts as long
    monkeypatch.setattr(service_progress, "RATES", {})
    trainer = ServiceClient(root=tmp_path).create_training_client(str(tiny))
    parameters = sum(p.numel() for p in trainer.model.parameters())
    capsys.readouterr()
    _calls(trainer)
    closing = [
        line.rsplit(": done in ", 1)[0]
        for line in capsys.readouterr().err.splitlines()
        if ": done in " in line
    ]
    assert closing == [
        "rlvr service forward_backward (2 datums, 6 tokens)",  # 2 × 3 input tokens
        "rlvr service sample (4 × up to 3 tokens)",
        f"rlvr service save_state (s1, {parameters:,} parameters)",
    ]
    # the rates the next call of each kind takes its ETA from
    assert set(service_progress.RATES) == {"forward_backward", "sample", "save_state"}
