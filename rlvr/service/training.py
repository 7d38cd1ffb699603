"""`TrainingClient`: forward-backward with a named loss, Adam steps, weights for sampling,
and state to save and load, over one in-process Hugging Face policy.

A datum's log-probs come from rlvr's trainer forward (`rlvr.models.logprobs`: the
backbone, then the float32 LM head at temperature 1), the same computation the built-in
loop differentiates. Gradients accumulate over `forward_backward` calls until
`optim_step`, which applies them with AdamW and clears them.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from rlvr.models.hf_policy import lora_layers, save_kwargs
from rlvr.models.logprobs import head_logprobs, response_hidden
from rlvr.models.policy_options import LoraOptions
from rlvr.models.quiet import quiet_transformers
from rlvr.models.tokenizer import Tokenizer
from rlvr.rollout.base import RolloutEngine
from rlvr.rollout.hf_engine import HFEngine
from rlvr.service.datums import Batch, pack
from rlvr.service.losses import compute_loss, loss_spec, surrogate_params
from rlvr.service.sampling import SamplingClient
from rlvr.service.types import (
    AdamParams,
    APIFuture,
    CompletedClient,
    Datum,
    ForwardBackwardOutput,
    ModelInput,
    OptimStepResponse,
    SaveWeightsResponse,
    TensorData,
    from_sdk,
)
from rlvr.train.checkpoints.checkpoint import (
    load_policy_weights,
    load_trainer_state,
    save_checkpoint,
)

CustomLoss = Callable[[list[Datum], list[torch.Tensor]], tuple[torch.Tensor, dict[str, float]]]


class TrainingClient(CompletedClient):
    """One policy being trained (full fine-tune, or LoRA adapters only)."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Tokenizer,
        root: Path,
        seed: int = 0,
        engine: RolloutEngine | None = None,
        base_model: str | None = None,
        lora: LoraOptions | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.root = Path(root)
        self.seed = seed
        self.base_model, self.lora = base_model, lora  # saved with the state, to rebuild it
        self.step = 0  # optimizer steps taken
        self.version = 0  # bumped whenever the weights change (optim_step, load_state)
        self.trainable = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.trainable, lr=0.0, weight_decay=0.0)
        self.engine = engine or HFEngine(model, tokenizer)
        self._synced_version = 0  # the weights version a vLLM engine holds
        self._samplers = 0
        self._ttl_warned = False

    def get_tokenizer(self) -> Tokenizer:
        return self.tokenizer

    # The loss ------------------------------------------------------------------------

    def forward(
        self, datums: Sequence[Datum], loss_fn: str, loss_fn_config: dict | None = None
    ) -> APIFuture[ForwardBackwardOutput]:
        """The loss and log-probs of `datums`, with no gradient."""
        with torch.no_grad():
            return APIFuture(self._loss(datums, loss_fn, loss_fn_config, backward=False))

    def forward_backward(
        self, datums: Sequence[Datum], loss_fn: str, loss_fn_config: dict | None = None
    ) -> APIFuture[ForwardBackwardOutput]:
        """Add ∇(Σ loss over every position of every datum) to the gradients; no mean is
        taken (losses.py says how to get rlvr's aggregations)."""
        return APIFuture(self._loss(datums, loss_fn, loss_fn_config, backward=True))

    def forward_backward_custom(
        self, datums: Sequence[Datum], loss_fn: CustomLoss
    ) -> APIFuture[ForwardBackwardOutput]:
        """`loss_fn(datums, logprobs)` gets one (N_i,) tensor of log π(target_tokens) per
        datum, with gradient, and returns (loss, metrics); its gradient is accumulated."""
        batch = pack(datums, ("target_tokens",), self.tokenizer.vocab_size, "custom")
        logprobs = self._target_logprobs(batch)
        per_datum = [logprobs[b, : len(row)] for b, row in enumerate(batch.input_ids)]
        loss, metrics = loss_fn(list(datums), per_datum)
        if not (torch.is_tensor(loss) and loss.dim() == 0 and loss.requires_grad):
            raise ValueError(
                "forward_backward_custom: loss_fn must return (a scalar tensor that depends on "
                f"the log-probs, metrics dict), got {type(loss).__name__} {loss!r:.60}"
            )
        loss.backward()
        metrics = {"loss:sum": float(loss.detach()), **{k: float(v) for k, v in metrics.items()}}
        return APIFuture(ForwardBackwardOutput(_outputs(logprobs, batch), metrics))

    def _loss(self, datums, loss_fn, loss_fn_config, backward: bool) -> ForwardBackwardOutput:
        spec = loss_spec(loss_fn)
        params = surrogate_params(loss_fn, loss_fn_config)
        batch = pack(datums, spec.inputs, self.tokenizer.vocab_size, loss_fn)
        logprobs = self._target_logprobs(batch)
        loss, value = compute_loss(loss_fn, logprobs, batch, params)
        if backward:
            loss.backward()
        return ForwardBackwardOutput(_outputs(logprobs, batch), {"loss:sum": float(value)})

    def _target_logprobs(self, batch: Batch) -> torch.Tensor:
        """log π(target_tokens[i] | model_input[: i + 1]) (B, N), 0 on padding.

        rlvr's forward scores a response after a prompt: here the prompt is the first
        input token and the response the rest, whose hidden state at position i has seen
        exactly model_input[: i + 1] (the one filler token at the end is never attended)."""
        pad = self.tokenizer.pad_token_id
        batch_size, width = batch.mask.shape
        prompts = [row[:1] for row in batch.input_ids]
        response = torch.full((batch_size, width), pad, dtype=torch.long)
        for b, row in enumerate(batch.input_ids):
            response[b, : len(row) - 1] = torch.tensor(row[1:], dtype=torch.long)
            response[b, len(row) - 1] = batch.target_tokens[b, len(row) - 1]
        hidden = response_hidden(self.model, prompts, response, batch.mask, pad)  # (B, N, H)
        targets = batch.target_tokens.to(hidden.device)
        (logprobs,) = head_logprobs(self.model, hidden, targets, 1.0, fp32_head=True)
        valid = batch.mask.to(logprobs.device) > 0
        return torch.where(valid, logprobs, torch.zeros_like(logprobs))

    def compute_logprobs(self, prompt: ModelInput) -> list[float | None]:
        """log π(token_i | tokens_<i) of each token of `prompt`; None for the first."""
        tokens = prompt.to_ints()
        if len(tokens) < 2:
            return [None] * len(tokens)
        datum = Datum(ModelInput.from_ints(tokens[:-1]), {"target_tokens": tokens[1:]})
        batch = pack([datum], ("target_tokens",), self.tokenizer.vocab_size, "compute_logprobs")
        with torch.no_grad():
            logprobs = self._target_logprobs(batch)[0].tolist()
        return [None, *logprobs]

    # The optimizer -------------------------------------------------------------------

    def optim_step(self, adam_params: AdamParams) -> APIFuture[OptimStepResponse]:
        """One AdamW step with the accumulated gradients, which are then cleared."""
        adam_params = from_sdk(AdamParams, adam_params, "optim_step")
        for group in self.optimizer.param_groups:
            group.update(
                lr=adam_params.learning_rate,
                betas=(adam_params.beta1, adam_params.beta2),
                eps=adam_params.eps,
                weight_decay=adam_params.weight_decay,
            )
        limit = adam_params.grad_clip_norm or float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(self.trainable, limit)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.version += 1
        return APIFuture(
            OptimStepResponse({"optim/grad_norm": float(grad_norm), "optim/step": self.step})
        )

    # Weights for sampling, and state ---------------------------------------------------

    def save_weights_and_get_sampling_client(
        self,
        name: str | None = None,
        *,
        record_stability_info: bool = False,
        kind: str = "snapshot",
    ) -> SamplingClient:
        """A sampling client of the current weights (shared, not copied: it goes stale at
        the next optim_step or load_state; sampling.py). The SDK's `record_stability_info`
        serves its `stable_reinforce` loss, which is not here, so only False is valid; its
        `kind="inflight"` (weights that follow training) is refused too."""
        if record_stability_info:
            raise ValueError(
                "save_weights_and_get_sampling_client(record_stability_info=True) serves "
                "loss_fn='stable_reinforce', which rlvr.service does not have; pass False "
                "(and train with importance_sampling, ppo, cispo or gspo)"
            )
        if kind != "snapshot":
            raise ValueError(
                f"save_weights_and_get_sampling_client(kind={kind!r}) cannot take effect: a "
                "local sampler holds the weights of the step it was made at; use 'snapshot'"
            )
        version, label = self.version, name or f"step-{self.step}"
        self._samplers += 1
        if hasattr(self.engine, "sync_weights") and self._synced_version != version:
            self.engine.sync_weights()  # vLLM holds its own copy: push the current weights
            self._synced_version = version

        def staleness() -> str | None:
            if self.version == version:
                return None
            return (
                f"SamplingClient {label!r} holds the weights of optimizer step {version} "
                f"but the TrainingClient has moved on to step {self.step}; get a fresh one "
                "with training_client.save_weights_and_get_sampling_client() after each step"
            )

        seed = self.seed + 7919 * self._samplers  # each sampler its own random stream
        return SamplingClient(self.engine, self.compute_logprobs, seed, staleness)

    def save_weights_for_sampler(
        self, name: str, ttl_seconds: int | None = None
    ) -> APIFuture[SaveWeightsResponse]:
        """The current weights (LoRA merged) as a Hugging Face directory root/name,
        loadable by `ServiceClient.create_sampling_client(path)` or `from_pretrained`."""
        self._check_ttl(ttl_seconds)
        path = self._path(name)
        with quiet_transformers():
            self.model.save_pretrained(path, **save_kwargs(self.model))
        self.tokenizer.save(path)
        return APIFuture(SaveWeightsResponse(str(path)))

    def save_state(
        self, name: str, ttl_seconds: int | None = None, overwrite: bool = False
    ) -> APIFuture[SaveWeightsResponse]:
        """Weights (LoRA: the adapter too), optimizer state, step, sampler count, base model
        and LoRA shape in root/name, written as rlvr's own checkpoints are
        (`rlvr.train.checkpoints.checkpoint`). `overwrite=False` refuses an existing directory."""
        self._check_ttl(ttl_seconds)
        path = self._path(name)
        if not overwrite and path.exists():
            raise ValueError(f"save_state: {str(path)!r} exists; pass overwrite=True to replace it")
        # The sampler count seeds the next sampler: saved, so a resumed script samples
        # what the uninterrupted one would have.
        state = {
            "step": self.step,
            "optimizer": self.optimizer.state_dict(),
            "samplers": self._samplers,
            "base_model": self.base_model,
            "lora": None if self.lora is None else (self.lora.rank, self.lora.alpha),
        }
        path = save_checkpoint(path, self.model, self.tokenizer, state)
        return APIFuture(SaveWeightsResponse(str(path)))

    def load_state(self, path: str | Path) -> APIFuture[None]:
        """Continue from `save_state`'s directory with its weights, step and sampler count
        but a fresh optimizer (Adam's moments reset), as the remote API's `load_state`."""
        return APIFuture(self._load(path, optimizer=False))

    def load_state_with_optimizer(self, path: str | Path) -> APIFuture[None]:
        """Continue exactly from `save_state`'s directory: `load_state` plus the optimizer."""
        return APIFuture(self._load(path, optimizer=True))

    def _load(self, path: str | Path, optimizer: bool) -> None:
        state = read_state(path)
        load_policy_weights(self.model, Path(path))
        if optimizer:
            self.optimizer.load_state_dict(state["optimizer"])
        else:
            self.optimizer = torch.optim.AdamW(self.trainable, lr=0.0, weight_decay=0.0)
        self.step = int(state["step"])
        self._samplers = int(state.get("samplers", self._samplers))
        self.version += 1

    def _check_ttl(self, ttl_seconds: int | None) -> None:
        if ttl_seconds is not None and not self._ttl_warned:
            self._ttl_warned = True
            warnings.warn(
                f"ttl_seconds={ttl_seconds!r} cannot take effect: the local service writes "
                "directories that stay until you delete them",
                stacklevel=3,
            )

    def _path(self, name: str) -> Path:
        if not isinstance(name, str) or not name or name.startswith("."):
            raise ValueError(f"name={name!r} must be a non-empty directory name or path")
        return Path(name) if Path(name).is_absolute() else self.root / name

    @property
    def is_lora(self) -> bool:
        return bool(lora_layers(self.model))

    # The remote API's asynchronous spellings ---------------------------------------------

    async def forward_async(self, *args: Any, **kwargs: Any) -> APIFuture[ForwardBackwardOutput]:
        return self.forward(*args, **kwargs)

    async def forward_backward_async(self, *args: Any, **kwargs: Any) -> APIFuture:
        return self.forward_backward(*args, **kwargs)

    async def forward_backward_custom_async(self, *args: Any, **kwargs: Any) -> APIFuture:
        return self.forward_backward_custom(*args, **kwargs)

    async def optim_step_async(self, adam_params: AdamParams) -> APIFuture[OptimStepResponse]:
        return self.optim_step(adam_params)

    async def save_weights_and_get_sampling_client_async(self, *args: Any, **kwargs: Any):
        return self.save_weights_and_get_sampling_client(*args, **kwargs)

    async def save_state_async(self, *args: Any, **kwargs: Any) -> APIFuture[SaveWeightsResponse]:
        return self.save_state(*args, **kwargs)

    async def load_state_async(self, path: str | Path) -> APIFuture[None]:
        return self.load_state(path)

    async def load_state_with_optimizer_async(self, path: str | Path) -> APIFuture[None]:
        return self.load_state_with_optimizer(path)

    async def save_weights_for_sampler_async(self, *args: Any, **kwargs: Any) -> APIFuture:
        return self.save_weights_for_sampler(*args, **kwargs)


def read_state(path: str | Path) -> dict[str, Any]:
    """The trainer state `save_state` wrote in `path`, or a one-line error."""
    if not (Path(path) / "trainer_state.pt").is_file():
        raise ValueError(
            f"load_state path={str(path)!r} is not a directory written by save_state "
            "(it has no trainer_state.pt)"
        )
    return load_trainer_state(Path(path))


def _outputs(logprobs: torch.Tensor, batch: Batch) -> list[dict[str, TensorData]]:
    """Each datum's log-probs, unpadded, detached, float32."""
    rows = logprobs.detach().float().cpu()
    return [
        {"logprobs": TensorData(rows[b, : len(ids)].clone())}
        for b, ids in enumerate(batch.input_ids)
    ]
