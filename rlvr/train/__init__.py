"""The one training loop, its configuration, sampling with selection, updates and logging."""

from rlvr.train.config import TrainConfig, resolve_config
from rlvr.train.loop import Trainer
from rlvr.train.run import run_training

__all__ = ["TrainConfig", "Trainer", "resolve_config", "run_training"]
