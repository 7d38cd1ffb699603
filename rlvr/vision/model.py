"""The embedded vision-language model: LLaVA's recipe (Liu et al., arXiv:2304.08485) at toy
scale, built from a config, offline.

    h_img = W₂·GELU(W₁·ViT(image))          one vector per p×p patch (LLaVA-1.5's MLP projector)
    e_t   = h_img[k] if x_t is placeholder k else Embed(x_t)
    logits = LM_head(Qwen2(e))

The ViT (Dosovitskiy et al., arXiv:2010.11929) cuts the image into non-overlapping
patches, embeds each linearly (a stride-p convolution), adds learned positions and runs
pre-norm transformer layers. Image tokens take ordinary 1-D positions (LLaVA's choice;
a Qwen2-VL by path has its own: `rlvr.vision.qwen_vl`). The language side is the
embedded Qwen2 (`rlvr.models.tiny`): its config is passed in, built by the caller.

rlvr runs any policy through `base_model(input_ids, attention_mask, position_ids, ...)`
and `get_output_embeddings()`; this model's `base_model` also takes `pixel_values`, which
`rlvr.vision.image_inputs` gathers from a batch's `ImagePrompt`s. Its `model_type` is
not a Llama family's, so it samples through the engine's generic path (a DynamicCache).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import Qwen2Config, Qwen2Model

from rlvr.checks import check_int

CONFIG_FILE = "tiny_vlm.json"
WEIGHTS_FILE = "tiny_vlm.pt"


@dataclass(frozen=True)
class VisionSettings:
    """The vision encoder's shape."""

    image_size: int = 24
    """Height and width of the square RGB image, in pixels."""
    patch_size: int = 6
    """Side of one patch; each patch becomes one image token."""
    channels: int = 3
    hidden: int = 64
    """Width of the ViT."""
    layers: int = 2
    heads: int = 4

    def __post_init__(self) -> None:
        for name in ("image_size", "patch_size", "channels", "hidden", "layers", "heads"):
            check_int(name, getattr(self, name))
        if self.image_size % self.patch_size or self.hidden % self.heads:
            raise ValueError(
                f"image_size={self.image_size} must be divisible by patch_size="
                f"{self.patch_size}, and hidden={self.hidden} by heads={self.heads}"
            )

    @property
    def tokens_per_image(self) -> int:
        return (self.image_size // self.patch_size) ** 2


class TinyVLMConfig:
    """The language model's Qwen2Config, the vision settings, and the placeholder id."""

    model_type = "tiny_vlm"

    def __init__(self, text: Qwen2Config, vision: VisionSettings, image_token_id: int) -> None:
        if image_token_id != text.vocab_size:
            raise ValueError(
                f"image_token_id={image_token_id} must be the text vocab_size "
                f"({text.vocab_size}): one past the LM head, so it is never sampled"
            )
        self.text, self.vision, self.image_token_id = text, vision, image_token_id

    @property
    def max_position_embeddings(self) -> int:
        return self.text.max_position_embeddings

    def to_dict(self) -> dict[str, Any]:
        return {
            "model_type": self.model_type,
            "text": self.text.to_dict(),
            "vision": asdict(self.vision),
            "image_token_id": self.image_token_id,
        }

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> TinyVLMConfig:
        text = Qwen2Config.from_dict(saved["text"])
        text._attn_implementation = saved["text"].get("_attn_implementation", "eager")
        return cls(text, VisionSettings(**saved["vision"]), int(saved["image_token_id"]))


class _Block(nn.Module):
    """One pre-norm transformer layer: x + Attn(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.mlp = nn.Sequential(
            nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, p, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(n, p, 3, self.heads, h // self.heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (n, heads, p, d)
        weights = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).softmax(-1)
        x = x + self.out((weights @ v).transpose(1, 2).reshape(n, p, h))
        return x + self.mlp(self.norm2(x))


class PatchEncoder(nn.Module):
    """The ViT: (N, C, S, S) pixels → (N, P, hidden) patch vectors, P = (S / p)²."""

    def __init__(self, s: VisionSettings) -> None:
        super().__init__()
        self.patchify = nn.Conv2d(s.channels, s.hidden, s.patch_size, stride=s.patch_size)
        self.positions = nn.Parameter(torch.randn(s.tokens_per_image, s.hidden) * 0.02)
        self.blocks = nn.ModuleList(_Block(s.hidden, s.heads) for _ in range(s.layers))
        self.norm = nn.LayerNorm(s.hidden)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        x = self.patchify(pixel_values).flatten(2).transpose(1, 2) + self.positions
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


class VisionLanguageBackbone(nn.Module):
    """Vision encoder, projector and the Qwen2 body: hidden states of a batch whose image
    placeholders are filled, in row-major order, with `pixel_values`' patches."""

    def __init__(self, config: TinyVLMConfig) -> None:
        super().__init__()
        self.image_token_id = config.image_token_id
        self.tokens_per_image = config.vision.tokens_per_image
        hidden = config.text.hidden_size
        self.vision = PatchEncoder(config.vision)
        self.projector = nn.Sequential(
            nn.Linear(config.vision.hidden, hidden), nn.GELU(), nn.Linear(hidden, hidden)
        )
        self.language = Qwen2Model(config.text)

    def embed(self, input_ids: torch.Tensor, pixel_values: torch.Tensor | None) -> torch.Tensor:
        """(B, L, H) input embeddings: the token's own, or its image patch's projection.
        The placeholder's row of the embedding table is never read, so it gets no gradient."""
        image = input_ids == self.image_token_id  # (B, L)
        embeds = self.language.embed_tokens(input_ids.masked_fill(image, 0))
        found = int(image.sum())
        given = 0 if pixel_values is None else len(pixel_values) * self.tokens_per_image
        if found != given:
            raise ValueError(
                f"the batch holds {found} image placeholder tokens but pixel_values fill "
                f"{given} ({self.tokens_per_image} per image): every image prompt must reach "
                f"the forward as an rlvr.vision.ImagePrompt, whose pixels ride with its ids"
            )
        if not found:
            return embeds
        # Pixels in [0, 1] centred to [−1, 1]: uncentred, the tiny ViT's patch features
        # barely varied with the picture and the warm start stayed at chance (measured).
        centred = pixel_values.to(embeds.dtype) * 2 - 1
        patches = self.projector(self.vision(centred))  # (N, P, H)
        # Under a bf16 autocast the projector's products come out bf16, the lookup float32.
        patches = patches.reshape(-1, embeds.shape[-1]).to(embeds.dtype)
        return embeds.masked_scatter(image[..., None], patches)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cache: Any = None,
        use_cache: bool | None = None,
        pixel_values: torch.Tensor | None = None,
    ) -> Any:
        return self.language(
            inputs_embeds=self.embed(input_ids, pixel_values),
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            use_cache=use_cache,
        )


class TinyVLM(nn.Module):
    """The policy: `base_model` (the backbone) and a head tied to the token embeddings."""

    def __init__(self, config: TinyVLMConfig) -> None:
        super().__init__()
        self.config = config
        self.model = VisionLanguageBackbone(config)
        embeddings = self.model.language.embed_tokens
        self.lm_head = nn.Linear(config.text.hidden_size, config.text.vocab_size, bias=False)
        self.lm_head.weight = embeddings.weight  # tied, as the text model's

    @property
    def base_model(self) -> VisionLanguageBackbone:
        return self.model

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.language.embed_tokens

    def forward(self, input_ids: torch.Tensor, **inputs: Any) -> SimpleNamespace:
        hidden = self.model(input_ids, **inputs).last_hidden_state
        return SimpleNamespace(logits=F.linear(hidden, self.lm_head.weight).float())

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def save_pretrained(self, directory: str | Path, state_dict: dict | None = None, **_: Any):
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / CONFIG_FILE).write_text(json.dumps(self.config.to_dict()))
        torch.save(
            self.state_dict() if state_dict is None else state_dict, directory / WEIGHTS_FILE
        )

    @classmethod
    def from_pretrained(
        cls, directory: str | Path, torch_dtype: torch.dtype | None = None, **_: Any
    ) -> TinyVLM:
        directory = Path(directory)
        config = TinyVLMConfig.from_dict(json.loads((directory / CONFIG_FILE).read_text()))
        model = cls(config)
        model.load_state_dict(torch.load(directory / WEIGHTS_FILE, weights_only=True))
        return model if torch_dtype is None else model.to(torch_dtype)


def build_tiny_vlm(text: Qwen2Config, vision: VisionSettings, seed: int) -> TinyVLM:
    """A freshly initialised VLM whose weights depend only on the configs and `seed`."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return TinyVLM(TinyVLMConfig(text, vision, text.vocab_size))
