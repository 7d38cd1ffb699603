"""A tiny Hugging Face Qwen2-VL built from a config (random init, a 1-block vision tower
over 4-pixel patches, merge 2: a 32×32 picture is 8×8 patches, 16 image tokens), a
byte-level BPE with Qwen-VL's vision tokens and a ChatML template that renders content
lists, its Qwen2-VL image processor (PIL backend), and GeoQA-shaped synthetic items
(count a polygon's sides; four choices), shared by tests/vision and tests/lab.
"""

from __future__ import annotations

import io
import math
import random
from pathlib import Path

import torch

SPECIAL = [
    "<|pad|>",
    "<|im_end|>",
    "<|im_start|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
    "{% endif %}{% endif %}"
)
SIDE = 32  # pixels: 8×8 patches of 4, merged 2×2 into 16 tokens
SIDES = (3, 4, 5, 6)
QUESTION = "图中的多边形有几条边？"
# 09-vision-grpo's instruction around a question (its format_question), for the BPE's merges
INSTRUCTION = (
    "请根据图片解答下面的几何选择题。\n题目：\n选项：\nA. \nB. \nC. \nD. \n"
    "请先进行简单逻辑推理思考，再给出最终答案。"
    "最终选项格式必须是 \\boxed{A}、\\boxed{B}、\\boxed{C} 或 \\boxed{D}。"
)


def polygon(sides: int, seed: int):
    """A SIDE×SIDE RGB PIL picture of a filled regular polygon, rotated by `seed`."""
    from PIL import Image, ImageDraw

    rng = random.Random(seed)
    image = Image.new("RGB", (SIDE, SIDE), (255, 255, 255))
    turn = rng.uniform(0, 2 * math.pi)
    points = [
        (
            16 + 13 * math.cos(turn + 2 * math.pi * k / sides),
            16 + 13 * math.sin(turn + 2 * math.pi * k / sides),
        )
        for k in range(sides)
    ]
    colour = tuple(rng.randrange(0, 160) for _ in range(3))
    ImageDraw.Draw(image).polygon(points, fill=colour)
    return image


def png(image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def geoqa_rows(n: int, seed: int = 0) -> list[dict]:
    """GeoQA's columns (id, image, subject, choices, label): which of four side counts
    the pictured polygon has; the choices are 3..6 in a shuffled order."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        sides = SIDES[i % len(SIDES)]
        choices = list(SIDES)
        rng.shuffle(choices)
        rows.append(
            {
                "id": i,
                "image": polygon(sides, seed * 1000 + i),
                "subject": QUESTION,
                "choices": [str(c) for c in choices],
                "label": choices.index(sides),
            }
        )
    return rows


def write_geoqa(directory: Path, n: int = 8, seed: int = 0) -> Path:
    """`directory/train.parquet` in GeoQA's shape (an `Image` column, as `datasets` writes it)."""
    import datasets

    rows = geoqa_rows(n, seed)
    features = datasets.Features(
        {
            "id": datasets.Value("int64"),
            "image": datasets.Image(),
            "subject": datasets.Value("string"),
            "choices": datasets.Sequence(datasets.Value("string")),
            "label": datasets.Value("int64"),
        }
    )
    directory.mkdir(parents=True, exist_ok=True)
    columns = {k: [r[k] for r in rows] for k in features}
    datasets.Dataset.from_dict(columns, features=features).to_parquet(
        str(directory / "train.parquet")
    )
    return directory


def build_tokenizer(texts: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator([*texts, INSTRUCTION, CHAT_TEMPLATE, QUESTION] * 3, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|pad|>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


VISION_CONFIGS = {
    "qwen2_vl": {"depth": 1, "embed_dim": 32, "hidden_size": 64, "num_heads": 2, "mlp_ratio": 2},
    # Qwen2.5-VL's tower: windowed attention in block 0 (a 16-pixel window: 2×2 merged
    # cells), full attention in block 1, a SwiGLU MLP, the merger out to the text width
    "qwen2_5_vl": {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "out_hidden_size": 64,
        "window_size": 16,
        "fullatt_block_indexes": [1],
    },
}


def build_qwen2_vl(
    directory: Path, seed: int = 0, texts: tuple[str, ...] = (), model_type: str = "qwen2_vl"
) -> Path:
    """Save the tiny Qwen2-VL, or Qwen2.5-VL (model, tokenizer, image processor) into
    `directory`."""
    import transformers
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    names = {"qwen2_vl": "Qwen2VL", "qwen2_5_vl": "Qwen2_5_VL"}[model_type]
    config_class = getattr(transformers, f"{names}Config")
    model_class = getattr(transformers, f"{names}ForConditionalGeneration")

    tokenizer = build_tokenizer(list(texts))
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL}
    config = config_class(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 2048,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [2, 3, 3],
            },
            "pad_token_id": tokenizer.pad_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "bos_token_id": None,
        },
        vision_config={
            **VISION_CONFIGS[model_type],
            "patch_size": 4,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "in_channels": 3,
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    Qwen2VLImageProcessorPil(
        patch_size=4, merge_size=2, temporal_patch_size=2, min_pixels=16 * 16, max_pixels=64 * 64
    ).save_pretrained(directory)
    return directory


# The lab's prompt (09-vision-grpo's build_prompt_chunks), for the warm start ---------------


def lab_question(subject: str, choices: list[str]) -> str:
    """09-vision-grpo's format_question, copied (the script is not importable here)."""
    lines = "\n".join(f"{letter}. {c}" for letter, c in zip("ABCD", choices, strict=True))
    return (
        "请根据图片解答下面的几何选择题。\n"
        f"题目：{subject.strip()}\n"
        f"选项：\n{lines}\n"
        "请先进行简单逻辑推理思考，再给出最终答案。"
        "最终选项格式必须是 \\boxed{A}、\\boxed{B}、\\boxed{C} 或 \\boxed{D}。"
    )


def lab_prompt_chunks(hf_tokenizer, row: dict) -> list:
    """rlvr.service chunks of the lab's chat prompt for `row`: text, the picture, text."""
    from rlvr.service.types import EncodedTextChunk, ImageChunk

    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": lab_question(row["subject"], row["choices"])},
                {"type": "image", "image": "geoqa"},
            ],
        }
    ]
    text = hf_tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    before, after = text.split("<|image_pad|>")
    return [
        EncodedTextChunk(hf_tokenizer.encode(before, add_special_tokens=False)),
        ImageChunk(png(row["image"]), "png", expected_tokens=16),
        EncodedTextChunk(hf_tokenizer.encode(after, add_special_tokens=False)),
    ]


def warm_qwen2_vl(raw: Path, warm: Path, root: Path, steps: int = 100, items: int = 8) -> Path:
    """Fine-tune the raw model through rlvr.service (cross_entropy, full weights) to answer
    the lab's prompt with \\boxed{X}<|im_end|>, X the gold letter or the next one, half
    each: sampled answers are well formed and a group's rewards are mixed."""
    from transformers import AutoTokenizer

    from rlvr.service import AdamParams, Datum, ModelInput, ServiceClient
    from rlvr.service.types import EncodedTextChunk

    tokenizer = AutoTokenizer.from_pretrained(str(raw))
    datums = []
    for row in geoqa_rows(items, seed=1):
        chunks = lab_prompt_chunks(tokenizer, row)
        length = ModelInput(chunks=chunks).length
        gold = row["label"]
        for letter in ("ABCD"[gold], "ABCD"[(gold + 1) % 4]):
            target = tokenizer.encode(f"\\boxed{{{letter}}}<|im_end|>", add_special_tokens=False)
            given = ModelInput(chunks=[*chunks, EncodedTextChunk(target[:-1])])
            inputs = {
                "target_tokens": [0] * (length - 1) + target,
                "weights": [0.0] * (length - 1) + [1.0] * len(target),
            }
            datums.append(Datum(given, inputs))
    trainer = ServiceClient(root=root).create_training_client(str(raw))
    for _ in range(steps):
        trainer.forward_backward(datums, "cross_entropy").result()
        trainer.optim_step(AdamParams(learning_rate=1e-2)).result()
    Path(trainer.save_weights_for_sampler("warm").result().path).rename(warm)
    return warm
