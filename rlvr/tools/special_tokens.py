"""Special tokens in a tool's output, broken so they stay text.

A tool's output becomes observation tokens; a program that prints `<|im_end|>` would,
encoded as is, hand the policy a real end-of-turn token (a tokenizer matches its special
and added tokens inside any text). Each occurrence gets a space after its first character:
`<|im_end|>` → `< |im_end|>`, still readable, no longer the token.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any

COMMON_TOKENS = (
    # ChatML (Qwen, many others), Phi
    "<|im_start|>",
    "<|im_end|>",
    "<|im_sep|>",
    "<|endoftext|>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|end|>",
    # Llama 3
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|python_tag|>",
    # Llama 2 / Mistral, SentencePiece
    "[INST]",
    "[/INST]",
    "<s>",
    "</s>",
    # DeepSeek (full-width bars, ▁ for spaces)
    "<｜begin▁of▁sentence｜>",
    "<｜end▁of▁sentence｜>",
    "<｜User｜>",
    "<｜Assistant｜>",
    # Gemma
    "<start_of_turn>",
    "<end_of_turn>",
    # tool calls and reasoning (Hermes / Qwen templates)
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)


def tokenizer_tokens(tokenizer: Any) -> tuple[str, ...]:
    """The strings a Hugging Face `tokenizer` turns into single special or added tokens
    wherever they appear in text: its `all_special_tokens` and every added token."""
    found = list(getattr(tokenizer, "all_special_tokens", []))
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    found += [token.content for token in added.values()]
    return tuple(dict.fromkeys(found))


def control_tokens(tokenizer: Any) -> tuple[str, ...]:
    """`tokenizer_tokens` of rlvr's tokenizer adapter (or of a Hugging Face tokenizer):
    none for the character tokenizer, which never reads its `<eos>` out of text."""
    return tokenizer_tokens(getattr(tokenizer, "hf_tokenizer", tokenizer))


def break_token(token: str) -> str:
    return token[0] + " " + token[1:]


@functools.lru_cache(maxsize=32)
def _pattern(tokens: tuple[str, ...]) -> re.Pattern[str] | None:
    usable = sorted({t for t in tokens if len(t.strip()) >= 2}, key=len, reverse=True)
    return re.compile("|".join(map(re.escape, usable))) if usable else None


def neutralise(text: str, extra_tokens: Iterable[str] = ()) -> str:
    """`text` with every COMMON_TOKENS and `extra_tokens` string broken by a space after
    its first character; repeated until none is left (a break could complete another)."""
    pattern = _pattern(tuple(COMMON_TOKENS) + tuple(extra_tokens))
    if pattern is None:
        return text
    for _ in range(8):
        text, count = pattern.subn(lambda m: break_token(m.group()), text)
        if count == 0:
            return text
    return pattern.sub("", text)  # unreachable for real token lists; never leave one
