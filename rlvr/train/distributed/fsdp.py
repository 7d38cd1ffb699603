"""FSDP2 (`torch.distributed.fsdp.fully_shard`) for policies that do not fit one device:
sharding, and moving whole (unsharded) weights and optimizer states in and out.

Each decoder layer is one FSDP unit and the root (embeddings, final norm, LM head) another,
as in torchtitan. FSDP reduce-scatters gradients as an *average* by default; rlvr's loss
weights already divide by the global counts (ALGORITHMS.md §4), so the ranks' gradients
must be *summed*: the divide factor is set to 1 with sum-only collectives (which gloo
supports; its reduce-scatter has no pre-multiplied sum).

The trainer's forward (`rlvr.models.logprobs.response_logprobs`) runs the backbone and
reads the LM head's weight itself, outside the root's `forward`, where FSDP would gather
the root's weights; so the sharded root carries that computation (`response_head`: the
backbone, then the LM head in chunks of positions, each recomputed in the backward) as a
registered forward method (`SHARDED_HEAD`). The root keeps its gathered weights from its
forward to its backward (FSDP2 does not reshard the root after forward), which is where
the chunks' recomputation reads them. The fused decode/prefix path reads weights
directly and is switched off for a sharded model (`rlvr.models.fused_llama.supports`).

Full state dicts travel through `torch.distributed.checkpoint.state_dict`: gathered to
rank 0 on the CPU, or broadcast from rank 0 and sharded. The policy optimizer's full
state is converted to the plain `Optimizer.state_dict()` layout (parameters numbered in
order), so a checkpoint of a sharded run is the one a single process writes.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard, register_fsdp_forward_method

from rlvr.models.logprobs import SHARDED_HEAD, response_head

GATHER = StateDictOptions(full_state_dict=True, cpu_offload=True)  # rank 0 only, on the CPU
SCATTER = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)


def fsdp_mesh(world_size: int) -> DeviceMesh:
    """The 1-D mesh of all ranks: each rank on its own GPU (LOCAL_RANK), else the CPU."""
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        return init_device_mesh("cuda", (world_size,))
    return init_device_mesh("cpu", (world_size,))


def mesh_device(mesh: DeviceMesh) -> torch.device:
    if mesh.device_type == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device(mesh.device_type)


def shard_policy(model: torch.nn.Module, mesh: DeviceMesh) -> None:
    """Shard `model` in place over `mesh`: each decoder layer, then the root."""
    layers = getattr(getattr(model, "base_model", None), "layers", None)
    if layers is None:
        raise ValueError(
            f"parallel='fsdp' shards each decoder layer, found as base_model.layers; "
            f"{type(model).__name__} has none: use parallel='ddp'"
        )
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    setattr(model, SHARDED_HEAD, functools.partial(response_head, model))
    fully_shard(model, mesh=mesh)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)  # Σ over ranks, not the mean
            module.set_force_sum_reduction_for_comms(True)
    register_fsdp_forward_method(model, SHARDED_HEAD)


def gather_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The full weights of a sharded `model` on rank 0's CPU ({} elsewhere); collective."""
    return get_model_state_dict(model, options=GATHER)


def scatter_weights(model: torch.nn.Module, full: dict[str, torch.Tensor] | None) -> None:
    """Load rank 0's `full` weights (None on the other ranks) into the shards; collective."""
    set_model_state_dict(model, full or {}, options=SCATTER)


def copy_weights(target: torch.nn.Module, full: dict[str, torch.Tensor]) -> None:
    """Copy `full` into an unsharded `target`: every parameter, and the buffers it holds."""
    with torch.no_grad():
        for name, param in target.named_parameters():
            if name not in full:
                raise KeyError(f"the gathered weights lack the parameter {name!r}")
            param.copy_(full[name])
        for name, buffer in target.named_buffers():
            if name in full:  # persistent ones; rotary tables are computed, not state
                buffer.copy_(full[name])


def gather_optimizer(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The full state of the sharded `optimizer` on rank 0 in `Optimizer.state_dict()`
    layout ({} elsewhere); collective."""
    full = get_optimizer_state_dict(model, optimizer, options=GATHER)
    if not full:
        return {}
    index = {name: i for i, name in enumerate(_param_names(model, optimizer))}
    return {
        "state": {index[name]: value for name, value in full["state"].items()},
        "param_groups": [
            {**group, "params": [index[name] for name in group["params"]]}
            for group in full["param_groups"]
        ],
    }


def scatter_optimizer(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any] | None
) -> None:
    """Load rank 0's `state` (`Optimizer.state_dict()` layout; None on the other ranks)
    into the sharded `optimizer`; collective."""
    full = {}
    if state:
        names = _param_names(model, optimizer)
        full = {
            "state": {names[i]: value for i, value in state["state"].items()},
            "param_groups": [
                {**group, "params": [names[i] for i in group["params"]]}
                for group in state["param_groups"]
            ],
        }
    set_optimizer_state_dict(model, optimizer, full, options=SCATTER)


def _param_names(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """The names of the optimizer's parameters in its numbering order."""
    names = {id(p): name for name, p in model.named_parameters()}
    return [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
