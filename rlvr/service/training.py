"""`TrainingClient`: forward-backward with a named loss, Adam steps, weights for sampling,
and state to save and load, over one in-process Hugging Face policy.

A datum's log-probs come from rlvr's trainer forward (`rlvr.models.logprobs`: the
backbone, then the float32 LM head at temperature 1), the same computation the built-in
loop differentiates. Gradients accumulate over `forward_backward` calls until
`optim_step`, which applies them with AdamW and clears them.

Every call that reads or changes the weights holds the client's lock (shared with the
samplers made from it), so calls from several threads run one at a time instead of
corrupting each other (security audit F14). Saves go through saves.py (inside the root,
atomic, never over what is not a save) and are named in the root's registry.py.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from rlvr.models.context import context_length
from rlvr.models.hf_policy import lora_layers, save_kwargs
from rlvr.models.logprobs import head_logprobs, response_hidden
from rlvr.models.quiet import quiet_transformers
from rlvr.models.tokenizer import Tokenizer
from rlvr.rollout.base import RolloutEngine
from rlvr.rollout.hf_engine import HFEngine
from rlvr.service.datums import IGNORE_TARGET, Batch, pack, pack_rows
from rlvr.service.images import image_spec, model_prompt
from rlvr.service.lora import LoraShape
from rlvr.service.losses import (
    compute_loss,
    loss_metrics,
    loss_spec,
    surrogate_params,
    token_count,
)
from rlvr.service.progress import long_call
from rlvr.service.registry import CheckpointRegistry, state_path
from rlvr.service.sampling import SamplingClient
from rlvr.service.saves import save_path, write_save
from rlvr.service.snapshots import WeightsSnapshot, snapshot_weights
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
from rlvr.train.allocation import SlicedAdamW
from rlvr.train.checkpoints.checkpoint import (
    load_policy_weights,
    load_trainer_state,
    save_checkpoint,
)
from rlvr.vision import ImagePrompt

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
        lora: LoraShape | None = None,
        absolute_saves: bool = True,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.root = Path(root)
        self.seed = seed
        self.base_model, self.lora = base_model, lora  # saved with the state, to rebuild it
        self.absolute_saves = absolute_saves
        self.step = 0  # optimizer steps taken
        self.version = 0  # bumped whenever the weights change (optim_step, load_state)
        self.trainable = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = SlicedAdamW(self.trainable, lr=0.0, weight_decay=0.0)
        self.engine = engine or HFEngine(model, tokenizer)
        self.lock = threading.RLock()
        # Token ids must index the model's embedding, which a reloaded tokenizer can
        # outgrow (transformers 5 adds <|endoftext|>: len 321 on a 320-row model).
        self.vocab_size = min(tokenizer.vocab_size, model.get_input_embeddings().num_embeddings)
        self.context = context_length(model)
        self.images = image_spec(model, tokenizer)  # None: a text model, which refuses pictures
        self._synced_version = 0  # the weights version a vLLM engine holds
        self._snapshot: WeightsSnapshot | None = None  # of the current version, shared
        self._samplers = 0
        self._ttl_warned = False

    def get_tokenizer(self) -> Tokenizer:
        return self.tokenizer

    # The loss ------------------------------------------------------------------------

    def forward(
        self, datums: Sequence[Datum], loss_fn: str, loss_fn_config: dict | None = None
    ) -> APIFuture[ForwardBackwardOutput]:
        """The loss and log-probs of `datums`, with no gradient."""
        with self.lock, torch.no_grad():
            return APIFuture(self._loss(datums, loss_fn, loss_fn_config, backward=False))

    def forward_backward(
        self, datums: Sequence[Datum], loss_fn: str, loss_fn_config: dict | None = None
    ) -> APIFuture[ForwardBackwardOutput]:
        """Add ∇(Σ loss over every position of every datum) to the gradients; no mean is
        taken (losses.py says how to get rlvr's aggregations)."""
        with self.lock:
            return APIFuture(self._loss(datums, loss_fn, loss_fn_config, backward=True))

    def forward_backward_custom(
        self, datums: Sequence[Datum], loss_fn: CustomLoss
    ) -> APIFuture[ForwardBackwardOutput]:
        """`loss_fn(datums, logprobs)` gets one (N_i,) tensor of log π(target_tokens) per
        datum, with gradient, and returns (loss, metrics); its gradient is accumulated."""
        with self.lock:
            batch = self._pack(datums, ("target_tokens",), "custom")
            with _timed("forward_backward_custom", batch):
                logprobs = self._target_logprobs(batch)
                per_datum = [logprobs[b, : len(row)] for b, row in enumerate(batch.input_ids)]
                loss, metrics = loss_fn(list(datums), per_datum)
                if not (torch.is_tensor(loss) and loss.dim() == 0 and loss.requires_grad):
                    raise ValueError(
                        "forward_backward_custom: loss_fn must return (a scalar tensor that "
                        f"depends on the log-probs, metrics dict), got {type(loss).__name__} "
                        f"{loss!r:.60}"
                    )
                loss.backward()
            count = int(batch.active.sum())
            metrics = {
                **loss_metrics(float(loss.detach()), count),
                **{k: float(v) for k, v in metrics.items()},
            }
            return APIFuture(ForwardBackwardOutput(_outputs(logprobs, batch), metrics))

    def _loss(self, datums, loss_fn, loss_fn_config, backward: bool) -> ForwardBackwardOutput:
        spec = loss_spec(loss_fn)
        params = surrogate_params(loss_fn, loss_fn_config)
        batch = self._pack(datums, spec.inputs, loss_fn)
        with _timed("forward_backward" if backward else "forward", batch):
            logprobs = self._target_logprobs(batch)
            loss, value = compute_loss(loss_fn, logprobs, batch, params)
            if backward:
                loss.backward()
        metrics = loss_metrics(float(value), token_count(loss_fn, batch))
        return ForwardBackwardOutput(_outputs(logprobs, batch), metrics)

    def _pack(self, datums: Sequence[Datum], inputs: Sequence[str], loss_fn: str) -> Batch:
        name = self.base_model or type(self.model).__name__
        return pack(datums, inputs, self.vocab_size, loss_fn, self.context, self.images, name)

    def _target_logprobs(self, batch: Batch) -> torch.Tensor:
        """log π(target_tokens[i] | model_input[: i + 1]) (B, N), 0 on padding.

        rlvr's forward scores a response after a prompt: here the prompt is the first
        input token and the response the rest, whose hidden state at position i has seen
        exactly model_input[: i + 1] (the one filler token at the end is never attended).
        A row's pictures ride on its one-token prompt: the backbone fills the row's
        placeholders, wherever they stand, with them in order (rlvr.vision)."""
        pad = self.tokenizer.pad_token_id
        batch_size, width = batch.mask.shape
        prompts = [_first_token(row) for row in batch.input_ids]
        response = torch.full((batch_size, width), pad, dtype=torch.long)
        for b, row in enumerate(batch.input_ids):
            response[b, : len(row) - 1] = torch.tensor(row[1:], dtype=torch.long)
            response[b, len(row) - 1] = batch.target_tokens[b, len(row) - 1]
        hidden = response_hidden(self.model, prompts, response, batch.mask, pad)  # (B, N, H)
        targets = batch.target_tokens.to(hidden.device)
        (logprobs,) = head_logprobs(self.model, hidden, targets, 1.0, fp32_head=True)
        valid = batch.active.to(logprobs.device) > 0
        return torch.where(valid, logprobs, torch.zeros_like(logprobs))

    def compute_logprobs(self, prompt: ModelInput) -> list[float | None]:
        """log π(token_i | tokens_<i) of each token of `prompt`; None for the first and for
        an image's tokens (pictures are context, not tokens the model predicts)."""
        name = self.base_model or type(self.model).__name__
        ids = model_prompt(prompt, self.vocab_size, self.images, name, "prompt")
        if len(ids) < 2:
            return [None] * len(ids)
        image_id = self.images.image_token_id if self.images else None
        targets = [IGNORE_TARGET if t == image_id else t for t in ids[1:]]
        inputs = _head(ids, len(ids) - 1)  # position i predicts ids[i + 1]
        if ids[-1] == image_id:  # an image ends the prompt: keep all its tokens
            inputs, targets = ids, [*targets, IGNORE_TARGET]
        if self.context is not None and len(inputs) > self.context:
            raise ValueError(
                f"prompt has {len(ids)} tokens, more than the model's context of "
                f"{self.context} positions"
            )
        with self.lock, torch.no_grad():
            batch = pack_rows([inputs], {"target_tokens": [torch.tensor(targets)]})
            logprobs = self._target_logprobs(batch)[0].tolist()
        scored = zip(targets[: len(ids) - 1], logprobs, strict=False)
        return [None, *(None if t == IGNORE_TARGET else v for t, v in scored)]

    # The optimizer -------------------------------------------------------------------

    def optim_step(self, adam_params: AdamParams) -> APIFuture[OptimStepResponse]:
        """One AdamW step with the accumulated gradients, which are then cleared."""
        adam_params = from_sdk(AdamParams, adam_params, "optim_step")
        with self.lock:
            return APIFuture(OptimStepResponse(self._optim_step(adam_params)))

    def _optim_step(self, adam_params: AdamParams) -> dict[str, float]:
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
        return {"optim/grad_norm": float(grad_norm), "optim/step": self.step}

    # Weights for sampling, and state ---------------------------------------------------

    def save_weights_and_get_sampling_client(
        self,
        name: str | None = None,
        *,
        record_stability_info: bool = False,
        kind: str = "snapshot",
    ) -> SamplingClient:
        """A sampling client of the current weights, which it keeps after later steps
        (snapshots.py; in memory, nothing written). The SDK's `record_stability_info`
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
        with self.lock:
            version, step, label = self.version, self.step, name or f"step-{self.step}"
            self._samplers += 1
            swappable = isinstance(self.engine, HFEngine)  # it reads the module's weights
            if not swappable and self._synced_version != version:
                self.engine.sync_weights()  # vLLM holds its own copy: push the current weights
                self._synced_version = version
            if self._snapshot is None or self._snapshot.version != version:
                self._snapshot = WeightsSnapshot(self.model, version)
            seed = self.seed + 7919 * self._samplers  # each sampler its own random stream

        def stale() -> str:
            return (
                f"SamplingClient {label!r} holds the weights of optimizer step {step} but the "
                f"TrainingClient has moved on to step {self.step}, and its vLLM engine cannot "
                "take them back; get a fresh one with "
                "training_client.save_weights_and_get_sampling_client() after each step"
            )

        weights = snapshot_weights(
            self.lock, self.model, self._snapshot, lambda: self.version, stale, swappable
        )
        return SamplingClient(self.engine, self.compute_logprobs, seed, weights, self.vocab_size)

    def save_weights_for_sampler(
        self, name: str, ttl_seconds: int | None = None, overwrite: bool = False
    ) -> APIFuture[SaveWeightsResponse]:
        """The current weights (LoRA merged) as a Hugging Face directory root/name/sampler,
        loadable by `ServiceClient.create_sampling_client(path or uri)` or
        `from_pretrained`. `overwrite=False` refuses an existing save of that name."""
        self._check_ttl(ttl_seconds)

        def write(directory: Path) -> None:
            with quiet_transformers():
                self.model.save_pretrained(directory, **save_kwargs(self.model))
            self.tokenizer.save(directory)

        with self.lock:
            return APIFuture(self._save(name, "sampler", write, overwrite))

    def save_state(
        self, name: str, ttl_seconds: int | None = None, overwrite: bool = False
    ) -> APIFuture[SaveWeightsResponse]:
        """Weights (LoRA: the adapter too), optimizer state, step, sampler count, base model
        and LoRA shape in root/name/state, written as rlvr's own checkpoints are
        (`rlvr.train.checkpoints.checkpoint`). `overwrite=False` refuses an existing save."""
        self._check_ttl(ttl_seconds)
        with self.lock:
            # The sampler count seeds the next sampler: saved, so a resumed script samples
            # what the uninterrupted one would have.
            state = {
                "step": self.step,
                "optimizer": self.optimizer.state_dict(),
                "samplers": self._samplers,
                "base_model": self.base_model,
                "lora": None if self.lora is None else self.lora.record(),
            }

            def write(directory: Path) -> None:
                save_checkpoint(directory / "checkpoint", self.model, self.tokenizer, state)
                for item in (directory / "checkpoint").iterdir():  # one directory, no nesting
                    item.rename(directory / item.name)
                (directory / "checkpoint").rmdir()

            return APIFuture(self._save(name, "state", write, overwrite))

    def _save(self, name: str, kind: str, write, overwrite: bool) -> SaveWeightsResponse:
        what = "save_state" if kind == "state" else "save_weights_for_sampler"
        parameters = sum(p.numel() for p in self.model.parameters())
        with long_call(what, parameters, f"{name}, {parameters:,} parameters"):
            path = write_save(
                save_path(self.root, name, self.absolute_saves) / kind, kind, write, overwrite, what
            )
        uri = ""
        if path.resolve().is_relative_to(self.root.resolve()):
            lora = None if self.lora is None else self.lora.record()
            uri = CheckpointRegistry(self.root).register(path, kind, self.base_model, lora)
        return SaveWeightsResponse(str(path), uri)

    def load_state(self, path: str | Path) -> APIFuture[None]:
        """Continue from `save_state`'s directory (or its registry URI) with its weights,
        step and sampler count but a fresh optimizer (Adam's moments reset), as the remote
        API's `load_state`."""
        return APIFuture(self._load(path, optimizer=False))

    def load_state_with_optimizer(self, path: str | Path) -> APIFuture[None]:
        """Continue exactly from `save_state`'s directory: `load_state` plus the optimizer."""
        return APIFuture(self._load(path, optimizer=True))

    def _load(self, path: str | Path, optimizer: bool) -> None:
        path = state_path(self.root, path)
        state = read_state(path)
        parameters = sum(p.numel() for p in self.model.parameters())
        what = "load_state_with_optimizer" if optimizer else "load_state"
        with self.lock, long_call(what, parameters, f"{path}, {parameters:,} parameters"):
            load_policy_weights(self.model, Path(path))
            if optimizer:
                self.optimizer.load_state_dict(state["optimizer"])
            else:
                self.optimizer = SlicedAdamW(self.trainable, lr=0.0, weight_decay=0.0)
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


def _timed(kind: str, batch: Batch):
    """The long-call progress of a forward (or forward-backward) over `batch`'s tokens."""
    tokens = sum(len(row) for row in batch.input_ids)
    datums = len(batch.input_ids)
    return long_call(kind, tokens, f"{datums} datum{'s' * (datums != 1)}, {tokens:,} tokens")


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


def _head(ids: list[int], n: int) -> list[int]:
    """`ids[:n]`, keeping an `ImagePrompt`'s pictures (no image may end past n)."""
    if isinstance(ids, ImagePrompt):
        return ImagePrompt(ids[:n], ids.pixel_values, ids.spans, ids.image_grid_thw)
    return ids[:n]


def _first_token(row: list[int]) -> list[int]:
    """The one-token prompt of a packed row, carrying the row's pictures if it has any."""
    if isinstance(row, ImagePrompt):
        return ImagePrompt(row[:1], row.pixel_values, row.spans, row.image_grid_thw)
    return row[:1]
