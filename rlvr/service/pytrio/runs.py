"""The local PyTRIO server's state: served models (alias → local directory), service
sessions, training and sampling runs, each bound to rlvr.service's clients; and what
each Control call and Actor event becomes in rlvr.service. Every computation is the
service's; this module only keeps the wire's identifiers and translates.

Runs are created lazily as the remote service creates them: a training run's client
when its `trainer.init_run` event runs, a sampling run's when it is created. A
TEMPORARY `save_weights` (what `save_weights_and_get_sampling_client` sends) is the
service's in-memory snapshot sampler, never written to disk; a training run keeps its
`KEEP_TEMPORARY` newest. Saved states and weights live under ROOT/<training run>/<name>/
and are named by the root's registry (registry.py), so a later process loads them.
Closing a session releases its runs.
"""

from __future__ import annotations

import itertools
import json
import secrets
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.service.client import ServiceClient
from rlvr.service.pytrio import wire
from rlvr.service.pytrio.chat import chat_request, chat_response
from rlvr.service.registry import CheckpointRegistry, is_uri
from rlvr.service.sampling import SamplingClient
from rlvr.service.training import TrainingClient
from rlvr.service.types import SampleResponse

KEEP_TEMPORARY = 8
TEMPORARY = "rlvr-temp://"
ALPHA = 32.0  # the LoRA α of rlvr's Tinker front too; the wire has none


@dataclass
class TrainingRun:
    id: str
    session: str
    alias: str
    model_id: str
    lora: dict
    source_uri: str = ""
    restore_optimizer: bool = False
    client: TrainingClient | None = None
    temporary: deque = field(default_factory=deque)


@dataclass
class SamplingRun:
    id: str
    session: str
    alias: str
    model_id: str
    sampler: SamplingClient
    source_uri: str = ""


class LocalTrio:
    """Models, sessions and runs over one `ServiceClient(root)`."""

    def __init__(self, root: str | Path, models: dict[str, str], seed: int = 0, log=print) -> None:
        self.root = Path(root).resolve()
        self.models = {alias: str(Path(d).resolve()) for alias, d in models.items()}
        self.service = ServiceClient(root=self.root, seed=seed, absolute_saves=False)
        self.registry = CheckpointRegistry(self.root)
        self.seed, self.log = seed, log
        self.lock = threading.Lock()  # the tables below; the models have their own locks
        self.sessions: dict[str, set[str]] = {}
        self.training: dict[str, TrainingRun] = {}
        self.sampling: dict[str, SamplingRun] = {}
        self.temporary: dict[str, SamplingClient] = {}
        self.chats: dict[str, SamplingClient] = {}  # chat/completions' samplers by model
        self.chat_lock = threading.Lock()
        self.index = itertools.count(1)

    # Names -----------------------------------------------------------------------------

    def model(self, name: Any) -> tuple[str, str]:
        """(alias, directory) of a served alias, or of a served directory itself."""
        for alias, directory in self.models.items():
            if name in (alias, directory):
                return alias, directory
        raise wire.WireError(
            f"model {name!r:.80} is not served here; served: {', '.join(self.models)} "
            "(python -m rlvr.service.as_pytrio serve --model ALIAS=DIR)",
            "unknown_model",
        )

    def _id(self, kind: str) -> str:
        return f"{kind}-{next(self.index):04d}-{secrets.token_hex(3)}"

    def _get(self, table: dict, run_id: str, what: str) -> Any:
        with self.lock:
            run = table.get(run_id)
        if run is None:
            raise wire.WireError(
                f"{what} {run_id!r:.60} is unknown (its session was closed, or it was a "
                f"temporary sampler of which the server keeps the {KEEP_TEMPORARY} newest)",
                "not_found",
            )
        return run

    # Control -----------------------------------------------------------------------------

    def open_session(self) -> str:
        session = self._id("session")
        with self.lock:
            self.sessions[session] = set()
        return session

    def close_session(self, session: str) -> None:
        with self.lock:
            for run_id in self.sessions.pop(session, set()):
                run = self.training.pop(run_id, None)
                for uri in run.temporary if run else ():
                    self.temporary.pop(uri, None)
                self.sampling.pop(run_id, None)

    def _add(self, table: dict, run: Any) -> None:
        with self.lock:
            if run.session not in self.sessions:
                raise wire.WireError(f"service session {run.session!r:.60} is unknown", "not_found")
            table[run.id] = run
            self.sessions[run.session].add(run.id)

    def create_training_run(self, session: str, body: dict) -> dict:
        uri = body.get("source_checkpoint_uri") or ""
        if uri:
            entry = self.registry.resolve(uri, "state")
            alias, model_id = self.model(entry["base_model"])
            lora = dict(entry["lora"] or {})
        else:
            alias, model_id = self.model(wire.field(body, "base_model", str, "training run"))
            lora = {"rank": wire.field(body, "lora_rank", int, "training run")}
            lora["seed"] = body.get("seed")
            for name in ("train_attn", "train_mlp", "train_unembed"):
                lora[name] = bool(body.get(name, True))
        run = TrainingRun(self._id("train"), session, alias, model_id, lora, uri)
        run.restore_optimizer = bool(body.get("restore_optimizer", False))
        self._add(self.training, run)
        return wire.training_run(run.id, session, len(self.training), alias, model_id)

    def bind_state(self, run_id: str, body: dict) -> dict:
        """PATCH of a training run before its first event: load_state's checkpoint."""
        run = self._get(self.training, run_id, "training run")
        run.source_uri = wire.field(body, "source_checkpoint_uri", str, "update")
        self.registry.resolve(run.source_uri, "state")
        run.restore_optimizer = bool(body.get("restore_optimizer", False))
        return {"source_checkpoint_uri": run.source_uri, "restore_optimizer": run.restore_optimizer}

    def checkpoint_run(self, uri: str) -> dict:
        entry = self.registry.resolve(uri, "state")
        _, model_id = self.model(entry["base_model"])
        return wire.checkpoint_run(model_id, entry["lora"] or {"rank": 0})

    def create_sampling_run(self, session: str, body: dict) -> dict:
        uri = body.get("source_checkpoint_uri") or ""
        alias, model_id = self.model(wire.field(body, "base_model", str, "sampling run"))
        sampler = self.sampler(model_id, uri, seed=self.seed + 104729 * next(self.index))
        run = SamplingRun(self._id("sample"), session, alias, model_id, sampler, uri)
        self._add(self.sampling, run)
        return wire.sampling_run(run.id, session, len(self.sampling), alias, model_id)

    def sampler(self, model_id: str, uri: str, seed: int) -> SamplingClient:
        """The sampler of a base model, a temporary snapshot, or saved sampler weights."""
        if not uri:
            return self.service.create_sampling_client(base_model=model_id, seed=seed)
        if uri.startswith(TEMPORARY):
            with self.lock:
                sampler = self.temporary.get(uri)
            if sampler is None:
                raise wire.WireError(f"temporary weights {uri!r:.80} were released", "not_found")
            return sampler
        entry = self.registry.resolve(uri, "sampler")
        if self.model(entry["base_model"])[1] != model_id:
            raise wire.WireError(f"{uri!r} was saved from {entry['base_model']}, not {model_id}")
        return self.service.create_sampling_client(model_path=uri, seed=seed)

    def model_list(self) -> dict:
        contexts = {alias: _context(directory) for alias, directory in self.models.items()}
        return wire.model_list(self.models, contexts)

    # Actor -------------------------------------------------------------------------------

    def sample(self, run_id: str, body: dict) -> dict:
        run = self._get(self.sampling, run_id, "sampling run")
        request = wire.sample_request(body)
        response: SampleResponse = run.sampler.sample(
            request.prompt, request.num_samples, request.params
        ).result()
        prompt_logprobs = None
        if request.prompt_logprobs:
            prompt_logprobs = run.sampler.compute_logprobs(request.prompt).result()
        return wire.sample_response(request, run.id, response.sequences, prompt_logprobs)

    def execute(self, env: wire.Envelope) -> dict:
        """What one trainer event does, in rlvr.service; its result body."""
        run = self._get(self.training, env.run_id, "training run")
        if env.type == "trainer.init_run":
            return self._init(run, env.payload)
        if run.client is None:
            raise wire.WireError(f"{env.type} before trainer.init_run", "invalid_request")
        handler: Callable[[TrainingRun, dict], dict] = getattr(self, "_" + env.type[8:])
        return handler(run, env.payload)

    def _init(self, run: TrainingRun, payload: dict) -> dict:
        if run.client is not None:
            return {}
        uri = payload.get("checkpoint_uri") or run.source_uri
        if uri:
            optimizer = bool(payload.get("load_optimizer", run.restore_optimizer))
            create = self.service.create_training_client_from_state
            if optimizer:
                create = self.service.create_training_client_from_state_with_optimizer
            run.client = create(self.registry.resolve(uri, "state")["path"])
        else:
            lora = {**run.lora, **wire.field(payload, "lora_config", dict, "payload")}
            seed = lora.get("seed")
            run.client = self.service.create_lora_training_client(
                run.model_id,
                rank=wire.field(lora, "rank", int, "lora_config"),
                alpha=ALPHA,
                seed=None if seed is None else int(seed),
                train_attn=bool(lora.get("train_attn", True)),
                train_mlp=bool(lora.get("train_mlp", True)),
                train_unembed=bool(lora.get("train_unembed", True)),
            )
        self.log(f"{run.id}: LoRA rank {run.client.lora.rank} on {run.alias} ({run.model_id})")
        return {}

    def _forward(self, run: TrainingRun, payload: dict, backward: bool = False) -> dict:
        datums, loss_fn, config = wire.forward_request(payload)
        call = run.client.forward_backward if backward else run.client.forward
        out = call(datums, loss_fn, config).result()
        m = out.metrics
        self.log(
            f"{run.id}: {'forward_backward' if backward else 'forward'} {loss_fn} "
            f"datums={len(datums)} loss_sum={m['loss_sum']:.6g} "
            f"loss_mean={m['loss_mean']:.6g} token_count={m['token_count']}"
        )
        return wire.forward_result([o["logprobs"].tolist() for o in out.loss_fn_outputs], m)

    def _forward_backward(self, run: TrainingRun, payload: dict) -> dict:
        return self._forward(run, payload, backward=True)

    def _optimize_step(self, run: TrainingRun, payload: dict) -> dict:
        metrics = run.client.optim_step(wire.adam_params(payload)).result().metrics
        self.log(
            f"{run.id}: optim_step {metrics['optim/step']} grad_norm={metrics['optim/grad_norm']:.4g}"
        )
        return {"metrics": metrics}

    def _save_state(self, run: TrainingRun, payload: dict) -> dict:
        name, overwrite, _ = wire.save_request(payload)
        saved = run.client.save_state(f"{run.id}/{name}", overwrite=overwrite).result()
        self.log(f"{run.id}: save_state {saved.uri}")
        return wire.saved(saved.uri, run.model_id, _size(saved.path))

    def _save_weights(self, run: TrainingRun, payload: dict) -> dict:
        name, overwrite, temporary = wire.save_request(payload)
        if not temporary:
            saved = run.client.save_weights_for_sampler(f"{run.id}/{name}", overwrite=overwrite)
            saved = saved.result()
            self.log(f"{run.id}: save_weights {saved.uri}")
            return wire.saved(saved.uri, run.model_id, _size(saved.path))
        uri = f"{TEMPORARY}{run.id}/{name}"
        sampler = run.client.save_weights_and_get_sampling_client(name)
        with self.lock:
            self.temporary[uri] = sampler
            run.temporary.append(uri)
            while len(run.temporary) > KEEP_TEMPORARY:
                old = run.temporary.popleft()
                self.temporary.pop(old, None)
                for sampling_id in [k for k, v in self.sampling.items() if v.source_uri == old]:
                    del self.sampling[sampling_id]
        return wire.saved(uri, run.model_id, 0)

    def _end_run(self, run: TrainingRun, payload: dict) -> dict:
        return {}

    # OpenAI-compatible chat ----------------------------------------------------------------

    def chat(self, body: Any) -> dict:
        """chat/completions with `model` a served alias or a sampler-weights URI (one
        sampler per name, made at its first request)."""
        name = wire.field(body, "model", str, "chat/completions")
        with self.chat_lock:
            if name not in self.chats:
                self.chats[name] = self._chat_sampler(name)
            sampler = self.chats[name]
        prompt, n, params = chat_request(body, sampler.get_tokenizer())
        return chat_response(name, prompt, sampler.sample(prompt, n, params).result().sequences)

    def _chat_sampler(self, name: str) -> SamplingClient:
        if not is_uri(name) and not name.startswith(TEMPORARY):
            return self.sampler(self.model(name)[1], "", self.seed)
        if name.startswith(TEMPORARY):
            with self.lock:
                sampler = self.temporary.get(name)
            if sampler is None:
                raise wire.WireError(f"temporary weights {name!r:.80} were released", "not_found")
            return sampler
        entry = self.registry.resolve(name, "sampler")
        return self.sampler(self.model(entry["base_model"])[1], name, self.seed)


def _size(path: str) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def _context(directory: str) -> int | None:
    """The served model's context length, as its config.json names it."""
    try:
        value = json.loads((Path(directory) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    value = value.get("max_position_embeddings") if isinstance(value, dict) else None
    return value if isinstance(value, int) and value > 0 else None
