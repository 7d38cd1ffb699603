"""`tinker.types` over the local service: the same names, rlvr.service's classes.

Aliased as `tinker.types` and `tinker.types.tensor_data` by `rlvr.service.as_tinker`.
"""

from __future__ import annotations

from rlvr.service.types import (
    AdamParams,
    Datum,
    EncodedTextChunk,
    ForwardBackwardOutput,
    ImageChunk,
    ModelInput,
    OptimStepResponse,
    SampledSequence,
    SampleResponse,
    SamplingParams,
    SaveWeightsResponse,
    TensorData,
)

LossFnType = str
"""A loss name: cross_entropy, importance_sampling, ppo, cispo, gspo, an rlvr surrogate."""
ModelInputChunk = EncodedTextChunk | ImageChunk  # images: a vision-language model only
SaveWeightsForSamplerResponse = SaveWeightsResponse
StopReason = str

__all__ = [
    "AdamParams",
    "Datum",
    "EncodedTextChunk",
    "ForwardBackwardOutput",
    "ImageChunk",
    "LossFnType",
    "ModelInput",
    "ModelInputChunk",
    "OptimStepResponse",
    "SampleResponse",
    "SampledSequence",
    "SamplingParams",
    "SaveWeightsForSamplerResponse",
    "SaveWeightsResponse",
    "StopReason",
    "TensorData",
]
