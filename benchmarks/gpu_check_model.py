"""What `gpu_check.py` builds without a download: decoders at real shapes with random
weights, a synthetic tokenizer over the real vocabulary, the workloads of its two modes,
and the arithmetic of training MFU.

The shapes are copied from the public `config.json` of each model (hidden size, layers,
heads, vocabulary); `tests/test_gpu_check.py` checks their parameter counts against the
model cards. Random weights change no kernel shape, so speed and memory are the real
model's; what they change is the text, which is why the reward is a stand-in
(`gpu_check_reward.parity_reward`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM, PretrainedConfig, Qwen2Config, Qwen3Config

from rlvr.models.tokenizer import CHARACTERS

QWEN_VOCAB = 151_936


class Skip(Exception):
    """A step does not apply on this machine or in this mode; the message says why."""


@dataclass(frozen=True)
class Shape:
    """A Qwen decoder's dimensions (weights random)."""

    family: str
    """'qwen2' (Qwen2.5: decodes through rlvr's fused path) or 'qwen3' (q/k norms:
    the generic transformers path)."""
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int = QWEN_VOCAB
    head_dim: int | None = None
    """None: hidden // heads (Qwen2.5); Qwen3 sets 128."""
    tied: bool = True
    """Input embedding and LM head share one matrix."""

    def config(self) -> PretrainedConfig:
        """The transformers config, with pad = 0 and EOS = 1 (`SyntheticTokenizer`)."""
        common = dict(
            vocab_size=self.vocab,
            hidden_size=self.hidden,
            intermediate_size=self.intermediate,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads,
            tie_word_embeddings=self.tied,
            max_position_embeddings=32_768,
            rope_theta=1_000_000.0,
            rms_norm_eps=1e-6,
            pad_token_id=0,
            eos_token_id=1,
            bos_token_id=None,
        )
        if self.family == "qwen3":
            return Qwen3Config(**common, head_dim=self.head_dim or self.hidden // self.heads)
        return Qwen2Config(**common, use_sliding_window=False)

    def linear_params(self) -> int:
        """N of the MFU formula: the weights of every matrix product per token, i.e. every
        linear layer and the LM head (the embedding lookup costs no FLOPs)."""
        head_dim = self.head_dim or self.hidden // self.heads
        attention = self.hidden * head_dim * (2 * self.heads + 2 * self.kv_heads)  # q, o, k, v
        mlp = 3 * self.hidden * self.intermediate  # gate, up, down
        return self.layers * (attention + mlp) + self.vocab * self.hidden


SHAPES: dict[str, Shape] = {
    "tiny": Shape("qwen2", hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, vocab=512),
    "tiny-qwen3": Shape(
        "qwen3", hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, vocab=512, head_dim=16
    ),
    "qwen2.5-0.5b": Shape("qwen2", hidden=896, intermediate=4864, layers=24, heads=14, kv_heads=2),
    "qwen2.5-1.5b": Shape("qwen2", hidden=1536, intermediate=8960, layers=28, heads=12, kv_heads=2),
    "qwen2.5-7b": Shape(
        "qwen2", 3584, 18944, layers=28, heads=28, kv_heads=4, vocab=152_064, tied=False
    ),
    "qwen3-0.6b": Shape("qwen3", 1024, 3072, layers=28, heads=16, kv_heads=8, head_dim=128),
    "qwen3-1.7b": Shape("qwen3", 2048, 6144, layers=28, heads=16, kv_heads=8, head_dim=128),
    "qwen3-4b": Shape("qwen3", 2560, 9728, layers=36, heads=32, kv_heads=8, head_dim=128),
    "qwen3-8b": Shape("qwen3", 4096, 12288, 36, heads=32, kv_heads=8, head_dim=128, tied=False),
}
FAST_SIZES = ("tiny", "tiny-qwen3")
GPU_SIZES = ("qwen2.5-0.5b", "qwen3-1.7b", "qwen3-4b")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def build_model(shape: Shape, device: str, dtype: str, seed: int = 0) -> torch.nn.Module:
    """A randomly initialised causal LM of `shape`, created on `device` in `dtype` (no
    float32 copy on the CPU first: a 4 B model is built in seconds on a GPU)."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(shape.config(), dtype=DTYPES[dtype])
    return model.train()


class SyntheticTokenizer:
    """rlvr's `Tokenizer` over a vocabulary of any size, with nothing to download: pad = 0,
    EOS = 1, printable ASCII one id per character (so task prompts encode), and every
    other id decodes to `<id>` (a random policy samples those)."""

    pad_token_id = 0
    eos_token_id = 1

    def __init__(self, vocab_size: int) -> None:
        if vocab_size < 2 + len(CHARACTERS):
            raise ValueError(f"vocab_size must be ≥ {2 + len(CHARACTERS)}, got {vocab_size}")
        self._vocab_size = vocab_size
        self._ids = {c: i + 2 for i, c in enumerate(CHARACTERS)}

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    def encode(self, text: str) -> list[int]:
        return [self._ids[c] for c in text if c in self._ids]

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        pieces = []
        for i in map(int, ids):
            if i < 2:
                pieces.append("" if skip_special else ("<pad>", "<eos>")[i])
            elif i < 2 + len(CHARACTERS):
                pieces.append(CHARACTERS[i - 2])
            else:
                pieces.append(f"<{i}>")
        return "".join(pieces)


def save_hf_tokenizer(vocab_size: int, directory: str) -> None:
    """`SyntheticTokenizer` as a Hugging Face tokenizer saved to `directory` (one word per
    id, each character a word), for an engine that loads its own from the model folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    ours = SyntheticTokenizer(vocab_size)
    vocab = {ours.decode([i], skip_special=False): i for i in range(vocab_size)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    hf = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<eos>", pad_token="<pad>")
    hf.save_pretrained(directory)


@dataclass(frozen=True)
class Workload:
    """How much each step generates and trains on."""

    prompts: int
    """Prompt groups per batch."""
    group_size: int
    prompt_tokens: int
    """Length of the synthetic prompts of the generation and mismatch steps."""
    new_tokens: int
    """Tokens generated per row (a random policy almost never stops early)."""
    train_new_tokens: int
    """Response budget of the GRPO steps."""
    micro_batch_size: int
    dtype: str
    lora_rank: int = 32
    digits: int = 18
    """Operand digits of the arithmetic prompts of the GRPO steps (≈ 40 tokens)."""


FAST = Workload(2, 4, 8, 8, 8, micro_batch_size=8, dtype="float32", lora_rank=4, digits=2)
GPU = Workload(16, 8, 128, 256, 256, micro_batch_size=32, dtype="bfloat16")

# Dense bf16 tensor-core peaks (FLOP/s) from the vendors' data sheets, by a substring of
# `torch.cuda.get_device_name()`; the first match wins, so PCIe comes before SXM.
BF16_PEAKS = (
    ("H100 PCIe", 756e12),
    ("H100", 989e12),  # SXM
    ("H200", 989e12),
    ("A100", 312e12),
)
MFU_FORMULA = (
    "MFU = FLOPs / (time/policy_update_s × bf16 peak); FLOPs = 6·N·T for a full fine-tune "
    "(forward 2NT, backward 4NT), 4·N·T with LoRA (frozen weights get no weight gradient); "
    "N = weights of every linear layer and the LM head (Shape.linear_params); T = response "
    "tokens trained + each group's prompt tokens once (the shared-prefix forward). Not "
    "counted: attention's T² term, the LM head recomputed by the chunked head's backward, "
    "the optimizer step."
)


def bf16_peak(device_name: str) -> float | None:
    """The GPU's dense bf16 peak FLOP/s, None when it is not in `BF16_PEAKS`."""
    return next((peak for name, peak in BF16_PEAKS if name in device_name), None)


def training_flops(shape: Shape, tokens: int, lora: bool) -> float:
    """FLOPs of one forward and backward over `tokens` (`MFU_FORMULA`)."""
    return (4 if lora else 6) * shape.linear_params() * tokens
