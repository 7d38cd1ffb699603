"""Hugging Face Qwen2-VL and Qwen2.5-VL models by path (issue 46): the model's own vision
tower, merger and language model, with Qwen-VL's multimodal rotary positions (M-RoPE,
Wang et al., arXiv:2409.12191 §2.1):

    text token at 1-D index p after images k < K:  (t, h, w) = p + Σ_{k<K} δ_k
    image K's token at grid cell (i, j):           (t, h, w) = (s, s + i, s + j)
    δ_k = max(H_k, W_k) − H_k·W_k                   (merged grid H_k × W_k, t = 1)

where s is the image's first position. rlvr hands every forward 1-D positions (left-pad
aware); `MropeForward`, the policy's `base_model`, turns them into M-RoPE with the model's
own `get_rope_index` on a prefill or full forward, and on a decode step adds the δ sum
that the prefill stored on the KV cache (as transformers' own generate does, but on the
cache rather than the module, so that concurrent samplers cannot mix their rows).

What does not carry M-RoPE is refused or bypassed, never run wrong: any other
vision-language architecture is refused by name at load time (`check_supported`), and the
multi-turn KV session (which re-lays cached rows on 1-D positions) is not opened for this
model (`rotary_emb.rope_type`): callers re-prefill, as for sliding-window models.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from rlvr.vision.prompts import IMAGE_MARKER, ImagePrompt

MODEL_CLASSES = {
    "qwen2_vl": "Qwen2VLForConditionalGeneration",
    "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
}
"""model_type → transformers class of the vision-language models whose positions rlvr
reproduces (the same M-RoPE rule for images; Qwen2.5-VL's differs for videos only)."""
SUPPORTED = tuple(MODEL_CLASSES)
PROCESSOR_FILE = "preprocessor_config.json"
IMAGE_PAD, VISION_START, VISION_END = "<|image_pad|>", "<|vision_start|>", "<|vision_end|>"
ROPE_DELTAS = "rlvr_mrope_deltas"
"""The KV cache attribute a prefill leaves for the decode steps: each row's Σ δ_k (B, 1)."""


def is_vision_language(source: str | Path) -> bool:
    """Whether the model directory `source` holds a vision-language model (a config
    with a `vision_config`)."""
    try:
        config = json.loads((Path(source) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and "vision_config" in config


def check_supported(source: str | Path, name: str) -> None:
    """Refuse a vision-language model whose positions rlvr does not reproduce."""
    model_type = json.loads((Path(source) / "config.json").read_text()).get("model_type")
    if model_type not in SUPPORTED:
        raise ValueError(
            f"model={name!r} is a vision-language model of type {model_type!r}, which rlvr "
            f"does not support: its image positions and inputs are not reproduced by rlvr's "
            f"forwards; supported: {', '.join(SUPPORTED)} (or model: embedded with an image "
            f"task, the tiny LLaVA-style VLM)"
        )
    if not (Path(source) / PROCESSOR_FILE).is_file():
        raise ValueError(
            f"model={name!r}: the directory has no {PROCESSOR_FILE}, so rlvr cannot turn "
            f"pictures into the model's patches; save the image processor there with "
            f"processor.save_pretrained({name!r})"
        )


UNSAMPLED_LOGIT = -1e9
"""A logit whose token has probability 0 in float32 at any temperature, while p·log p
stays 0 (−inf would make entropies NaN)."""


def placeholder_unsampled(config: Any, logits: torch.Tensor) -> torch.Tensor:
    """`logits` (..., V) with a vision-language model's image placeholder (`image_token_id`
    beside a `vision_config`: Qwen2-VL, Qwen2.5-VL) at `UNSAMPLED_LOGIT`; others as given.
    The placeholder is context that a prompt's picture fills, never a token the policy
    writes (the tiny VLM's lies past its head): a sampled one would be a picture without
    pixels to every later forward, which takes each placeholder for an image's."""
    image_token = getattr(config, "image_token_id", None)
    if image_token is None or getattr(config, "vision_config", None) is None:
        return logits
    index = torch.tensor([int(image_token)], device=logits.device)
    return logits.index_fill(-1, index, UNSAMPLED_LOGIT)


class MropeForward:
    """The policy's `base_model`: Qwen2VLModel called with M-RoPE positions made from
    rlvr's 1-D ones. Not a module (the policy's `model` holds the weights, under the
    checkpoint's own key names); parameters and attributes are the model's."""

    rotary_emb = SimpleNamespace(rope_type="mrope")  # no KV session: see the module doc

    def __init__(self, model: nn.Module, image_token_id: int) -> None:
        self.model, self.image_token_id = model, image_token_id

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cache: Any = None,
        use_cache: bool | None = None,
        pixel_values: torch.Tensor | None = None,
        image_grid_thw: torch.Tensor | None = None,
    ) -> Any:
        past = 0 if cache is None else cache.get_seq_length()
        if past == 0:
            self._check_pixels(input_ids, image_grid_thw)
        if position_ids is None:  # (B, L) 1-D, as rlvr's callers pass them
            position_ids = torch.arange(past, past + input_ids.shape[1], device=input_ids.device)
            position_ids = position_ids.expand(len(input_ids), -1)
        positions = self.positions(input_ids, attention_mask, position_ids, cache, image_grid_thw)
        return self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=positions,
            cache=cache,
            use_cache=use_cache,
            pixel_values=pixel_values,
            image_grid_thw=image_grid_thw,
        )

    def positions(self, input_ids, attention_mask, position_ids, cache, image_grid_thw):
        """(3, B, L) M-RoPE positions; see the module docstring."""
        if cache is not None and cache.get_seq_length() > 0:  # a decode step
            deltas = getattr(cache, ROPE_DELTAS, None)
            if deltas is not None:  # (b, 1); the cache's rows were repeated per sample
                position_ids = position_ids + deltas.repeat_interleave(
                    len(position_ids) // len(deltas), 0
                )
            return position_ids[None].expand(3, -1, -1)
        if image_grid_thw is None:  # text only: t = h = w = the 1-D position
            return position_ids[None].expand(3, -1, -1)
        positions, deltas = self.model.get_rope_index(
            input_ids,
            mm_token_type_ids=(input_ids == self.image_token_id).int(),
            image_grid_thw=image_grid_thw,
            attention_mask=attention_mask,
        )
        if cache is not None:
            setattr(cache, ROPE_DELTAS, deltas)
        return positions

    def _check_pixels(self, input_ids: torch.Tensor, grid: torch.Tensor | None) -> None:
        found = int((input_ids == self.image_token_id).sum())
        given = 0 if grid is None else int(grid.prod(-1).sum()) // self.merge**2
        if found != given:
            raise ValueError(
                f"the batch holds {found} image placeholder tokens but the pixels fill "
                f"{given}: every image prompt must reach the forward as an "
                f"rlvr.vision.ImagePrompt, whose pixels ride with its ids"
            )

    @property
    def merge(self) -> int:
        return int(self.model.config.vision_config.spatial_merge_size)


class QwenVLPolicy(nn.Module):
    """A Qwen2-VL model as an rlvr policy: `model` (Qwen2VLModel) and `lm_head` under the
    checkpoint's key names; `base_model` takes M-RoPE-aware 1-D positions."""

    base_model_prefix = "model"  # as the HF class's (peft scopes weight conversions by it)

    def __init__(self, hf_model: nn.Module, processor_config: dict[str, Any]) -> None:
        super().__init__()
        self.model, self.lm_head = hf_model.model, hf_model.lm_head
        object.__setattr__(self, "_hf", hf_model)  # unregistered: same modules, its save
        self.processor_config = processor_config

    @property
    def config(self) -> Any:
        return self._hf.config

    @property
    def base_model(self) -> MropeForward:
        return MropeForward(self.model, int(self.config.image_token_id))

    @property
    def lora_frozen_modules(self) -> list[str]:
        """Linear layers LoRA leaves alone: the vision tower and its merger (LoRA adapts the
        language side; a full fine-tune trains everything)."""
        return [
            name
            for name, module in self.named_modules()
            if name.startswith("model.visual.") and isinstance(module, nn.Linear)
        ]

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def get_input_embeddings(self) -> nn.Module:
        return self.model.get_input_embeddings()

    def forward(self, input_ids: torch.Tensor, **inputs: Any) -> SimpleNamespace:
        hidden = self.base_model(input_ids, **inputs).last_hidden_state
        return SimpleNamespace(
            logits=placeholder_unsampled(self.config, self.lm_head(hidden).float())
        )

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def save_pretrained(self, directory: str | Path, state_dict: dict | None = None, **_: Any):
        """The Hugging Face model directory (config, safetensors, image processor)."""
        self._hf.save_pretrained(
            str(directory), state_dict=self.state_dict() if state_dict is None else state_dict
        )
        (Path(directory) / PROCESSOR_FILE).write_text(json.dumps(self.processor_config, indent=2))

    @classmethod
    def from_pretrained(
        cls, directory: str | Path, torch_dtype: torch.dtype | None = None, **_: Any
    ) -> QwenVLPolicy:
        import transformers

        model_type = json.loads((Path(directory) / "config.json").read_text())["model_type"]
        model_class = getattr(transformers, MODEL_CLASSES[model_type])
        kwargs = {} if torch_dtype is None else {"dtype": torch_dtype}
        hf_model = model_class.from_pretrained(str(directory), **kwargs)
        processor = json.loads((Path(directory) / PROCESSOR_FILE).read_text())
        return cls(hf_model, processor)


class QwenVLImages:
    """A picture as Qwen-VL's image processor feeds it: (patch rows (t·h·w, D), grid
    (1, 3), image tokens t·h·w / merge²)."""

    def __init__(self, directory: str | Path) -> None:
        from transformers import AutoImageProcessor

        self.processor = AutoImageProcessor.from_pretrained(str(directory), backend="pil")
        self.merge = int(self.processor.merge_size)

    def __call__(self, image: Any) -> tuple[torch.Tensor, torch.Tensor, int]:
        out = self.processor(images=[image.convert("RGB")], return_tensors="pt")
        grid = out["image_grid_thw"]  # (1, 3)
        return out["pixel_values"].float(), grid, int(grid.prod()) // self.merge**2


class QwenVLTokenizer:
    """The model's tokenizer (`text`, rlvr's HFTokenizer, whose interface this one
    forwards), whose `encode_images` turns each `IMAGE_MARKER` of a task's prompt into
    Qwen-VL's <|vision_start|><|image_pad|>×n<|vision_end|> for its picture."""

    def __init__(self, text: Any, images: QwenVLImages, image_token_id: int) -> None:
        found = text.hf_tokenizer.convert_tokens_to_ids(IMAGE_PAD)
        if found != image_token_id:
            raise ValueError(
                f"the tokenizer's {IMAGE_PAD} is id {found}, but the model's config.json "
                f"has image_token_id={image_token_id}"
            )
        self.text, self.images, self.image_token_id = text, images, image_token_id

    def __getattr__(self, name: str) -> Any:
        if name == "text":  # not yet set (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.text, name)

    def encode(self, text: str) -> list[int]:
        return self.text.encode(text)

    def decode(self, ids: Any, skip_special: bool = True) -> str:
        return self.text.decode(ids, skip_special)

    def encode_images(self, text: str, pixel_values: torch.Tensor) -> ImagePrompt:
        """`text` with its k-th marker standing for picture k of `pixel_values`
        (n_images, 3, H, W), values in [0, 1]."""
        from PIL import Image

        parts = text.split(IMAGE_MARKER)
        if len(parts) - 1 != len(pixel_values):
            raise ValueError(
                f"the prompt holds {len(parts) - 1} {IMAGE_MARKER} marker(s) for "
                f"{len(pixel_values)} image(s): {text[:60]!r}"
            )
        ids, rows, grids, spans = self.encode(parts[0]), [], [], []
        for picture, part in zip(pixel_values, parts[1:], strict=True):
            array = (picture.clamp(0, 1) * 255).round().byte().permute(1, 2, 0).numpy()
            patches, grid, n = self.images(Image.fromarray(array))
            ids += self.encode(VISION_START)
            spans.append((len(ids), len(ids) + n))
            ids += [self.image_token_id] * n + self.encode(VISION_END + part)
            rows.append(patches)
            grids.append(grid)
        return ImagePrompt(ids, torch.cat(rows), spans, torch.cat(grids), list(pixel_values))


def load_qwen_vl(source: str, name: str) -> tuple[QwenVLPolicy, QwenVLImages]:
    """The policy (train mode) of the Qwen2-VL directory `source`, and its pictures'
    processor (for `QwenVLTokenizer`)."""
    check_supported(source, name)
    return QwenVLPolicy.from_pretrained(source).train(), QwenVLImages(source)
