"""A tiny random Qwen2 saved as a local model: Trainer tests without the warm start."""

from __future__ import annotations

from rlvr.models.tiny import build_tiny_policy, tiny_qwen2_config
from rlvr.models.tokenizer import CharTokenizer
from rlvr.train import Trainer
from rlvr.train.config import resolve_config


def local_policy_dir(tmp_path, **config_attributes) -> str:
    """Save a 2-layer, 32-wide random Qwen2 (config attributes overridden) and its tokenizer."""
    tokenizer = CharTokenizer()
    config = tiny_qwen2_config(tokenizer.vocab_size, hidden=32, layers=2, heads=2, kv_heads=2)
    for name, value in config_attributes.items():
        setattr(config, name, value)
    model = build_tiny_policy(config, seed=0)
    path = tmp_path / "local_model"
    model.save_pretrained(path)
    tokenizer.save(path)
    return str(path)


def local_trainer(tmp_path, model_attributes: dict | None = None, **overrides) -> Trainer:
    """A Trainer on 2-digit addition with the local model and tiny batches."""
    values = {
        "model": local_policy_dir(tmp_path, **(model_attributes or {})),
        "task_options": {"digits": 2, "ops": "+"},
        "prompts_per_step": 2,
        "group_size": 4,
        "max_new_tokens": 8,
        "eval_size": 4,
        "progress": False,
        "out": str(tmp_path / "run"),
        **overrides,
    }
    return Trainer(resolve_config(values))
