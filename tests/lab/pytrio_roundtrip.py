"""Every kind of response the local PyTRIO server sends, validated by the installed SDK's own
pydantic models (run as `python pytrio_roundtrip.py MODEL_DIR ROOT`, once per SDK
version: test_service_pytrio_wire.py). Requests are raw HTTP, as the SDK sends them, so
the bodies checked are exactly the server's; prints the SDK version and the names of
the models each body passed, one per line, and exits non-zero on the first that fails.
"""

from __future__ import annotations

import sys

import httpx
import msgpack
from pytrio._version import __version__ as VERSION
from pytrio.protocol.actor.events.event import (
    EventAcceptedResponse,
    EventFailedResponse,
    EventSucceededResponse,
    parse_event_response,
)
from pytrio.protocol.actor.events.trainer.forward import TrainerForwardResult
from pytrio.protocol.actor.events.trainer.save import TrainerSaveResult
from pytrio.protocol.actor.sampling_run.sample import ActorSampleResponse
from pytrio.protocol.control.api_key.verify import APIKeyInfo
from pytrio.protocol.control.model.list import ModelListResponse
from pytrio.protocol.control.platform.bootstrap import SDKBootstrapResponse
from pytrio.protocol.control.sampling_run.create import SamplingRunCreateResponse
from pytrio.protocol.control.sampling_run.renew import SamplingRunRenewResponse
from pytrio.protocol.control.service_session.create import ServiceSessionCreateResponse
from pytrio.protocol.control.training_run.create import TrainingRunCreateResponse
from pytrio.protocol.control.training_run.find_by_checkpoint_uri import (
    TrainingRunFindByCheckpointURIResponse,
)
from pytrio.protocol.control.training_run.renew import TrainingRunRenewResponse
from pytrio.protocol.control.training_run.update import TrainingRunUpdateResponse
from pytrio.types.optim_step.optim_step_response import OptimStepResponse

from rlvr.service.pytrio.http import Server
from rlvr.service.pytrio.runs import LocalTrio

ALIAS = "tiny"
SEEN: list[str] = []


def check(model, body):
    model.model_validate(body)
    SEEN.append(model.__name__)
    return body


def event(client, run_id: str, index: int, kind: str, payload: dict) -> dict:
    event_id = f"event_{index:012d}"
    envelope = {
        "version": 1,
        "event_id": event_id,
        "type": kind,
        "metadata": {
            "index": index,
            "step": 0,
            "timestamp": 0,
            "sdk": "pytrio",
            "sdk_version": VERSION,
            "run_id": run_id,
        },
        "payload": payload,
    }
    headers = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}
    posted = client.post("actor/v1/events", content=msgpack.packb(envelope), headers=headers)
    check(EventAcceptedResponse, msgpack.unpackb(posted.content))
    again = client.post("actor/v1/events", content=msgpack.packb(envelope), headers=headers)
    assert again.status_code == 409 and msgpack.unpackb(again.content)["code"] == "event_exists"
    got = client.get(f"actor/v1/events/{event_id}", headers={"Prefer": "wait=20"})
    body = msgpack.unpackb(got.content)
    parsed = parse_event_response(body)
    SEEN.append(type(parsed).__name__)
    return body


def main(model_dir: str, root: str) -> None:
    server = Server(LocalTrio(root, {ALIAS: model_dir}), log=lambda line: None)
    server.start()
    client = httpx.Client(base_url=server.url + "/", timeout=60)
    try:
        run(client)
    finally:
        server.stop()
    print(VERSION)
    print("\n".join(SEEN))


def run(client: httpx.Client) -> None:
    check(APIKeyInfo, client.get("api/openapi/v1/api-key/verify").json())
    check(SDKBootstrapResponse, client.get("api/sdk/bootstrap?sdk_version=0").json())
    check(ModelListResponse, client.get("api/models?limit=100&offset=0").json())
    session = check(
        ServiceSessionCreateResponse,
        client.post("api/openapi/v1/service-sessions", json={"sdk_version": "0"}).json(),
    )["service_session_cuid"]
    lora = {"lora_rank": 4, "train_mlp": True, "train_attn": True, "train_unembed": False}
    run = check(
        TrainingRunCreateResponse,
        client.post(
            f"api/openapi/v1/service-sessions/{session}/training-runs",
            json={"base_model": ALIAS, **lora, "seed": 3},
        ).json(),
    )
    run_id, model_id = run["training_run_cuid"], run["model_id"]
    check(
        TrainingRunRenewResponse, client.post(f"api/openapi/v1/training-runs/{run_id}/renew").json()
    )
    init = {
        "base_model": model_id,
        "lora_config": {
            "rank": 4,
            "seed": 3,
            "train_mlp": True,
            "train_attn": True,
            "train_unembed": False,
        },
    }
    check(EventSucceededResponse, event(client, run_id, 1, "trainer.init_run", init))
    datum = {
        "model_input": {"chunks": [{"type": "encoded_text", "tokens": [5, 6, 7]}]},
        "target_ids": [6, 7, -100],
        "logprobs": [0.0, -1.0, 0.0],
        "advantages": [0.0, 1.0, 0.0],
    }
    totals = {"total_samples": 1, "total_active_tokens": 2, "total_advantage_tokens": 1}
    for index, kind in ((2, "trainer.forward"), (3, "trainer.forward_backward")):
        payload = {
            "data": [datum],
            "loss": {"type": "ppo", "config": {}},
            "gradient_accumulation": totals,
        }
        body = check(EventSucceededResponse, event(client, run_id, index, kind, payload))
        check(TrainerForwardResult, body["result"])
    adam = {
        "learning_rate": 1e-3,
        "beta1": 0.9,
        "beta2": 0.95,
        "eps": 1e-12,
        "weight_decay": 0.0,
        "grad_clip_norm": 0.0,
    }
    body = event(client, run_id, 4, "trainer.optimize_step", {"adam_params": adam})
    check(OptimStepResponse, body["result"])
    saves = {}
    for index, kind, visibility in (
        (5, "trainer.save_state", "WORKSPACE"),
        (6, "trainer.save_weights", "WORKSPACE"),
        (7, "trainer.save_weights", "TEMPORARY"),
    ):
        payload = {"name": f"ck-{index}", "overwrite": False, "visibility": visibility}
        body = check(EventSucceededResponse, event(client, run_id, index, kind, payload))
        saves[index] = check(TrainerSaveResult, body["result"])["checkpoint"]["uri"]
    dro = {"data": [datum], "loss": {"type": "dro", "config": {}}, "gradient_accumulation": totals}
    failed = check(EventFailedResponse, event(client, run_id, 8, "trainer.forward_backward", dro))
    assert "dro" in failed["error"]["message"], failed
    check(
        TrainingRunFindByCheckpointURIResponse,
        client.get(
            "api/openapi/v1/training-runs/by-checkpoint-uri", params={"checkpoint_uri": saves[5]}
        ).json(),
    )
    restored = check(
        TrainingRunCreateResponse,
        client.post(
            f"api/openapi/v1/service-sessions/{session}/training-runs",
            json={"base_model": "", **lora, "source_checkpoint_uri": saves[5]},
        ).json(),
    )
    check(
        TrainingRunUpdateResponse,
        client.patch(
            f"api/openapi/v1/service-sessions/{session}/training-runs/"
            f"{restored['training_run_cuid']}",
            json={"source_checkpoint_uri": saves[5], "restore_optimizer": True},
        ).json(),
    )
    for uri in ("", saves[6], saves[7]):
        sampling = check(
            SamplingRunCreateResponse,
            client.post(
                f"api/openapi/v1/service-sessions/{session}/sampling-runs",
                json={"base_model": ALIAS, "source_checkpoint_uri": uri},
            ).json(),
        )["sampling_run_cuid"]
        request = {
            "request_id": "req_1",
            "prompt": {"chunks": [{"type": "encoded_text", "tokens": [5, 6, 7]}]},
            "sampling_params": {"max_tokens": 3, "seed": 1, "top_k": 5, "stop_token_ids": [9]},
            "num_samples": 2,
            "return_prompt_logprobs": True,
        }
        sampled = client.post(f"actor/v1/sampling-runs/{sampling}/sample", json=request).json()
        check(ActorSampleResponse, sampled)
        assert len(sampled["sequences"]) == 2 and sampled["prompt_logprobs"][0] is None
    check(
        SamplingRunRenewResponse,
        client.post(f"api/openapi/v1/sampling-runs/{sampling}/renew").json(),
    )
    assert isinstance(client.post("actor/v1/client/heartbeat", json={}).json(), dict)
    unknown = client.post(
        f"api/openapi/v1/service-sessions/{session}/training-runs",
        json={"base_model": "nope", **lora},
    )
    assert unknown.status_code == 404 and "served: tiny" in unknown.json()["message"]
    SEEN.append("error {code, message}")
    assert (
        client.post(
            f"api/openapi/v1/service-sessions/{session}/close", json={"status": "ENDED"}
        ).status_code
        == 200
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
