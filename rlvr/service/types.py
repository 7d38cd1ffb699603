"""The data types of the local training service, shaped like the remote training APIs'
(Tinker / PyTRIO): a `Datum` is one sequence with everything its loss needs; results come
back as futures with `.result()`.

Locally every call runs to completion before it returns, so a future is a completed
value; `*_async` methods exist so a script written for the remote API runs unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Generic, Self, TypeVar

import numpy as np
import torch

T = TypeVar("T")


class APIFuture(Generic[T]):
    """A result that is already there: `.result()` and `await .result_async()` return it."""

    def __init__(self, value: T) -> None:
        self._value = value

    def result(self, timeout: float | None = None) -> T:
        return self._value

    async def result_async(self, timeout: float | None = None) -> T:
        return self._value

    def __await__(self) -> Generator[Any, None, T]:
        return self.result_async().__await__()


class CompletedClient:
    """A client that is also its own completed future: the Tinker SDK's `create_*` calls
    return a future of the client (`.result()` or `await` it), and for a while also
    accepted the future as the client; here the client is made before the call returns,
    so both spellings hold."""

    def result(self, timeout: float | None = None) -> Self:
        return self

    async def result_async(self, timeout: float | None = None) -> Self:
        return self

    def __await__(self) -> Generator[Any, None, Self]:
        return self.result_async().__await__()


@dataclass(frozen=True)
class EncodedTextChunk:
    """A run of token ids inside a `ModelInput` (the remote API's only text chunk)."""

    tokens: Sequence[int]
    type: str = "encoded_text"

    @property
    def length(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class ImageChunk:
    """A PNG or JPEG picture inside a `ModelInput` (the remote APIs' `ImageChunk`): it
    fills `expected_tokens` positions of the sequence, which the service checks against
    the vision-language model's tokens per image (service/images.py)."""

    data: bytes
    format: str
    expected_tokens: int | None = None
    type: str = "image"

    @property
    def length(self) -> int:
        if self.expected_tokens is None:
            raise ValueError("an ImageChunk without expected_tokens has no known length")
        return self.expected_tokens


@dataclass(frozen=True, init=False)
class ModelInput:
    """A token sequence given to the model: `ModelInput.from_ints(ids)`, or the remote
    API's `ModelInput(chunks=[EncodedTextChunk(tokens=ids), ImageChunk(...), ...])`.
    Text chunks are flattened into `tokens`; each image is kept in `images` as
    (the index in `tokens` it comes before, its chunk), for the service to turn into the
    model's image tokens (service/images.py)."""

    tokens: tuple[int, ...]
    images: tuple[tuple[int, Any], ...]

    def __init__(self, tokens: Sequence[int] = (), chunks: Sequence[Any] | None = None) -> None:
        images: list[tuple[int, Any]] = []
        if chunks is not None:
            tokens = []
            for chunk in chunks:
                if is_image_chunk(chunk):
                    images.append((len(tokens), chunk))
                else:
                    tokens += _chunk_tokens(chunk)
        object.__setattr__(self, "tokens", tuple(token_id(t, i) for i, t in enumerate(tokens)))
        object.__setattr__(self, "images", tuple(images))

    @classmethod
    def from_ints(cls, tokens: Sequence[int]) -> ModelInput:
        return cls(tokens)

    @classmethod
    def empty(cls) -> ModelInput:
        return cls(())

    def to_ints(self) -> list[int]:
        if self.images:
            raise ValueError(
                f"this ModelInput holds {len(self.images)} image chunk(s), which are not "
                "token ids; the service turns them into the model's image tokens"
            )
        return list(self.tokens)

    @property
    def chunks(self) -> list[Any]:
        """Text and image chunks in order (consecutive text as one chunk)."""
        out: list[Any] = []
        start = 0
        for at, image in (*self.images, (len(self.tokens), None)):
            if at > start:
                out.append(EncodedTextChunk(self.tokens[start:at]))
            if image is not None:
                out.append(image)
            start = at
        return out

    def append(self, chunk: Any) -> ModelInput:
        """This input followed by `chunk` (an `EncodedTextChunk` or an `ImageChunk`)."""
        return ModelInput(chunks=[*self.chunks, chunk])

    def append_int(self, token: int) -> ModelInput:
        return ModelInput(chunks=[*self.chunks, EncodedTextChunk((int(token),))])

    @property
    def length(self) -> int:
        """Positions: the text tokens and each image's `expected_tokens`."""
        return len(self.tokens) + sum(image.length for _, image in self.images)


def is_image_chunk(chunk: Any) -> bool:
    """An image chunk of rlvr's, PyTRIO's or Tinker's types (`type == "image"`)."""
    return getattr(chunk, "type", None) == "image"


def token_id(value: Any, index: int) -> int:
    """`value` as a token id: an integer (Python or numpy), never a bool, float or string,
    which `int()` would silently turn into some other token (security audit F19)."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise ValueError(
            f"ModelInput token {index} is {value!r:.40} ({type(value).__name__}); "
            "token ids must be integers"
        )
    return int(value)


def _chunk_tokens(chunk: Any) -> Sequence[int]:
    """A text chunk's token ids (image chunks are kept apart, `ModelInput.images`)."""
    if getattr(chunk, "type", "encoded_text") != "encoded_text" or not hasattr(chunk, "tokens"):
        raise ValueError(
            f"ModelInput chunk {type(chunk).__name__} (type={getattr(chunk, 'type', None)!r}) is "
            "not supported locally; only EncodedTextChunk(tokens=[...]) and ImageChunk are"
        )
    return chunk.tokens


class TensorData:
    """A 1-D array of a `Datum`'s `loss_fn_inputs` (lists and tensors are accepted too)."""

    def __init__(self, data: torch.Tensor) -> None:
        self.data = data

    @classmethod
    def from_torch(cls, tensor: torch.Tensor) -> TensorData:
        return cls(tensor.detach().cpu())

    @classmethod
    def from_numpy(cls, array: np.ndarray) -> TensorData:
        return cls(torch.from_numpy(np.asarray(array)))

    def to_torch(self) -> torch.Tensor:
        return self.data

    def to_numpy(self) -> np.ndarray:
        return self.data.numpy()

    def tolist(self) -> list:
        return self.data.tolist()


@dataclass
class Datum:
    """One training sequence: position i of `model_input` predicts entry i of every
    `loss_fn_inputs` array (`target_tokens[i]` is the token that follows position i)."""

    model_input: ModelInput
    loss_fn_inputs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AdamParams:
    """One Adam(W) step's hyper-parameters (torch.optim.AdamW)."""

    learning_rate: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-12
    weight_decay: float = 0.0
    """Decoupled weight decay (AdamW); 0: plain Adam."""
    grad_clip_norm: float = 0.0
    """Clip the gradient's global norm to this before the step; 0: no clipping."""

    def __post_init__(self) -> None:
        checks = {
            "learning_rate": 0 <= self.learning_rate <= 1,
            "beta1": 0 <= self.beta1 < 1,
            "beta2": 0 <= self.beta2 < 1,
            "eps": self.eps > 0,
            "weight_decay": self.weight_decay >= 0,
            "grad_clip_norm": self.grad_clip_norm >= 0,
        }
        valid = {
            "learning_rate": "in [0, 1] (an Adam step moves each weight by about the rate)",
            "beta1": "in [0, 1)",
            "beta2": "in [0, 1)",
            "eps": "> 0",
            "weight_decay": ">= 0",
            "grad_clip_norm": ">= 0 (0: no clipping)",
        }
        for name, ok in checks.items():
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and ok):
                raise ValueError(
                    f"AdamParams.{name}={value!r} is not valid; it must be {valid[name]}"
                )


@dataclass(frozen=True)
class SamplingParams:
    """How `SamplingClient.sample` draws: the remote API's fields, rlvr's engine semantics."""

    max_tokens: int = 16
    """Tokens to generate at most per sequence (EOS included)."""
    temperature: float = 1.0
    """0: greedy (the most probable token, log-prob 0: the distribution drawn from)."""
    top_p: float = 1.0
    stop: str | Sequence[int] | Sequence[str] | None = None
    """Token ids or strings that end a sequence (besides EOS); the stop token is kept."""
    seed: int | None = None
    """Seeds this call's sampling; None: the sampling client's own generator."""
    top_k: int = -1
    """Sample from the k most probable tokens only (renormalised; the log-probs are of that
    distribution, as with top_p); -1: no limit. The HF engine only (vLLM: -1)."""

    def __post_init__(self) -> None:
        top_k = self.top_k
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not (top_k == -1 or top_k >= 1):
            raise ValueError(
                f"SamplingParams.top_k={top_k!r} is not valid; it must be -1 (no limit) or an "
                "integer >= 1"
            )
        if self.stop is not None and not isinstance(self.stop, str) and len(self.stop) == 0:
            raise ValueError(
                "SamplingParams.stop=[] (no stop at all, not even EOS, in the Tinker SDK) cannot "
                "take effect: rlvr's engines always end a sequence at EOS; use stop=None"
            )


@dataclass
class SampledSequence:
    """One sampled continuation: its tokens and their log-probs under the distribution
    drawn from (softmax(logits / temperature), cut to the top-p nucleus)."""

    tokens: list[int]
    logprobs: list[float]
    stop_reason: str
    """'stop' (EOS or a stop sequence ended it) or 'length' (max_tokens)."""
    sequence_id: str = ""
    """Distinct per sequence within a ServiceClient's session (the Tinker SDK's field)."""
    text: str = ""
    """The tokens decoded, special tokens left out (PyTRIO's field)."""


@dataclass
class SampleResponse:
    sequences: list[SampledSequence]


@dataclass
class ForwardBackwardOutput:
    """`loss_fn_outputs[i]['logprobs']`: log π(target_tokens) of datum i, one per
    position (float32, no gradient; 0 where the target is -100). `metrics`: `loss:sum`
    (the Tinker SDK's name) and `loss_sum` (PyTRIO's), the summed loss; `token_count`, the
    positions it sums over (losses.py, `token_count`); `loss_mean` = loss_sum / token_count
    (0 when no position counts)."""

    loss_fn_outputs: list[dict[str, TensorData]]
    metrics: dict[str, float]


@dataclass
class OptimStepResponse:
    metrics: dict[str, float]


@dataclass
class SaveWeightsResponse:
    """`path`: the directory written; `uri`: its name in the root's checkpoint registry
    (registry.py), which a later process resolves; empty for a path outside the root."""

    path: str
    uri: str = ""


def from_sdk(cls: type[T], value: Any, what: str = "this call") -> T:
    """`value` as rlvr's `cls` (AdamParams, SamplingParams): itself, or the `tinker` SDK's
    object of the same name, a pydantic model whose fields are rebuilt as `cls`'s so that
    every check runs. A field `cls` lacks, set to other than its default, is refused."""
    if isinstance(value, cls):
        return value
    if type(value).__name__ != cls.__name__ or not hasattr(value, "model_dump"):
        raise ValueError(f"{what} needs {cls.__name__}(...), got {value!r:.80}")
    ours = {f.name for f in fields(cls)}
    given = value.model_dump()
    defaults = {k: f.default for k, f in type(value).model_fields.items()}
    extra = {k: v for k, v in given.items() if k not in ours and v != defaults.get(k)}
    if extra:
        raise ValueError(
            f"{what}: {cls.__name__} field(s) {extra} cannot take effect in rlvr.service; "
            f"its fields are {', '.join(sorted(ours))}"
        )
    return cls(**{k: v for k, v in given.items() if k in ours})
