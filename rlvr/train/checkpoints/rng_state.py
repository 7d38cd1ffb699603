"""Every random number generator a run owns, saved and restored as one dict.

The global ones (Python `random`, NumPy, torch CPU and CUDA) and every `torch.Generator`
found as an attribute of the objects given (the trainer, its engine and what they wrap),
keyed by attribute path. A generator added to the trainer later is covered without any
change here.

Every state is a tensor or a plain value (NumPy's key as a list of ints, not an array), so a
checkpoint loads with `torch.load(weights_only=True)`, which runs no code of the file's
(docs/security.md).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def find_generators(root: Any, name: str = "", depth: int = 3) -> dict[str, torch.Generator]:
    """`torch.Generator` attributes of `root` and of its attributes, `depth` levels down."""
    found: dict[str, torch.Generator] = {}
    seen: set[int] = set()

    def walk(obj: Any, path: str, level: int) -> None:
        if id(obj) in seen or level > depth:
            return
        seen.add(id(obj))
        if isinstance(obj, torch.Generator):
            found[path] = obj
            return
        if isinstance(obj, torch.nn.Module | torch.Tensor | torch.optim.Optimizer):
            return  # no generators inside; far too many attributes to walk
        attrs = getattr(obj, "__dict__", None)
        if not isinstance(attrs, dict):
            return
        for key, value in attrs.items():
            walk(value, f"{path}.{key}" if path else key, level + 1)

    walk(root, name, 0)
    return found


def rng_state(root: Any) -> dict[str, Any]:
    state = {
        "python": random.getstate(),
        "numpy": numpy_state(),
        "torch": torch.get_rng_state(),
        "generators": {k: g.get_state() for k, g in find_generators(root).items()},
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def load_rng_state(root: Any, state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])  # a dict (numpy_state), or an older rlvr's tuple
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    generators = find_generators(root)
    missing = sorted(set(state["generators"]) - set(generators))
    if missing:
        raise ValueError(f"checkpoint has RNG state for generator(s) the run lacks: {missing}")
    for key, value in state["generators"].items():
        generators[key].set_state(value)


def numpy_state() -> dict[str, Any]:
    """NumPy's global RNG state with its MT19937 key as a list of ints: what
    `np.random.set_state` takes, and nothing `torch.load(weights_only=True)` refuses."""
    state = np.random.get_state(legacy=False)
    inner = state["state"]
    return {**state, "state": {"key": inner["key"].tolist(), "pos": int(inner["pos"])}}
