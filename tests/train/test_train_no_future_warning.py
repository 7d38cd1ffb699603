"""A run on a Hugging Face policy, with LoRA and gradient checkpointing, prints no
FutureWarning: every deprecated transformers name is avoided or, where a dependency
reads it, kept from the user."""

from __future__ import annotations

import warnings

from hf_testlib import build_tiny_hf_model, gsm8k_rows, write_jsonl

from rlvr.train.config import resolve_config
from rlvr.train.loop import Trainer


def test_lora_run_raises_no_future_warning(tmp_path):
    model_dir = str(build_tiny_hf_model(tmp_path / "model"))
    data = write_jsonl(tmp_path / "gsm8k.jsonl", gsm8k_rows(12))
    cfg = resolve_config(
        {
            "model": model_dir,
            "task": "gsm8k",
            "task_options": {"data": data, "dev_size": 2, "eval_size": 2},
            "eval_size": 2,
            "prompts_per_step": 2,
            "group_size": 2,
            "max_new_tokens": 4,
            "progress": False,
            "out": str(tmp_path / "run"),
            "policy": {
                "gradient_checkpointing": True,
                "lora": {"rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]},
            },
        }
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        trainer = Trainer(cfg)
        metrics = trainer.train_step()
        trainer.evaluate()
    assert metrics["train/update_skipped"] == 0.0  # the step ran and updated the adapters
