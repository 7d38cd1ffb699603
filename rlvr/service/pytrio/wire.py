"""The PyTRIO wire protocol (SDK `pytrio` 0.2.8/0.2.9) as pure conversions between its
JSON/msgpack bodies and rlvr.service's types; no I/O, no state.

Requests are checked here, whatever sent them: a body the SDK would never send (an
malformed image chunk, `auto_shift`, a bad name, a missing field, a wrong type) becomes a
`WireError` with a one-line message, which the server returns as the SDK's own error.
Image chunks pass to the service, which refuses them for a text model (images.py). Responses
are built to the SDK's pydantic models (`pytrio/protocol/**`), which
tests/service/test_service_pytrio_wire.py checks against both SDK versions.
/work/shared/reports/pytrio-protocol.md maps the protocol.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlvr.service.types import (
    AdamParams,
    Datum,
    EncodedTextChunk,
    ImageChunk,
    ModelInput,
    SamplingParams,
)

EVENT_TYPES = (
    "trainer.init_run",
    "trainer.forward",
    "trainer.forward_backward",
    "trainer.optimize_step",
    "trainer.save_state",
    "trainer.save_weights",
    "trainer.end_run",
)
EVENT_ID = re.compile(r"^event_[0-9a-hjkmnp-tv-z]{12}$")
CHECKPOINT_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9_-])?$")
MAX_NAME = 200
POLICY_LOSSES = ("importance_sampling", "ppo", "cispo", "dro")
SAMPLING_FIELDS = ("max_tokens", "temperature", "top_k", "top_p", "seed", "stop", "stop_token_ids")
NO_LIMITS = {"max_batch_size": None, "max_tokens_per_request": None, "max_seq_len": None}
FAR_FUTURE = "2099-01-01T00:00:00Z"  # the local JWT never needs renewing
EPOCH = "2025-01-01T00:00:00Z"


class WireError(ValueError):
    """A request the local server refuses: `code` for the SDK, `str()` for the user."""

    def __init__(self, message: str, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.code = code


def field(body: Any, name: str, kind: type | tuple[type, ...], what: str) -> Any:
    """`body[name]`, which must be of `kind` (a bool is never an int)."""
    if not isinstance(body, dict) or name not in body:
        raise WireError(f"{what} has no field {name!r}")
    value = body[name]
    bad_bool = isinstance(value, bool) and bool not in (
        kind if isinstance(kind, tuple) else (kind,)
    )
    if bad_bool or not isinstance(value, kind):
        raise WireError(f"{what}.{name}={value!r:.60} has the wrong type")
    return value


# Events ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Envelope:
    event_id: str
    type: str
    run_id: str
    payload: dict


def envelope(body: Any) -> Envelope:
    """The event envelope of a POST v1/events body (decoded msgpack)."""
    event_id = field(body, "event_id", str, "event")
    if not EVENT_ID.match(event_id):
        raise WireError(f"event_id={event_id!r:.40} does not match {EVENT_ID.pattern}")
    kind = field(body, "type", str, "event")
    if kind not in EVENT_TYPES:
        raise WireError(f"event type {kind!r:.40} is not one of: {', '.join(EVENT_TYPES)}")
    run_id = field(field(body, "metadata", dict, "event"), "run_id", str, "event.metadata")
    return Envelope(event_id, kind, run_id, field(body, "payload", dict, "event"))


def event_response(
    env: Envelope, status: str, result: dict | None = None, error: tuple[str, str] | None = None
) -> dict:
    """An event status body: accepted | running | succeeded (with `result`) | failed."""
    body: dict[str, Any] = {"version": 1, "event_id": env.event_id, "type": env.type}
    body["status"] = status
    if status in ("succeeded", "failed"):
        body["usage"] = {"input_tokens": 0, "output_tokens": 0, "train_tokens": 0}
    if status == "succeeded":
        body["result"] = result or {}
    if status == "failed":
        body["error"] = {"code": error[0], "message": error[1]}
    return body


def model_input(body: Any, what: str) -> ModelInput:
    """A wire ModelInput (`{chunks: [{type, tokens} | {type: "image", data, format,
    expected_tokens}]}`) as the service's; an image's data is base64 text (JSON) or bytes
    (MessagePack). Whether the model can read images is the service's to say."""
    chunks: list[Any] = []
    for chunk in field(body, "chunks", list, what):
        kind = chunk.get("type", "encoded_text") if isinstance(chunk, dict) else None
        if kind == "image":
            chunks.append(image_chunk(chunk, f"{what}.chunk"))
            continue
        ids = field(chunk, "tokens", list, f"{what}.chunk")
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise WireError(f"{what}: token ids must be integers")
        chunks.append(EncodedTextChunk(ids))
    if not any(isinstance(c, ImageChunk) or c.tokens for c in chunks):
        raise WireError(f"{what} is empty")
    return ModelInput(chunks=chunks)


def image_chunk(chunk: dict, what: str) -> ImageChunk:
    """The SDK's WireImageChunk: `data` standard base64 (or bytes), `format` png or jpeg."""
    data = chunk.get("data")
    if isinstance(data, str):
        try:
            data = base64.b64decode(data, validate=True)
        except binascii.Error:
            raise WireError(f"{what}: image data must be standard base64") from None
    if not isinstance(data, bytes) or not data:
        raise WireError(f"{what}: image data must be the picture's bytes, got {data!r:.40}")
    fmt = field(chunk, "format", str, what)
    if fmt not in ("png", "jpeg"):
        raise WireError(f"{what}.format={fmt!r:.40} must be png or jpeg")
    expected = chunk.get("expected_tokens")
    if expected is not None and (not isinstance(expected, int) or isinstance(expected, bool)):
        raise WireError(f"{what}.expected_tokens={expected!r:.40} must be an integer or null")
    return ImageChunk(bytes(data), fmt, expected)


def forward_request(payload: dict) -> tuple[list[Datum], str, dict | None]:
    """(datums, loss name, loss config) of a trainer.forward(_backward) payload."""
    if payload.get("auto_shift"):
        raise WireError(
            "auto_shift=True cannot take effect locally; shift the targets yourself "
            "(position i of model_input predicts target_tokens[i])",
            "unsupported",
        )
    loss = field(payload, "loss", dict, "payload")
    loss_fn = field(loss, "type", str, "payload.loss")
    config = loss.get("config") or None
    if config is not None and not isinstance(config, dict):
        raise WireError("payload.loss.config must be an object")
    names = ("logprobs", "advantages") if loss_fn in POLICY_LOSSES else ("weights",)
    datums = []
    for i, item in enumerate(field(payload, "data", list, "payload")):
        what = f"datum {i}"
        given = model_input(field(item, "model_input", dict, what), f"{what}.model_input")
        inputs: dict[str, Any] = {"target_tokens": field(item, "target_ids", list, what)}
        for name in names:
            value = item.get(name)
            if value is None and name == "weights":  # one per position, as the targets
                value = [1.0] * len(inputs["target_tokens"])
            if not isinstance(value, list):
                raise WireError(f"{what}: loss {loss_fn!r} needs {name}, a list of numbers")
            inputs[name] = value
        datums.append(Datum(given, inputs))
    if not datums:
        raise WireError("payload.data is empty")
    return datums, loss_fn, config


def tensor(values: Any) -> dict:
    """A wire tensor of float32 values: `<f4`, raw little-endian bytes."""
    array = np.ascontiguousarray(np.asarray(values, dtype="<f4")).reshape(-1)
    return {"dtype": "<f4", "shape": [len(array)], "encoding": "raw_le", "data": array.tobytes()}


def forward_result(logprobs: list[Any], metrics: dict[str, float]) -> dict:
    """TrainerForwardResult: each datum's log-probs and exactly loss_sum, loss_mean,
    token_count (the SDK forbids any other metric)."""
    loss_sum, count = float(metrics["loss_sum"]), int(metrics["token_count"])
    if not math.isfinite(loss_sum):
        raise WireError(f"the loss is {loss_sum}: not a finite number", "numerical")
    mean = loss_sum / count if count else 0.0
    return {
        "loss_fn_outputs": [{"logprobs": tensor(row)} for row in logprobs],
        "metrics": {"loss_sum": loss_sum, "loss_mean": mean, "token_count": count},
    }


def adam_params(payload: dict) -> AdamParams:
    params = field(payload, "adam_params", dict, "payload")
    names = ("learning_rate", "beta1", "beta2", "eps", "weight_decay", "grad_clip_norm")
    unknown = sorted(set(params) - set(names))
    if unknown:
        raise WireError(f"adam_params field {unknown[0]!r} is not one of: {', '.join(names)}")
    return AdamParams(**params)


def save_request(payload: dict) -> tuple[str, bool, bool]:
    """(name, overwrite, temporary) of a trainer.save_* payload."""
    name = field(payload, "name", str, "payload")
    if len(name) > MAX_NAME or not CHECKPOINT_NAME.match(name):
        raise WireError(f"checkpoint name {name!r:.60} must match {CHECKPOINT_NAME.pattern}")
    visibility = payload.get("visibility", "WORKSPACE")
    if visibility not in ("WORKSPACE", "TEMPORARY"):
        raise WireError(f"visibility={visibility!r:.40} must be WORKSPACE or TEMPORARY")
    return name, bool(payload.get("overwrite", False)), visibility == "TEMPORARY"


def saved(uri: str, model_id: str, size: int) -> dict:
    return {"checkpoint": {"uri": uri, "model_id": model_id, "size_bytes": int(size)}}


# Sampling --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SampleRequest:
    request_id: str
    prompt: ModelInput
    num_samples: int
    params: SamplingParams
    return_text: bool
    return_logprobs: bool
    prompt_logprobs: bool


def sample_request(body: Any) -> SampleRequest:
    """A POST v1/sampling-runs/{id}/sample body (JSON)."""
    request_id = field(body, "request_id", str, "sample request")
    prompt = model_input(field(body, "prompt", dict, "sample"), "prompt")
    params = dict(field(body, "sampling_params", dict, "sample request"))
    unknown = sorted(set(params) - set(SAMPLING_FIELDS))
    if unknown:
        raise WireError(f"sampling_params.{unknown[0]} is not one of: {', '.join(SAMPLING_FIELDS)}")
    stop = [*(params.pop("stop", None) or []), *(params.pop("stop_token_ids", None) or [])]
    if body.get("topk_prompt_logprobs", 0):
        raise WireError("topk_prompt_logprobs cannot take effect locally; use 0", "unsupported")
    return SampleRequest(
        request_id=request_id,
        prompt=prompt,
        num_samples=body.get("num_samples", 1),
        params=SamplingParams(
            **{k: v for k, v in params.items() if v is not None}, stop=stop or None
        ),
        return_text=bool(body.get("return_text", True)),
        return_logprobs=bool(body.get("return_token_logprobs", True)),
        prompt_logprobs=bool(body.get("return_prompt_logprobs", False)),
    )


def sample_response(
    request: SampleRequest, run_id: str, sequences: list[Any], prompt_logprobs: list | None
) -> dict:
    """ActorSampleResponse of rlvr's `SampledSequence`s."""
    return {
        "request_id": request.request_id,
        "sampling_run": run_id,
        "sequences": [
            {
                "tokens": list(s.tokens),
                "text": s.text if request.return_text else None,
                "logprobs": list(s.logprobs) if request.return_logprobs else [],
                "stop_reason": s.stop_reason,
            }
            for s in sequences
        ],
        "prompt_logprobs": prompt_logprobs,
        "topk_prompt_logprobs": None,
        "usage": {
            "input_tokens": request.prompt.length,
            "output_tokens": sum(len(s.tokens) for s in sequences),
        },
    }


# Control ---------------------------------------------------------------------------------


def actor(endpoint: str, run_id: str) -> dict:
    """`actor` and `actor_jwt` of a run: this server's actor, a token that never expires."""
    return {
        "actor": {
            "actor_cuid": "local-actor",
            "endpoint": endpoint,
            "connect_mode": "direct",
            "tls_enabled": False,
        },
        "actor_jwt": {"token": f"local-{run_id}", "expires_at": FAR_FUTURE},
    }


def run_ids(run_id: str, session_id: str) -> dict:
    return {"service_session_cuid": session_id, "workspace_cuid": "local", "status": "ACTIVE"}


def training_run(run_id: str, session_id: str, index: int, alias: str, model_id: str) -> dict:
    return {
        "training_run_cuid": run_id,
        **run_ids(run_id, session_id),
        "run_index": index,
        "model_spec_cuid": alias,
        "model_alias": alias,
        "model_id": model_id,
        "trainer": NO_LIMITS,
        "created_at": EPOCH,
    }


def sampling_run(run_id: str, session_id: str, index: int, alias: str, model_id: str) -> dict:
    return {
        "sampling_run_cuid": run_id,
        **run_ids(run_id, session_id),
        "run_index": index,
        "model_spec_cuid": alias,
        "model_alias": alias,
        "model_id": model_id,
        "sampler": NO_LIMITS,
        "created_at": EPOCH,
    }


def model_list(models: dict[str, str], contexts: dict[str, int | None]) -> dict:
    """ModelListResponse of alias → local directory (the SDK loads its tokenizer by it)."""
    items = [
        {
            "cuid": alias,
            "alias": alias,
            "model_id": model_id,
            "context_length": contexts.get(alias),
            "train_available": True,
            "sample_available": True,
            "trainer": NO_LIMITS,
            "sampler": NO_LIMITS,
            "created_at": EPOCH,
            "updated_at": EPOCH,
        }
        for alias, model_id in models.items()
    ]
    return {"items": items, "total": len(items), "limit": max(len(items), 1), "offset": 0}


def checkpoint_run(model_id: str, lora: dict) -> dict:
    """TrainingRunFindByCheckpointURIResponse of a saved state's LoRA shape."""
    return {
        "base_model": model_id,
        "lora_rank": int(lora["rank"]),
        "seed": lora.get("seed"),
        "train_mlp": bool(lora.get("train_mlp", True)),
        "train_attn": bool(lora.get("train_attn", True)),
        "train_unembed": bool(lora.get("train_unembed", True)),
    }


def api_key_info() -> dict:
    return {
        "api_key_tid": "local",
        "api_key_name": "rlvr local server",
        "user_cuid": "local",
        "username": "local",
        "display_name": None,
        "workspace_cuid": "local",
        "workspace_name": "local",
        "workspace_type": "PERSONAL",
        "expires_at": None,
    }


def bootstrap(sdk_version: str) -> dict:
    return {"compatibility": {"status": "compatible", "sdk_version": sdk_version}, "notices": []}


def session(session_id: str) -> dict:
    return {**run_ids(session_id, session_id), "created_at": EPOCH}


def error(code: str, message: str) -> dict:
    """A Control or Actor error body (HTTP 4xx), read by the SDK as {code, message}."""
    return {"code": code, "message": message}
