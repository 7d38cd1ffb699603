"""A `tinker`-shaped namespace over the local service, so a script written for the Tinker
SDK runs here with its own calls: `import rlvr.service.tinker_compat as tinker`, or leave
the script untouched and run it with `python -m rlvr.service.as_tinker script.py`, which
makes `tinker.ServiceClient` this module's for that run (and, where the SDK is not
installed, `import tinker` this module). docs/service.md lists what still differs.

The SDK's connection settings (`base_url`, `api_key`, `project_id`,
`default_headers_overrides`) cannot take effect on a service that is this process: they
are refused with a warning, not silently dropped.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from rlvr.service import client as _client
from rlvr.service.sampling import SamplingClient
from rlvr.service.tinker_compat import types
from rlvr.service.tinker_compat.types import (
    AdamParams,
    Datum,
    EncodedTextChunk,
    ForwardBackwardOutput,
    ImageChunk,
    ModelInput,
    ModelInputChunk,
    OptimStepResponse,
    SampledSequence,
    SampleResponse,
    SamplingParams,
    StopReason,
    TensorData,
)
from rlvr.service.training import TrainingClient
from rlvr.service.types import APIFuture

LOCAL_OPTIONS: dict[str, Any] = {}
"""Defaults for every `ServiceClient()` made through this namespace (rlvr.service's own
keyword arguments: root, seed, task_options, device, dtype, engine, engine_options);
`python -m rlvr.service.as_tinker --root DIR --seed N` sets them."""

REMOTE_ONLY = ("project_id", "base_url", "api_key", "default_headers_overrides")


class ServiceClient(_client.ServiceClient):
    """`tinker.ServiceClient(...)`: the local service, taking the SDK's arguments.
    `user_metadata` and `display_name` label a remote session; they are kept, unused."""

    def __init__(
        self,
        user_metadata: dict[str, str] | None = None,
        project_id: str | None = None,
        *,
        display_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs["project_id"] = project_id
        remote = {k: kwargs.pop(k) for k in REMOTE_ONLY if kwargs.get(k) is not None}
        for k in REMOTE_ONLY:
            kwargs.pop(k, None)
        if remote:
            warnings.warn(
                f"tinker.ServiceClient({', '.join(f'{k}=...' for k in remote)}) cannot take "
                "effect: this is rlvr's local service, running in this process",
                stacklevel=2,
            )
        self.user_metadata = dict(user_metadata or {})
        self.display_name = display_name
        super().__init__(**{**LOCAL_OPTIONS, **kwargs})

    def create_lora_training_client(
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
        user_metadata: dict[str, str] | None = None,
        optimizer: Any = None,
    ) -> TrainingClient:
        """The SDK's LoRA client (its default rank 32; α is rlvr's 32), which is its own
        completed future (`.result()` returns it). `seed` draws the adapters (None: the
        ServiceClient's); `train_attn`/`train_mlp` choose the layers (`train_unembed`
        cannot take effect locally and warns, rlvr/service/lora.py); an optimizer other
        than AdamW is refused."""
        if optimizer is not None and getattr(optimizer, "type", None) != "adamw":
            raise ValueError(
                f"create_lora_training_client(optimizer={optimizer!r:.60}): the local service "
                "trains with AdamW only; pass None or AdamOptimizerConfig()"
            )
        return super().create_lora_training_client(
            base_model,
            rank=rank,
            alpha=32.0,
            seed=seed,
            train_attn=train_attn,
            train_mlp=train_mlp,
            train_unembed=train_unembed,
        )

    def create_sampling_client(
        self,
        model_path: str | Path | None = None,
        base_model: str | None = None,
        retry_config: Any = None,
    ) -> SamplingClient:
        return super().create_sampling_client(model_path, base_model=base_model)

    async def create_lora_training_client_async(self, base_model: str, **kwargs: Any):
        return self.create_lora_training_client(base_model, **kwargs)


__all__ = [
    "LOCAL_OPTIONS",
    "APIFuture",
    "AdamParams",
    "Datum",
    "EncodedTextChunk",
    "ForwardBackwardOutput",
    "ImageChunk",
    "ModelInput",
    "ModelInputChunk",
    "OptimStepResponse",
    "SampleResponse",
    "SampledSequence",
    "SamplingClient",
    "SamplingParams",
    "ServiceClient",
    "StopReason",
    "TensorData",
    "TrainingClient",
    "types",
]
