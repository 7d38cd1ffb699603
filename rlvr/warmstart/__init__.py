"""Supervised warm start of the embedded policy (uses models, rollout and tasks), and
`load_policy`, which gives the warm-started model for "embedded" and any other name to
`from_pretrained`."""

from rlvr.models.load import EMBEDDED
from rlvr.warmstart.load import load_policy
from rlvr.warmstart.supervised import WarmStartSchedule, cache_root, dev_accuracy, warm_start

__all__ = [
    "EMBEDDED",
    "WarmStartSchedule",
    "cache_root",
    "dev_accuracy",
    "load_policy",
    "warm_start",
]
