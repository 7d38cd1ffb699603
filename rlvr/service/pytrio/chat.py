"""An OpenAI-compatible `chat/completions` body ↔ a prompt and `SamplingParams` of the
local service, for scripts that evaluate through an OpenAI client (agentic-rl-lab's
02-opd `01-eval-*.py`). The prompt is the model's own chat template, rendered by its
Hugging Face tokenizer; `temperature=0` is greedy, as everywhere in the service.
"""

from __future__ import annotations

import time
from typing import Any

from rlvr.service.pytrio.wire import WireError, field
from rlvr.service.types import ModelInput, SampledSequence, SamplingParams

FIELDS = {
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "seed",
    "stop",
    "n",
    "stream",
}


def chat_request(body: Any, tokenizer: Any) -> tuple[ModelInput, int, SamplingParams]:
    """(prompt, n, params) of a chat/completions body; `tokenizer` is rlvr's HFTokenizer."""
    unknown = sorted(set(body) - FIELDS) if isinstance(body, dict) else []
    if unknown:
        raise WireError(f"chat/completions field {unknown[0]!r} cannot take effect locally")
    if body.get("stream"):
        raise WireError("chat/completions stream=true is not served locally", "unsupported")
    messages = field(body, "messages", list, "chat/completions")
    if not all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages):
        raise WireError("chat/completions messages must be {role, content: text} objects")
    hf = getattr(tokenizer, "hf_tokenizer", None)
    if hf is None or not getattr(hf, "chat_template", None):
        raise WireError("the model's tokenizer has no chat template", "unsupported")
    text = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    stop = body.get("stop")
    params = SamplingParams(
        max_tokens=int(body.get("max_completion_tokens") or body.get("max_tokens") or 256),
        temperature=float(body.get("temperature", 1.0)),
        top_p=float(body.get("top_p", 1.0)),
        seed=body.get("seed"),
        stop=[stop] if isinstance(stop, str) else stop,
    )
    return ModelInput.from_ints(tokenizer.encode(text)), int(body.get("n", 1)), params


def chat_response(model: str, prompt: ModelInput, sequences: list[SampledSequence]) -> dict:
    completion = sum(len(s.tokens) for s in sequences)
    return {
        "id": f"chatcmpl-local-{time.time_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": i,
                "message": {"role": "assistant", "content": s.text},
                "finish_reason": s.stop_reason,
            }
            for i, s in enumerate(sequences)
        ],
        "usage": {
            "prompt_tokens": prompt.length,
            "completion_tokens": completion,
            "total_tokens": prompt.length + completion,
        },
    }
