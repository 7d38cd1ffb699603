"""A local training service with the shape of the remote training APIs (Tinker / PyTRIO):
sample, compute_logprobs, forward_backward with a named loss, optim_step, and weights for
the sampler, over rlvr's own forward, losses and engine (docs/service.md).

    service = ServiceClient()
    trainer = service.create_lora_training_client("embedded:arithmetic", rank=8)
    sampler = trainer.save_weights_and_get_sampling_client("step-0")
    ...
    trainer.forward_backward(datums, "importance_sampling").result()
    trainer.optim_step(AdamParams(learning_rate=1e-4)).result()
"""

from rlvr.service.client import ServiceClient, load_base_model, tokens_of
from rlvr.service.episodes import EpisodeResponse, SampledEpisode, episode_datum
from rlvr.service.losses import API_LOSSES
from rlvr.service.sampling import SamplingClient, StaleWeightsError
from rlvr.service.training import TrainingClient
from rlvr.service.types import (
    AdamParams,
    APIFuture,
    Datum,
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

__all__ = [
    "API_LOSSES",
    "APIFuture",
    "AdamParams",
    "Datum",
    "EpisodeResponse",
    "ForwardBackwardOutput",
    "ImageChunk",
    "ModelInput",
    "OptimStepResponse",
    "SampleResponse",
    "SampledEpisode",
    "SampledSequence",
    "SamplingClient",
    "SamplingParams",
    "SaveWeightsResponse",
    "ServiceClient",
    "StaleWeightsError",
    "TensorData",
    "TrainingClient",
    "episode_datum",
    "load_base_model",
    "tokens_of",
]
