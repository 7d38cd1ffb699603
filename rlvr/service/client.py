"""`ServiceClient`: makes training and sampling clients over a local policy.

`base_model` is `"embedded:<task>"` (rlvr's tiny model, warm-started on that task and
cached under ~/.cache/rlvr; `"embedded"` alone means arithmetic) or a local Hugging Face
model directory. Nothing leaves the machine: "the service" is this process.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import torch

from rlvr.models.hf_policy import prepare_policy
from rlvr.models.load import EMBEDDED, load_pretrained
from rlvr.models.modes import dropout_off
from rlvr.models.policy_options import PolicyOptions
from rlvr.models.tokenizer import Tokenizer
from rlvr.parts import ENGINES, make_engine
from rlvr.rollout.base import RolloutEngine
from rlvr.service.lora import LoraShape
from rlvr.service.registry import CheckpointRegistry, is_uri, state_path
from rlvr.service.sampling import SamplingClient
from rlvr.service.snapshots import locked
from rlvr.service.training import TrainingClient, read_state
from rlvr.service.types import ModelInput
from rlvr.tasks.registry import TASKS
from rlvr.warmstart.load import load_policy

DEFAULT_TASK = "arithmetic"
# transformers' from_pretrained builds on the meta device and is not safe to run from two
# threads at once ("Cannot copy out of meta tensor"): clients are made one at a time.
LOADING = threading.Lock()


class ServiceClient:
    """Local stand-in for the remote service client.

    `task_options` and `seed` pick the embedded warm start (the same cache key as
    `rlvr train` with those options and `warm_seed`) and seed the LoRA adapters and the
    samplers; `root` is where `save_state` and `save_weights_for_sampler` write (and
    its `checkpoints.json` names each save by a URI, registry.py); `absolute_saves`: an
    absolute save name is written where it says (False: refused, names stay under the
    root); `device` and `dtype` place the policy.
    `engine` samples: "hf" (in-process) or "vllm" (rlvr's vLLM engine, rlvr[gpu]; its
    `engine_options` are `vllm.LLM`'s, or `backend_factory` as in `rlvr train`)."""

    def __init__(
        self,
        root: str | Path = "rlvr-service",
        seed: int = 0,
        task_options: dict[str, Any] | None = None,
        device: str = "cpu",
        dtype: str = "float32",
        engine: str = "hf",
        engine_options: dict[str, Any] | None = None,
        absolute_saves: bool = True,
    ) -> None:
        if engine not in ENGINES:
            raise ValueError(f"engine={engine!r} is not valid; choose one of: {', '.join(ENGINES)}")
        if engine == "hf" and engine_options:
            raise ValueError(
                f"engine_options {sorted(engine_options)} apply to engine='vllm', not 'hf'"
            )
        self.root = Path(root)
        self.seed = seed
        self.task_options = dict(task_options or {})
        self.device, self.dtype = device, dtype
        self.engine, self.engine_options = engine, dict(engine_options or {})
        self.absolute_saves = absolute_saves

    def create_lora_training_client(
        self,
        base_model: str,
        rank: int = 16,
        alpha: float = 32.0,
        seed: int | None = None,
        train_attn: bool = True,
        train_mlp: bool = True,
        train_unembed: bool = True,
    ) -> TrainingClient:
        """A client that trains LoRA adapters (W + (α/r)·B·A) only; the base stays frozen.
        The adapters' initialisation follows `seed` (None: the ServiceClient's);
        `train_attn`/`train_mlp` choose the layers adapted (lora.py; `train_unembed`
        cannot take effect and warns)."""
        seed = self.seed if seed is None else seed
        shape = LoraShape(rank, alpha, seed, train_attn, train_mlp, train_unembed)
        return self._training_client(base_model, shape)

    def create_training_client(self, base_model: str) -> TrainingClient:
        """A client that trains every weight of the model (full fine-tune)."""
        return self._training_client(base_model, None)

    def create_sampling_client(
        self, model_path: str | Path | None = None, seed: int = 0, base_model: str | None = None
    ) -> SamplingClient:
        """A sampler over weights saved by `save_weights_for_sampler` (its path or URI, or
        any local HF model directory), or over `base_model`; it owns its copy of the
        weights. `seed` starts its random stream (each call's `SamplingParams.seed` wins)."""
        if (model_path is None) == (base_model is None):
            raise ValueError("create_sampling_client needs exactly one of model_path, base_model")
        if is_uri(model_path):
            model_path = CheckpointRegistry(self.root).resolve(str(model_path), "sampler")["path"]
        model, tokenizer = self._load(str(model_path or base_model), None)
        engine = self._engine(model, tokenizer)
        trainer = TrainingClient(model, tokenizer, self.root, seed, engine)  # its forward only
        weights = locked(trainer.lock)
        return SamplingClient(engine, trainer.compute_logprobs, seed, weights, trainer.vocab_size)

    def create_training_client_from_state(self, path: str | Path) -> TrainingClient:
        """A training client of the base model and LoRA shape `save_state` recorded in
        `path` (a directory or its URI), with its weights and a fresh optimizer (the
        remote API's semantics)."""
        trainer = self._from_state(path)
        trainer.load_state(path)
        return trainer

    def create_training_client_from_state_with_optimizer(self, path: str | Path) -> TrainingClient:
        """`create_training_client_from_state` with the optimizer state too: an exact resume."""
        trainer = self._from_state(path)
        trainer.load_state_with_optimizer(path)
        return trainer

    def _from_state(self, path: str | Path) -> TrainingClient:
        state = read_state(state_path(self.root, path))
        if not state.get("base_model"):
            raise ValueError(
                f"state {str(path)!r} does not record its base model (written by an older "
                "rlvr.service); create the client yourself and call load_state"
            )
        lora = state.get("lora")
        lora = None if lora is None else LoraShape.from_record(lora)
        return self._training_client(state["base_model"], lora)

    def _training_client(self, base_model: str, lora: LoraShape | None) -> TrainingClient:
        model, tokenizer = self._load(base_model, lora)
        engine = self._engine(model, tokenizer)
        return TrainingClient(
            model, tokenizer, self.root, self.seed, engine, base_model, lora, self.absolute_saves
        )

    def _engine(self, model: torch.nn.Module, tokenizer: Tokenizer) -> RolloutEngine:
        return make_engine(model, tokenizer, self.engine, self.engine_options)  # rlvr.parts

    def _load(self, base_model: str, lora: LoraShape | None) -> tuple[torch.nn.Module, Tokenizer]:
        with LOADING:
            model, tokenizer = load_base_model(base_model, self.task_options, self.seed)
        options = PolicyOptions(
            dtype=self.dtype, device=self.device, lora=lora and lora.options(model)
        )
        with torch.random.fork_rng(devices=[]):  # the adapters' draw follows the seed (F18)
            torch.manual_seed(lora.seed if lora else self.seed)
            model, _ = prepare_policy(model, options)
        # Every forward with dropout off, so the trainer's log-probs equal the sampler's.
        return dropout_off(model), tokenizer

    async def create_lora_training_client_async(
        self, base_model: str, *args: Any, **kwargs: Any
    ) -> TrainingClient:
        return self.create_lora_training_client(base_model, *args, **kwargs)

    async def create_training_client_async(self, base_model: str) -> TrainingClient:
        return self.create_training_client(base_model)

    async def create_sampling_client_async(self, *args: Any, **kwargs: Any) -> SamplingClient:
        return self.create_sampling_client(*args, **kwargs)

    async def create_training_client_from_state_async(self, path: str | Path) -> TrainingClient:
        return self.create_training_client_from_state(path)

    async def create_training_client_from_state_with_optimizer_async(
        self, path: str | Path
    ) -> TrainingClient:
        return self.create_training_client_from_state_with_optimizer(path)


def load_base_model(
    base_model: str, task_options: dict[str, Any], seed: int
) -> tuple[torch.nn.Module, Tokenizer]:
    """The embedded warm-started model of a task, or a local HF model directory."""
    if not isinstance(base_model, str) or not base_model:
        raise ValueError(f"base_model={base_model!r} must be 'embedded:<task>' or a local path")
    name, _, task = base_model.partition(":")
    if name == EMBEDDED:
        task = task or DEFAULT_TASK
        if task not in TASKS:
            raise ValueError(
                f"base_model={base_model!r}: unknown task {task!r}; valid: "
                + ", ".join(f"embedded:{t}" for t in TASKS)
            )
        model, tokenizer, _ = load_policy(EMBEDDED, task, task_options, seed, progress=False)
        return model, tokenizer
    if not Path(base_model).is_dir():
        raise ValueError(
            f"base_model={base_model!r} is neither 'embedded:<task>' nor a local model "
            "directory (the local service downloads nothing)"
        )
    model, tokenizer, _ = load_pretrained(base_model)
    return model, tokenizer


def tokens_of(tokenizer: Tokenizer, text: str) -> ModelInput:
    """`ModelInput` of `text` under `tokenizer` (a convenience for prompts)."""
    return ModelInput.from_ints(tokenizer.encode(text))
