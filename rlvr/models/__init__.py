"""Policies: the embedded tiny Qwen2 and its tokenizer, loading pretrained models, and the
trainer's log-prob forward pass. (The embedded model's warm start: `rlvr.warmstart`.)"""

from rlvr.models.load import EMBEDDED, load_pretrained
from rlvr.models.logprobs import lm_head_logits, pack_prompt_response, response_logprobs
from rlvr.models.tiny import build_tiny_policy, count_parameters, tiny_qwen2_config
from rlvr.models.tokenizer import CharTokenizer, HFTokenizer, Tokenizer

__all__ = [
    "EMBEDDED",
    "CharTokenizer",
    "HFTokenizer",
    "Tokenizer",
    "build_tiny_policy",
    "count_parameters",
    "lm_head_logits",
    "load_pretrained",
    "pack_prompt_response",
    "response_logprobs",
    "tiny_qwen2_config",
]
