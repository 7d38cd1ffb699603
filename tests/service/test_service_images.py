"""Image chunks in the service (issue 46, item 4): a `ModelInput` with an `ImageChunk`
(PNG or JPEG bytes) becomes the VLM's image tokens carrying the picture's pixels, so
sampling, `compute_logprobs`, `forward` and `forward_backward` all see it; a perturbed
picture moves the log-probs after it and no others; `expected_tokens` is checked against
the model's tokens per image; a text model refuses image chunks, naming both."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image
from rounding_testlib import RANDOM_LOGIT_SCALE, forward_terms, reorder_atol

from rlvr.models import CharTokenizer, tiny_qwen2_config
from rlvr.models.tiny import build_tiny_policy
from rlvr.service import Datum, ImageChunk, ModelInput, SamplingParams, TrainingClient
from rlvr.service.images import model_prompt
from rlvr.service.types import EncodedTextChunk
from rlvr.vision import ImagePrompt, VisionSettings, VisionTokenizer
from rlvr.vision.model import build_tiny_vlm

VISION = VisionSettings(image_size=12, patch_size=4, hidden=16, layers=1, heads=2)  # 9 patches
TOKENS_PER_IMAGE = 9  # (12 / 4)² patches, one token each
TEXT = tiny_qwen2_config(
    CharTokenizer().vocab_size, hidden=32, layers=2, heads=2, kv_heads=2, intermediate=64
)


def vlm_client(tmp_path, seed: int = 0) -> TrainingClient:
    tokenizer = VisionTokenizer(CharTokenizer(), VISION.tokens_per_image)
    return TrainingClient(build_tiny_vlm(TEXT, VISION, seed), tokenizer, tmp_path / "root", seed)


def picture(seed: int) -> torch.Tensor:
    """A (3, 12, 12) picture whose values are multiples of 1/255, so PNG keeps them exactly."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (3, 12, 12), generator=generator).float() / 255


def encoded(pixels: torch.Tensor, fmt: str = "png") -> bytes:
    values = (pixels * 255).round().byte().permute(1, 2, 0).contiguous().numpy()
    out = io.BytesIO()
    Image.fromarray(values, "RGB").save(out, format=fmt.upper())
    return out.getvalue()


def image_input(pixels: torch.Tensor, before: str = "Q:", after: str = " 3+4=", **kw) -> ModelInput:
    tok = CharTokenizer()
    chunk = ImageChunk(encoded(pixels), "png", **kw)
    text = [EncodedTextChunk(tok.encode(before)), chunk, EncodedTextChunk(tok.encode(after))]
    return ModelInput(chunks=text)


def test_a_model_input_keeps_its_chunks_in_order() -> None:
    chunk = ImageChunk(b"\x89PNG", "png", expected_tokens=9)
    given = ModelInput(chunks=[EncodedTextChunk([1, 2]), chunk, EncodedTextChunk([3])])
    assert given.tokens == (1, 2, 3) and given.images == ((2, chunk),)
    assert given.chunks == [EncodedTextChunk((1, 2)), chunk, EncodedTextChunk((3,))]
    assert given.length == 2 + 9 + 1
    assert given.append(EncodedTextChunk([4])).chunks[-1] == EncodedTextChunk((3, 4))
    with pytest.raises(ValueError, match=r"holds 1 image chunk\(s\), which are not token ids"):
        given.to_ints()


def test_image_chunks_become_the_pictures_placeholders(tmp_path) -> None:
    client = vlm_client(tmp_path)
    pixels = picture(1)
    ids = model_prompt(image_input(pixels), client.vocab_size, client.images, "m", "prompt")
    # "Q:" (2 tokens), the picture's 9 placeholders, " 3+4=" (5 tokens): what the
    # tokenizer's own `encode_images` makes of the same text with the marker.
    expected = client.tokenizer.encode_images("Q:<image> 3+4=", pixels[None])
    assert isinstance(ids, ImagePrompt) and list(ids) == list(expected)
    assert ids.spans == [(2, 11)] and len(ids) == 16
    assert torch.equal(ids.pixel_values, pixels[None])  # PNG keeps multiples of 1/255


def datum(model_input: ModelInput, targets: list[int]) -> Datum:
    return Datum(model_input, {"target_tokens": targets, "weights": [1.0] * len(targets)})


def test_a_perturbed_picture_moves_exactly_the_log_probs_after_it(tmp_path) -> None:
    client = vlm_client(tmp_path)
    targets = list(range(1, 17))  # any 16 tokens of the vocabulary
    runs = []
    for seed in (1, 2):
        out = client.forward([datum(image_input(picture(seed)), targets)], "cross_entropy")
        runs.append(out.result().loss_fn_outputs[0]["logprobs"].to_torch())
    first, second = runs
    # Positions 0 and 1 ("Q:") come before the picture: the causal forward computes them
    # from the same values in the same order, so they are bitwise equal.
    assert torch.equal(first[:2], second[:2])
    # Every position from the picture on attends to it.
    assert bool((first[2:] != second[2:]).all())


def test_forward_equals_the_vlm_on_the_same_prompt(tmp_path) -> None:
    client = vlm_client(tmp_path)
    pixels = picture(3)
    targets = list(range(1, 17))
    out = client.forward([datum(image_input(pixels), targets)], "cross_entropy").result()
    served = out.loss_fn_outputs[0]["logprobs"].to_torch()
    ids = client.tokenizer.encode_images("Q:<image> 3+4=", pixels[None])
    with torch.no_grad():
        logits = client.model(torch.tensor([ids]), pixel_values=pixels[None]).logits[0]
    direct = torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(targets)[:, None])
    # Two forwards that may add in other orders (the service's packs a one-token prompt
    # and a response): n·ε·M over the text model's chain and the ViT's in front of it
    # (tests/vision/vision_testlib.py, vlm_logprob_atol, spelled out for these settings).
    vision_terms = 3 * 4**2 + (4 * 16 + 2 * 9 + 5 * 16) + 16 + TEXT.hidden_size
    atol = reorder_atol(forward_terms(TEXT) + vision_terms, RANDOM_LOGIT_SCALE)
    assert (served - direct[:, 0]).abs().max() <= atol


def test_forward_backward_trains_the_vision_encoder(tmp_path) -> None:
    client = vlm_client(tmp_path)
    out = client.forward_backward(
        [datum(image_input(picture(4)), list(range(1, 17)))], "cross_entropy"
    )
    assert out.result().metrics["token_count"] == 16
    grads = [p.grad for p in client.model.model.vision.parameters()]
    assert any(g is not None and bool(g.abs().sum() > 0) for g in grads)


def test_sampling_sees_the_picture_as_the_trainer_does(tmp_path) -> None:
    client = vlm_client(tmp_path)
    sampler = client.save_weights_and_get_sampling_client("s")
    prompt = image_input(picture(5))
    params = SamplingParams(max_tokens=4, temperature=1.0, seed=7)
    seq = sampler.sample(prompt, 1, params).result().sequences[0]
    # The sampled tokens scored by the trainer after the same picture: position i of the
    # model input predicts target i; the prompt's positions predict nothing read here.
    n = 16  # "Q:", the 9 image tokens, " 3+4="
    given = ModelInput(chunks=[*prompt.chunks, EncodedTextChunk(seq.tokens[:-1])])
    targets = [0] * (n - 1) + seq.tokens
    out = client.forward([datum(given, targets)], "cross_entropy").result()
    trained = out.loss_fn_outputs[0]["logprobs"].to_torch()[n - 1 :]
    vision_terms = 3 * 4**2 + (4 * 16 + 2 * 9 + 5 * 16) + 16 + TEXT.hidden_size
    atol = reorder_atol(forward_terms(TEXT) + vision_terms, RANDOM_LOGIT_SCALE)
    assert (trained - torch.tensor(seq.logprobs)).abs().max() <= atol
    # compute_logprobs skips the picture's tokens (None) and scores the text around it.
    scored = sampler.compute_logprobs(prompt).result()
    assert len(scored) == 16 and scored[0] is None and scored[2:11] == [None] * 9
    assert all(v is not None for v in scored[11:])


def test_expected_tokens_must_be_the_models(tmp_path) -> None:
    client = vlm_client(tmp_path)
    given = image_input(picture(1), expected_tokens=4)
    with pytest.raises(
        ValueError,
        match=r"^datum 0: model_input: image chunk 0 has expected_tokens=4 but the tiny VLM "
        r"turns a picture into 9 tokens$",
    ):
        client.forward([datum(given, [1] * 16)], "cross_entropy")
    right = image_input(picture(1), expected_tokens=TOKENS_PER_IMAGE)
    client.forward([datum(right, [1] * 16)], "cross_entropy")


def test_bytes_that_are_not_the_format_are_refused(tmp_path) -> None:
    client = vlm_client(tmp_path)
    tok = CharTokenizer()
    bad = ModelInput(chunks=[EncodedTextChunk(tok.encode("Q")), ImageChunk(b"not a png", "png")])
    with pytest.raises(ValueError, match=r"^prompt: image chunk 0 is not a readable png picture"):
        client.compute_logprobs(bad)
    jpeg = ModelInput(chunks=[ImageChunk(encoded(picture(1)), "jpeg")])  # PNG bytes
    with pytest.raises(ValueError, match="is not a readable jpeg picture"):
        client.compute_logprobs(jpeg)
    with pytest.raises(ValueError, match="format='gif'; it must be one of: png, jpeg"):
        client.compute_logprobs(ModelInput(chunks=[ImageChunk(b"GIF89a", "gif")]))


def test_another_size_is_resized_to_the_models_input(tmp_path) -> None:
    client = vlm_client(tmp_path)
    big = torch.rand(3, 24, 24, generator=torch.Generator().manual_seed(0))
    data = encoded(big, "jpeg")
    given = ModelInput(chunks=[ImageChunk(data, "jpeg"), EncodedTextChunk([1])])
    ids = model_prompt(given, client.vocab_size, client.images, "m", "prompt")
    resized = Image.open(io.BytesIO(data)).convert("RGB").resize((12, 12), Image.BICUBIC)
    expected = torch.from_numpy(np.asarray(resized).copy()).float()  # (12, 12, 3)
    assert torch.equal(ids.pixel_values[0], expected.permute(2, 0, 1) / 255)


def test_a_text_model_refuses_image_chunks_naming_both(tmp_path) -> None:
    client = TrainingClient(build_tiny_policy(TEXT, 0), CharTokenizer(), tmp_path / "root", 0)
    given = image_input(picture(1))
    message = (
        r"image chunk 0 \(ImageChunk, format='png'\): image chunks need a vision-language "
        r"model, and Qwen2ForCausalLM is a text model"
    )
    with pytest.raises(ValueError, match="^datum 0: model_input: " + message):
        client.forward_backward([datum(given, [1] * 16)], "cross_entropy")
    sampler = client.save_weights_and_get_sampling_client("s")
    with pytest.raises(ValueError, match="^prompt: " + message):
        sampler.sample(given, 1, SamplingParams(max_tokens=2))


def test_the_sdks_wire_image_chunk_reaches_the_forward(tmp_path) -> None:
    """What the PyTRIO SDK sends for `ImageChunk` (its own JSON serialisation: data as
    base64) becomes the service's chunk and scores as the in-process one does."""
    pytrio = pytest.importorskip("pytrio")
    from pytrio.client.builders.model_input import model_input_to_wire
    from pytrio.types.forward.encoded_text_chunk import EncodedTextChunk as SdkText

    from rlvr.service.pytrio import wire

    tok, pixels = CharTokenizer(), picture(6)
    sdk_input = pytrio.ModelInput(
        chunks=[
            SdkText(tokens=tok.encode("Q:")),
            pytrio.ImageChunk(data=encoded(pixels), format="png", expected_tokens=9),
            SdkText(tokens=tok.encode(" 3+4=")),
        ]
    )
    body = model_input_to_wire(sdk_input).model_dump(mode="json")
    assert isinstance(body["chunks"][1]["data"], str)  # base64 on the JSON wire
    targets = list(range(1, 17))
    payload = {
        "loss": {"type": "cross_entropy"},
        "data": [{"model_input": body, "target_ids": targets}],
    }
    (got,), _, _ = wire.forward_request(payload)
    assert got.model_input == image_input(pixels, expected_tokens=9)
    client = vlm_client(tmp_path)
    served = client.forward([got], "cross_entropy").result().loss_fn_outputs[0]["logprobs"]
    local = client.forward([datum(image_input(pixels), targets)], "cross_entropy").result()
    assert torch.equal(served.to_torch(), local.loss_fn_outputs[0]["logprobs"].to_torch())
    # The SDK object itself, handed to the in-process service, reads the same way.
    direct = client.forward([Datum(sdk_input, got.loss_fn_inputs)], "cross_entropy").result()
    assert torch.equal(served.to_torch(), direct.loss_fn_outputs[0]["logprobs"].to_torch())


@pytest.mark.parametrize(
    ("chunk", "message"),
    [
        ({"type": "image", "data": "%%%", "format": "png"}, "image data must be standard base64"),
        ({"type": "image", "data": "", "format": "png"}, "image data must be the picture's bytes"),
        ({"type": "image", "data": "eA==", "format": "bmp"}, "format='bmp' must be png or jpeg"),
        (
            {"type": "image", "data": "eA==", "format": "png", "expected_tokens": "9"},
            "expected_tokens='9' must be an integer or null",
        ),
    ],
)
def test_a_malformed_wire_image_is_one_line(chunk, message) -> None:
    from rlvr.service.pytrio import wire

    with pytest.raises(wire.WireError, match=message):
        wire.sample_request(
            {"request_id": "r", "prompt": {"chunks": [chunk]}, "sampling_params": {"max_tokens": 1}}
        )
