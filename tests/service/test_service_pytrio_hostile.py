"""Hostile requests to the local PyTRIO server (issue 41 for the PyTRIO front), sent as raw
HTTP, past every check the SDK would make: each gets a clean 4xx `{code, message}` (or a
failed event), the server goes on serving, and no file outside its root is touched.
"""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import msgpack
import pytest
from hf_testlib import build_tiny_hf_model

from rlvr.service.pytrio.http import Server
from rlvr.service.pytrio.runs import LocalTrio


def files(folder: Path) -> dict[str, float]:
    """Every path under `folder` but the server's root, with a file's mtime (a folder's
    changes when the root is made inside it)."""
    return {
        str(p): p.stat().st_mtime if p.is_file() else 0.0
        for p in folder.rglob("*")
        if "root" not in p.relative_to(folder).parts
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    work = tmp_path_factory.mktemp("hostile")
    model = build_tiny_hf_model(work / "tiny")
    lines: list[str] = []
    server = Server(LocalTrio(work / "root", {"tiny": str(model)}), log=lines.append)
    server.start()
    outside = files(work.parent)
    yield server, work
    server.stop()
    now = files(work.parent)
    assert now == outside, "a file outside the root changed"


def post_event(client, run_id: str, payload: dict, kind: str = "trainer.save_state", n: int = 1):
    envelope = {
        "version": 1,
        "event_id": f"event_{n:012d}",
        "type": kind,
        "payload": payload,
        "metadata": {
            "index": 1,
            "step": 0,
            "timestamp": 0,
            "sdk": "x",
            "sdk_version": "0",
            "run_id": run_id,
        },
    }
    headers = {"Content-Type": "application/msgpack"}
    client.post("actor/v1/events", content=msgpack.packb(envelope), headers=headers)
    got = client.get(f"actor/v1/events/event_{n:012d}", headers={"Prefer": "wait=20"})
    return msgpack.unpackb(got.content)


def test_hostile_requests_get_clean_errors_and_the_server_goes_on(server):
    server, _ = server
    client = httpx.Client(base_url=server.url + "/", timeout=60)
    expect = [
        (
            client.post(
                "actor/v1/events",
                content=b"\xc1\xc1",
                headers={"Content-Type": "application/msgpack"},
            ),
            400,
            "does not decode",
        ),
        (
            client.post(
                "actor/v1/events",
                content=msgpack.packb([[[]]] * 3),
                headers={"Content-Type": "application/msgpack"},
            ),
            400,
            "has no field 'event_id'",
        ),
        (
            client.post(
                "actor/v1/events",
                content=msgpack.packb({"event_id": "../x"}),
                headers={"Content-Type": "application/msgpack"},
            ),
            400,
            "does not match",
        ),
        (
            client.post("api/openapi/v1/service-sessions/s/training-runs", json=[1, 2]),
            400,
            "must be an object",
        ),
        (
            client.get(
                "api/openapi/v1/training-runs/by-checkpoint-uri",
                params={"checkpoint_uri": "rlvr://../../../etc/passwd"},
            ),
            400,
            "is not in",
        ),
        (client.post("actor/v1/sampling-runs/nope/sample", json={}), 404, "is unknown"),
        (
            client.post(
                "api/openai/v1/chat/completions", json={"model": "../../etc", "messages": []}
            ),
            404,
            "is not served here",
        ),
        (client.get("api/../../etc/passwd"), 404, "not served locally"),
    ]
    for response, status, message in expect:
        assert response.status_code == status, response.text
        assert message in response.json()["message"], response.json()
    session = client.post("api/openapi/v1/service-sessions", json={}).json()["service_session_cuid"]
    sampling = client.post(
        f"api/openapi/v1/service-sessions/{session}/sampling-runs",
        json={"base_model": "tiny", "source_checkpoint_uri": "/etc"},
    )
    assert sampling.status_code == 400 and "is not in" in sampling.json()["message"]
    run = client.post(
        f"api/openapi/v1/service-sessions/{session}/training-runs",
        json={"base_model": "tiny", "lora_rank": 4},
    ).json()["training_run_cuid"]
    init = {
        "base_model": "tiny",
        "lora_config": {"rank": 4, "train_attn": True, "train_mlp": True, "train_unembed": False},
    }
    assert post_event(client, run, init, "trainer.init_run", 1)["status"] == "succeeded"
    for n, name in enumerate(("../../escape", "/tmp/escape", "a/../../b", ".hidden"), start=2):
        failed = post_event(client, run, {"name": name, "overwrite": True}, n=n)
        assert failed["status"] == "failed" and "checkpoint name" in failed["error"]["message"]
    unknown = post_event(client, "nope", {"name": "x"}, n=9)
    assert (
        unknown["status"] == "failed"
        and "training run 'nope' is unknown" in unknown["error"]["message"]
    )
    sampler = client.post(
        f"api/openapi/v1/service-sessions/{session}/sampling-runs", json={"base_model": "tiny"}
    ).json()["sampling_run_cuid"]
    huge = client.post(
        f"actor/v1/sampling-runs/{sampler}/sample",
        json={
            "request_id": "r",
            "prompt": {"chunks": [{"tokens": [5]}]},
            "num_samples": 10**7,
            "sampling_params": {"max_tokens": 16},
        },
    )
    assert huge.status_code == 400 and "too much for one call" in huge.json()["message"]
    # a body far bigger than allowed is refused before it is read
    with socket.create_connection(("127.0.0.1", server.server_address[1])) as raw:
        raw.sendall(
            b"POST /actor/v1/events HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999999\r\n\r\n"
        )
        assert b" 400 " in raw.recv(4096).split(b"\r\n")[0] + b" "
    # still serving
    assert client.get("api/models").json()["items"][0]["alias"] == "tiny"
    saved = post_event(client, run, {"name": "fine"}, n=10)
    assert saved["status"] == "succeeded", saved
    assert saved["result"]["checkpoint"]["uri"].startswith("rlvr://")
