"""Load a policy by name: the embedded warm-started tiny model, a local path or a hub id."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import PreTrainedModel

from rlvr.models.tokenizer import TOKENIZER_FILE, CharTokenizer, HFTokenizer, Tokenizer
from rlvr.models.warmstart import warm_start

EMBEDDED = "embedded"


def load_policy(
    model: str, task_name: str, task_options: dict[str, Any], seed: int, **warm_kw: Any
) -> tuple[PreTrainedModel, Tokenizer, dict[str, Any]]:
    """`"embedded"`: the tiny Qwen2 warm-started on the task (cached; `warm_kw` go to
    `warm_start`). Anything else: a local directory or hub id for `from_pretrained`.
    Returns (model in train mode, tokenizer, info)."""
    if model == EMBEDDED:
        return warm_start(task_name, task_options, seed, **warm_kw)
    if warm_kw:
        raise ValueError(
            f"warm-start options {sorted(warm_kw)} only apply to model={EMBEDDED!r}, "
            f"not model={model!r}"
        )
    return _load_pretrained(model)


def _load_pretrained(name: str) -> tuple[PreTrainedModel, Tokenizer, dict[str, Any]]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        policy = AutoModelForCausalLM.from_pretrained(name)
    except (OSError, ValueError) as err:
        where = "local directory" if Path(name).exists() else "path or hub id"
        raise ValueError(
            f"could not load model={name!r} as a {where} with AutoModelForCausalLM "
            f"(use {EMBEDDED!r} for the built-in tiny model): {err}"
        ) from err
    tokenizer: Tokenizer
    if (Path(name) / TOKENIZER_FILE).is_file():
        tokenizer = CharTokenizer.load(name)  # a saved embedded model or an RL checkpoint of it
    else:
        try:
            tokenizer = HFTokenizer(AutoTokenizer.from_pretrained(name))
        except (OSError, ValueError) as err:
            raise ValueError(f"could not load a tokenizer for model={name!r}: {err}") from err
    policy.train()
    return policy, tokenizer, {"model": name, "parameters": policy.num_parameters()}
