"""Policies: the embedded tiny Qwen2 and its tokenizer, warm start, loading by name, and
the trainer's log-prob forward pass."""

from rlvr.models.load import EMBEDDED, load_policy
from rlvr.models.logprobs import lm_head_logits, pack_prompt_response, response_logprobs
from rlvr.models.tiny import build_tiny_policy, count_parameters, tiny_qwen2_config
from rlvr.models.tokenizer import CharTokenizer, HFTokenizer, Tokenizer
from rlvr.models.warmstart import WarmStartSchedule, cache_root, dev_accuracy, warm_start

__all__ = [
    "EMBEDDED",
    "CharTokenizer",
    "HFTokenizer",
    "Tokenizer",
    "WarmStartSchedule",
    "build_tiny_policy",
    "cache_root",
    "count_parameters",
    "dev_accuracy",
    "lm_head_logits",
    "load_policy",
    "pack_prompt_response",
    "response_logprobs",
    "tiny_qwen2_config",
    "warm_start",
]
