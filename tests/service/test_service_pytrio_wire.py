"""The local PyTRIO server's responses, each validated by the SDK's own pydantic models, for
pytrio 0.2.8 (agentic-rl-lab's pin, in rlvr[test]) and 0.2.9 (the newest on the index,
installed by `make setup` into .venv/pytrio-0.2.9): an SDK upgrade that changes a model
the server answers fails here, by name. Each version runs tests/lab/pytrio_roundtrip.py
in its own Python, so the two never share a process.

The pure conversions of rlvr.service.pytrio.wire are checked by hand below.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hf_testlib import build_tiny_hf_model

from rlvr.service.pytrio import wire

REPO = Path(__file__).parents[2]
VERSIONS = {"0.2.8": None, "0.2.9": REPO / ".venv" / "pytrio-0.2.9"}
RESPONSES = {
    "APIKeyInfo",
    "SDKBootstrapResponse",
    "ModelListResponse",
    "ServiceSessionCreateResponse",
    "TrainingRunCreateResponse",
    "TrainingRunRenewResponse",
    "EventAcceptedResponse",
    "EventSucceededResponse",
    "EventFailedResponse",
    "TrainerForwardResult",
    "OptimStepResponse",
    "TrainerSaveResult",
    "TrainingRunFindByCheckpointURIResponse",
    "TrainingRunUpdateResponse",
    "SamplingRunCreateResponse",
    "ActorSampleResponse",
    "SamplingRunRenewResponse",
    "error {code, message}",
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_hf_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_every_response_passes_the_sdks_own_models(version, tiny, tmp_path):
    site = VERSIONS[version]
    if site is None:
        pytest.importorskip("pytrio", reason="needs pytrio 0.2.8 (pip install -e '.[test]')")
    elif not (site / "pytrio").is_dir():
        pytest.skip(f"pytrio {version} is not in {site}: run make setup")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(site or ""), str(REPO)) if p),
    }
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "tests" / "lab" / "pytrio_roundtrip.py"),
            str(tiny),
            str(tmp_path),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.split("\n")
    assert lines[0] == version  # the SDK that checked is the one asked for
    assert set(lines[1:]) - {""} == RESPONSES


def test_a_wire_tensor_is_little_endian_float32():
    # 1.0 is 0x3F800000 and -2.0 is 0xC0000000 in IEEE-754 single precision; raw_le
    # stores the low byte first.
    body = wire.tensor([1.0, -2.0])
    assert body["data"] == bytes([0, 0, 0x80, 0x3F, 0, 0, 0, 0xC0])
    assert (body["dtype"], body["shape"], body["encoding"]) == ("<f4", [2], "raw_le")
    assert np.frombuffer(body["data"], "<f4").tolist() == [1.0, -2.0]


def test_a_forward_payload_becomes_the_services_datums():
    datum = {
        "model_input": {"chunks": [{"type": "encoded_text", "tokens": [5, 6]}, {"tokens": [7]}]},
        "target_ids": [6, 7, -100],
    }
    payload = {"data": [datum], "loss": {"type": "cross_entropy"}}
    (got,), loss_fn, config = wire.forward_request(payload)
    assert (loss_fn, config) == ("cross_entropy", None)
    assert got.model_input.to_ints() == [5, 6, 7]
    # no weights on the wire: every position weighs 1, as the SDK's own default
    assert got.loss_fn_inputs == {"target_tokens": [6, 7, -100], "weights": [1.0, 1.0, 1.0]}
    policy = {**datum, "logprobs": [0.0, -1.0, 0.0], "advantages": [0.0, 2.0, 0.0]}
    (got,), _, config = wire.forward_request(
        {"data": [policy], "loss": {"type": "ppo", "config": {"clip_high_threshold": 1.28}}}
    )
    assert set(got.loss_fn_inputs) == {"target_tokens", "logprobs", "advantages"}
    assert config == {"clip_high_threshold": 1.28}


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"auto_shift": True, "loss": {"type": "ppo"}, "data": []}, "auto_shift=True cannot"),
        (
            {
                "loss": {"type": "cross_entropy"},
                "data": [
                    {
                        "model_input": {
                            "chunks": [{"type": "image", "data": b"x", "format": "gif"}]
                        },
                        "target_ids": [1],
                    }
                ],
            },
            "format='gif' must be png or jpeg",  # a text model's refusal: the service's
        ),
        (
            {
                "loss": {"type": "ppo"},
                "data": [{"model_input": {"chunks": [{"tokens": [1]}]}, "target_ids": [1]}],
            },
            "datum 0: loss 'ppo' needs logprobs",
        ),
        (
            {
                "loss": {"type": "ppo"},
                "data": [{"model_input": {"chunks": [{"tokens": [True]}]}, "target_ids": [1]}],
            },
            "token ids must be integers",
        ),
        ({"loss": "ppo", "data": []}, r"payload.loss=.* has the wrong type"),
    ],
)
def test_a_bad_forward_payload_is_one_line(payload, message):
    with pytest.raises(wire.WireError, match=message):
        wire.forward_request(payload)


@pytest.mark.parametrize("name", ["../x", "/etc/passwd", "a/b", ".hidden", "x" * 201, "ends-with."])
def test_a_checkpoint_name_must_be_the_sdks(name):
    with pytest.raises(wire.WireError, match="checkpoint name"):
        wire.save_request({"name": name})


def test_sample_params_map_stop_strings_and_ids_into_one_list():
    body = {
        "request_id": "r",
        "prompt": {"chunks": [{"tokens": [1, 2]}]},
        "sampling_params": {"max_tokens": 4, "stop": ["</s>"], "stop_token_ids": [9], "top_k": 20},
    }
    request = wire.sample_request(body)
    assert request.params.stop == ["</s>", 9] and request.params.top_k == 20
    with pytest.raises(wire.WireError, match=r"sampling_params\.logit_bias is not one of"):
        wire.sample_request({**body, "sampling_params": {"max_tokens": 1, "logit_bias": {}}})
