"""The same work for both sides of `step_vs_trl.py`: one freshly initialised Qwen2-style
model (seed 0, fp32, character vocabulary of 50), one tokenizer built in memory, the 8
prompts and the reward; or, with `--model`, a real model read from a directory, GGUF file
or alias (`rlvr.models.load.resolve_model`) with its own tokenizer, the first `--prompts`
prompts, LoRA of rank `--lora` on every linear layer (0: full fine-tune) and KL weight
`--beta`; and the phase clock every contestant's step is timed with."""

from __future__ import annotations

import hashlib
import string
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, fields

import torch

from rlvr.train.config import TrainConfig

SIZES = {  # name: (hidden, layers, heads, intermediate)
    "3m": (256, 4, 4, 768),
    "30m": (512, 8, 8, 1792),
}
CHARS = string.ascii_lowercase + string.digits + "+-*=() ."  # 44 + 2 specials + 4 spare
PAD, EOS = 0, 1
LR = 1e-5
# rlvr's default `memory_budget_gib`, read from the config rather than copied.
DEFAULT_BUDGET = next(f.default for f in fields(TrainConfig) if f.name == "memory_budget_gib")


@dataclass(frozen=True)
class Work:
    """What `--model`, `--prompts`, `--lora`, `--beta` and `--memory-budget` change (the
    defaults: the tiny models' work as before). `memory_budget` is rlvr's
    `memory_budget_gib` (its default unless given): rlvr's training micro-batches are as many rows as
    it lets the trainer take; 0 means no budget (every row in one micro-batch)."""

    model: str | None = None
    prompts: int = 8
    lora: int = 0
    beta: float = 0.0
    memory_budget: float = DEFAULT_BUDGET

    def flags(self) -> list[str]:
        """The same work for a contestant's process."""
        model = [f"--model={self.model}"] if self.model else []
        return [
            *model,
            f"--prompts={self.prompts}",
            f"--lora={self.lora}",
            f"--beta={self.beta}",
            f"--memory-budget={self.memory_budget}",
        ]

    def lora_config(self):
        """Both sides' adapter: rank r, α = 2r, every linear layer (TRL's and peft's
        "all-linear" skips the LM head)."""
        from peft import LoraConfig

        r = self.lora
        return LoraConfig(r=r, lora_alpha=2 * r, target_modules="all-linear", task_type="CAUSAL_LM")


WORK = Work()
"""Set once per process by `step_vs_trl.py` from its flags, before any side is built."""

LORA_SEED = 1  # both sides draw their adapters' A from it (B starts at 0)


def prompts() -> list[str]:
    return PROMPTS[: WORK.prompts]


def build_work(size: str) -> tuple:
    """(HF tokenizer, fp32 model in train mode): the tiny model of `size`, or `WORK.model`."""
    if WORK.model is None:
        hf_tok = build_hf_tokenizer()
        return hf_tok, build_model(size, len(hf_tok))
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.models.load import resolve_model

    source = resolve_model(WORK.model)
    hf_tok = AutoTokenizer.from_pretrained(source)
    if hf_tok.pad_token_id is None:
        hf_tok.pad_token = hf_tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(source, torch_dtype=torch.float32)
    return hf_tok, model.train()


def peak_rss_gib() -> float:
    """This process's own peak resident memory so far (harness.peak_resident_bytes)."""
    from harness import peak_resident_bytes

    return peak_resident_bytes() / 2**30


def build_model(size: str, vocab: int, seed: int = 0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    hidden, layers, heads, inter = SIZES[size]
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config).float()


def build_hf_tokenizer():
    """A character-level `PreTrainedTokenizerFast`, built in memory (no hub access)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": PAD, "<eos>": EOS} | {c: i + 2 for i, c in enumerate(CHARS)}
    for i in range(50 - len(vocab)):
        vocab[f"<unused{i}>"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")


class NoEosTokenizer:
    """rlvr's tokenizer interface over the same vocabulary, with an EOS id no token has,
    so every row runs the full budget (TRL's `min_new_tokens` does the same there)."""

    eos_token_id = -1

    def __init__(self, hf) -> None:
        self.hf = hf
        self.pad_token_id = hf.pad_token_id if hf.pad_token_id is not None else PAD

    @property
    def vocab_size(self) -> int:
        return len(self.hf)

    def encode(self, text: str) -> list[int]:
        return self.hf(text, add_special_tokens=False)["input_ids"]

    def decode(self, ids, skip_special: bool = True) -> str:
        return self.hf.decode(ids, skip_special_tokens=skip_special)


PROMPTS = [
    f"{a}+{b}=" for a, b in [(12, 7), (3, 45), (61, 9), (8, 8), (27, 33), (5, 90), (14, 2), (70, 6)]
]


def reward(text: str) -> float:
    """A cheap reward with spread inside every group: the share of digits in the text."""
    return sum(c.isdigit() for c in text) / max(len(text), 1)


def correct(text: str) -> bool:
    """rlvr's 0/1 verdict (what DAPO's dynamic sampling filters on): at least 9 digits
    of 32 tokens, the median at initialisation (measured: mean 9.1 on seed 0),
    so nearly every group is mixed and both sides train on the same rows (TRL has no
    dynamic sampling); the benchmark prints the rows rlvr trained."""
    return sum(c.isdigit() for c in text) >= 9


def weights_digest(model) -> str:
    """SHA-256 of the parameters, so the driver can check every process built the same."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


class Phases:
    """Accumulated seconds per phase for the step in progress."""

    def __init__(self) -> None:
        self.now: dict[str, float] = defaultdict(float)

    @contextmanager
    def time(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.now[name] += time.perf_counter() - start

    def wrap(self, name: str, fn):
        def timed(*args, **kwargs):
            with self.time(name):
                return fn(*args, **kwargs)

        return timed

    def take(self) -> dict[str, float]:
        out, self.now = dict(self.now), defaultdict(float)
        return out
