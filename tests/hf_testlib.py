"""A tiny randomly initialised Qwen2 and a real Hugging Face tokenizer (byte-level BPE
with a chat template), built and saved to a directory, plus small benchmark-format data
files: everything the HF-policy tests need, on CPU, in about a second."""

from __future__ import annotations

import json
from pathlib import Path

import torch

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
    "{% endif %}{% endif %}"
)
SPECIAL = ["<|pad|>", "<|im_end|>", "<|im_start|>"]
# Written for these tests in the shape of Qwen's tool templates (not copied from them): the
# tools are declared in a system turn, a `tool` message becomes a user turn wrapped in
# <tool_response> tags, and, as Qwen3's template does, the last assistant turn is rendered
# with an (empty) think block that earlier assistant turns lose, so the text of a
# conversation changes when a message is appended to it (the trap of issue 26).
QWEN_TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n{% endif %}"
    "Tools you may call:\n<tools>{% for t in tools %}{{ '\\n' }}{{ t | tojson }}{% endfor %}"
    "{{ '\\n' }}</tools>\n"
    'Call one as <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call><|im_end|>\n'
    "{% elif messages[0]['role'] == 'system' %}"
    "<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'user' %}<|im_start|>user\n{{ m['content'] }}<|im_end|>\n"
    "{% elif m['role'] == 'assistant' %}<|im_start|>assistant\n"
    "{% if loop.last %}<think>\n\n</think>\n\n{% endif %}"
    "{{ m['content'].split('</think>')[-1].lstrip('\n') }}<|im_end|>\n"
    "{% elif m['role'] == 'tool' %}"
    "{% if loop.first or loop.previtem['role'] != 'tool' %}<|im_start|>user{% endif %}"
    "{{ '\\n' }}<tool_response>\n{{ m['content'] }}\n</tool_response>"
    "{% if loop.last or loop.nextitem['role'] != 'tool' %}<|im_end|>\n{% endif %}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
    "{% endif %}{% endif %}"
)


def gsm8k_rows(n: int) -> list[dict]:
    return [
        {
            "question": f"Tom has {i} apples and buys {i} more. How many apples?",
            "answer": f"{i}+{i}={2 * i}\n#### {2 * i}",
        }
        for i in range(1, n + 1)
    ]


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def build_tokenizer(texts: list[str], chat_template: str = CHAT_TEMPLATE):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|pad|>"
    )
    tokenizer.chat_template = chat_template
    return tokenizer


def build_tiny_hf_model(
    directory: Path,
    seed: int = 0,
    chat_template: str = CHAT_TEMPLATE,
    extra_texts: tuple[str, ...] = (),
) -> Path:
    """Save a random 2-layer Qwen2 and its tokenizer to `directory`; returns it.
    `extra_texts` join the tokenizer's training texts (e.g. tool calls, for merges)."""
    texts = [r["question"] + " " + r["answer"] for r in gsm8k_rows(50)]
    texts += ["Please reason step by step, and put your final answer within \\boxed{}."] * 5
    tokenizer = build_tokenizer(texts + list(extra_texts), chat_template)
    model = tiny_qwen2(tokenizer, max_positions=512, seed=seed)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def tiny_qwen2(tokenizer, max_positions: int, seed: int = 0):
    """A random 2-layer, 32-wide Qwen2 over `tokenizer` (tied embeddings, no BOS), its
    initial weights drawn from `seed` without moving the caller's RNG."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Qwen2ForCausalLM(config)
