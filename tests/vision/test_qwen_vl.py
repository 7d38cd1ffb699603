"""A Hugging Face Qwen2-VL loaded by path (rlvr.vision.qwen_vl) on the tiny one of
qwen_vl_testlib: rlvr's forwards (the trainer's full forward on a left-padded batch, and
the sampler's prefill + KV-cached decode steps) reproduce the model's own forward with its
multimodal rotary positions; pixels reach every forward and only their own rows; LoRA
adapts the language side only; a saved policy reloads as it was; other vision-language
architectures are refused by name."""

from __future__ import annotations

import io
import json
import math
import shutil
import warnings
from types import SimpleNamespace

import pytest
import torch
from PIL import Image
from qwen_vl_testlib import build_qwen2_vl
from rounding_testlib import RANDOM_LOGIT_SCALE, forward_terms, reorder_atol

from rlvr.envs.base import Environment, Reply
from rlvr.envs.budgets import EpisodeBudgets
from rlvr.models import lm_head_logits, response_logprobs
from rlvr.models.hf_policy import add_lora, load_adapter, lora_layers, save_adapter
from rlvr.models.load import load_pretrained
from rlvr.models.policy_options import LoraOptions, PolicyOptions
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.hf_engine import HFEngine, sample_next
from rlvr.rollout.kv_session import open_session
from rlvr.vision.prompts import ImagePrompt
from rlvr.vision.qwen_vl import UNSAMPLED_LOGIT, placeholder_unsampled


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    directory = build_qwen2_vl(tmp_path_factory.mktemp("qwen2vl") / "model")
    policy, tokenizer, _ = load_pretrained(str(directory))
    sharpen(policy)
    return directory, policy.eval(), tokenizer


def sharpen(policy) -> None:
    """Scale the language model's query and key projections 8×: random init attends almost
    uniformly, so positions hardly matter; sharper attention makes a wrong position rule
    move log-probs far past the tolerance (the RMS-normalised head's logit scale, M in
    the tolerance, is unchanged)."""
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if name.startswith("model.language_model.") and ("q_proj" in name or "k_proj" in name):
                p.mul_(8)


def pictures(seed: int) -> list[torch.Tensor]:
    """Two pictures in [0, 1]: 32×32 (8×8 patches, 16 tokens) and 32×48 (8×12, 24 tokens)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(1, 3, 32, 32, generator=g), torch.rand(1, 3, 32, 48, generator=g)]


def prompts(tokenizer, images) -> list[ImagePrompt]:
    # Different text lengths before the picture: the batch is left-padded.
    return [
        tokenizer.encode_images("Look: <image> how many sides? A:", images[0]),
        tokenizer.encode_images("<image>sides?", images[1]),
    ]


def qwen_logprob_atol(policy, positions: int) -> float:
    """Two float32 forwards that add in other orders: n·ε·M (rounding_testlib.py) with n the
    language model's chain (`forward_terms`) plus the vision tower's in front of it: the
    patch embedding (C·t·p² terms), per block q/k/v and output projections (embed each),
    softmax and weighted sum over at most P patches, the MLP (embed, its inner width),
    then the merger (embed·merge², its output width). M: a random tiny model's logit
    scale."""
    v = policy.config.vision_config
    patches = 8 * 12
    embed = getattr(v, "embed_dim", v.hidden_size)  # Qwen2.5-VL names it hidden_size
    inner = getattr(v, "intermediate_size", None) or v.mlp_ratio * embed
    out = getattr(v, "out_hidden_size", v.hidden_size)
    block = 4 * embed + 2 * patches + embed + inner
    merger = embed * v.spatial_merge_size**2 + out
    vision = v.in_channels * v.temporal_patch_size * v.patch_size**2 + v.depth * block + merger
    terms = forward_terms(policy.config.text_config, positions) + int(vision)
    return reorder_atol(terms, RANDOM_LOGIT_SCALE)


def own_forward_logprobs(policy, prompt: ImagePrompt, response: list[int]) -> torch.Tensor:
    """log π of `response` after `prompt` by the Hugging Face model's own forward (its
    get_rope_index from mm_token_type_ids, as its processor's outputs drive it), one row."""
    ids = torch.tensor([[*prompt, *response]])
    with torch.no_grad():
        logits = policy._hf(
            input_ids=ids,
            pixel_values=prompt.pixel_values,
            image_grid_thw=prompt.image_grid_thw,
            mm_token_type_ids=(ids == policy.config.image_token_id).int(),
        ).logits[0, len(prompt) - 1 : -1]
    logits = placeholder_unsampled(policy.config, logits.float())  # rlvr's one departure
    return logits.log_softmax(-1).gather(-1, torch.tensor(response)[:, None])[:, 0]


RESPONSES = [[40, 41, 42, 43], [50, 51, 52, 53]]


def test_rlvr_forwards_reproduce_the_models_own_multimodal_positions(qwen):
    _, policy, tokenizer = qwen
    assert_own_positions(policy, tokenizer)


def test_a_qwen2_5_vl_loads_too_with_the_same_positions_and_language_side_lora(tmp_path):
    directory = build_qwen2_vl(tmp_path / "model", model_type="qwen2_5_vl")
    policy, tokenizer, _ = load_pretrained(str(directory))
    sharpen(policy)
    assert_own_positions(policy.eval(), tokenizer)
    model = add_lora(policy, PolicyOptions(lora=LoraOptions(rank=2, alpha=4)))
    adapted = [n for n, m in model.named_modules() if m in set(lora_layers(model))]
    assert adapted and all(n.startswith("model.language_model.") for n in adapted)


def assert_own_positions(policy, tokenizer) -> None:
    """The trainer's forward and the sampler's prefill + decode equal the model's own
    forward within the derived bound; rlvr's 1-D text rule would not."""
    rows = prompts(tokenizer, pictures(0))
    assert rows[0].spans[0][1] - rows[0].spans[0][0] == 16  # 32×32: 64 patches / 2²
    assert rows[1].spans[0][1] - rows[1].spans[0][0] == 24  # 32×48: 96 patches / 2²
    expected = torch.stack(
        [own_forward_logprobs(policy, p, r) for p, r in zip(rows, RESPONSES, strict=True)]
    )
    atol = qwen_logprob_atol(policy, max(map(len, rows)) + 4)
    trainer = response_logprobs(policy, rows, torch.tensor(RESPONSES), torch.ones(2, 4), 0)
    torch.testing.assert_close(trainer, expected, atol=atol, rtol=0)
    # The sampler's path: a prefill, then decode steps whose positions add the stored δ.
    sampler = HFEngine(policy, tokenizer).score_ids(rows, RESPONSES)
    torch.testing.assert_close(torch.stack(sampler), expected, atol=atol, rtol=0)
    # 1-D positions (rlvr's text rule) would be another model: the check can fail.
    with torch.no_grad():
        text_rule = policy.base_model.model(
            input_ids=torch.tensor([[*rows[1], *RESPONSES[1]]]),
            pixel_values=rows[1].pixel_values,
            image_grid_thw=rows[1].image_grid_thw,
            position_ids=torch.arange(len(rows[1]) + 4)[None],
        ).last_hidden_state
    logits = policy.lm_head(text_rule)[0, len(rows[1]) - 1 : -1].log_softmax(-1)
    wrong = logits.gather(-1, torch.tensor(RESPONSES[1])[:, None])[:, 0]
    assert (wrong - expected[1]).abs().max() > 10 * atol


def test_a_picture_moves_only_its_own_rows_log_probs(qwen):
    _, policy, tokenizer = qwen
    images = pictures(0)
    changed = [images[0], images[1].clone()]
    changed[1][0, :, :4, :4] = 1 - changed[1][0, :, :4, :4]  # one patch of picture 1
    args = (torch.tensor(RESPONSES), torch.ones(2, 4), 0)
    before = response_logprobs(policy, prompts(tokenizer, images), *args)
    after = response_logprobs(policy, prompts(tokenizer, changed), *args)
    assert torch.equal(before[0], after[0])  # row 0's picture and text are the same
    assert not torch.equal(before[1], after[1])


def test_the_sampler_runs_through_the_models_own_forward_without_a_kv_session(qwen):
    _, policy, tokenizer = qwen
    engine = HFEngine(policy, tokenizer)
    assert engine._static is None  # not a Llama-family model: the generic DynamicCache path
    assert open_session(engine) is None  # its cache re-lays 1-D positions: callers re-prefill


def test_lora_adapts_the_language_side_only_and_learns_through_the_picture(qwen):
    directory, _, tokenizer = qwen
    policy, _, _ = load_pretrained(str(directory))
    sharpen(policy)
    model = add_lora(policy, PolicyOptions(lora=LoraOptions(rank=2, alpha=4)))
    adapted = [n for n, m in model.named_modules() if m in set(lora_layers(model))]
    assert adapted and all(n.startswith("model.language_model.") for n in adapted)
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trained and all(".lora_" in n for n in trained)
    for name, p in model.named_parameters():  # B starts at 0: give the adapters an effect
        if "lora_B" in name:
            p.data.normal_(0, 0.3, generator=torch.Generator().manual_seed(3))
    logprobs = response_logprobs(
        model, prompts(tokenizer, pictures(1)), torch.tensor(RESPONSES), torch.ones(2, 4), 0
    )
    logprobs.sum().backward()
    grads = [p.grad for n, p in model.named_parameters() if p.requires_grad]
    assert all(g is not None for g in grads) and any(g.abs().sum() > 0 for g in grads)


def test_a_qwen2_vl_adapter_saves_adapters_only_without_peft_warning(qwen, tmp_path):
    # peft's "auto" copied the embeddings and LM head into every save, warning "Setting
    # `save_embedding_layers` to `True` …" (the resolved all-linear names hold lm_head).
    from safetensors.torch import load_file

    directory, _, _ = qwen
    policy, _, _ = load_pretrained(str(directory))
    model = add_lora(policy, PolicyOptions(lora=LoraOptions(rank=2, alpha=4)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        save_adapter(model, tmp_path / "adapter")
    saved = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    assert saved and all(".lora_" in k for k in saved)
    load_adapter(model, tmp_path / "adapter")  # reads back its own save


def test_a_saved_policy_reloads_with_its_weights_and_image_processor(qwen, tmp_path):
    _, policy, tokenizer = qwen
    policy.save_pretrained(tmp_path / "saved")
    tokenizer.save(tmp_path / "saved")
    again, tokenizer_again, _ = load_pretrained(str(tmp_path / "saved"))
    rows = prompts(tokenizer_again, pictures(2))
    args = (torch.tensor(RESPONSES), torch.ones(2, 4), 0)
    assert torch.equal(
        response_logprobs(again.eval(), rows, *args), response_logprobs(policy, rows, *args)
    )


def test_another_vision_language_architecture_is_refused_by_name(qwen, tmp_path):
    directory, _, _ = qwen
    shutil.copytree(directory, tmp_path / "llava")
    config = json.loads((tmp_path / "llava" / "config.json").read_text())
    config["model_type"] = "llava"
    (tmp_path / "llava" / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        ValueError,
        match=r"is a vision-language model of type 'llava', which rlvr does not support: .*"
        r"supported: qwen2_vl",
    ):
        load_pretrained(str(tmp_path / "llava"))


def test_the_service_counts_a_pictures_tokens_with_the_models_image_processor(qwen, tmp_path):
    from rlvr.service import Datum, ModelInput, ServiceClient
    from rlvr.service.types import EncodedTextChunk, ImageChunk

    directory, _, _ = qwen
    client = ServiceClient(root=tmp_path).create_training_client(str(directory))
    buffer = io.BytesIO()
    Image.new("RGB", (48, 32), (200, 30, 30)).save(buffer, format="PNG")  # 8×12 patches

    def datum(expected: int) -> Datum:
        chunks = [EncodedTextChunk([50, 60]), ImageChunk(buffer.getvalue(), "png", expected)]
        given = ModelInput(chunks=[*chunks, EncodedTextChunk([70])])
        length = 2 + expected + 1
        return Datum(given, {"target_tokens": [8] * length, "weights": [1.0] * length})

    with pytest.raises(
        ValueError,
        match=r"image chunk 0 has expected_tokens=16 but qwen2_vl turns a picture into 24 "
        r"tokens$",
    ):
        client.forward([datum(16)], "cross_entropy")
    out = client.forward([datum(24)], "cross_entropy").result()  # 96 patches / 2² = 24
    assert len(out.loss_fn_outputs[0]["logprobs"].tolist()) == 2 + 24 + 1
    pad = client.get_tokenizer().image_token_id  # in a Qwen-VL's vocabulary, unlike the tiny VLM's
    with pytest.raises(ValueError, match=rf"token 1 of a text chunk is {pad}, qwen2_vl's image"):
        client.compute_logprobs(ModelInput.from_ints([50, pad, 60]))


class Vowel(Environment):
    """Hears each turn that ends at a vowel (a random model's tokens often hold one) and
    answers "7": an observation the policy never sampled."""

    stop = ("a", "e", "i", "o")

    def step(self, turn: str) -> Reply:
        return Reply(observation="7")


def test_episodes_from_an_image_prompt_train_through_their_picture(qwen, tmp_path):
    from rlvr.service import ModelInput, SamplingParams, ServiceClient, episode_datum
    from rlvr.service.types import EncodedTextChunk, ImageChunk

    directory, policy, _ = qwen
    trainer = ServiceClient(root=tmp_path).create_training_client(str(directory))
    sampler = trainer.save_weights_and_get_sampling_client("episodes")
    picture = Image.fromarray((pictures(3)[0][0] * 255).byte().permute(1, 2, 0).numpy())
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    chunks = [EncodedTextChunk([50, 60]), ImageChunk(buffer.getvalue(), "png", 16)]
    prompt = ModelInput(chunks=[*chunks, EncodedTextChunk([70])])
    params = SamplingParams(max_tokens=12, seed=1)
    budgets = EpisodeBudgets(max_turns=3)
    episodes = sampler.sample_episodes(prompt, 4, params, Vowel, budgets).result().episodes
    assert sum(sum(e.observation_mask) for e in episodes) > 0  # some turn was heard
    datums = [episode_datum(prompt, e, 1.0, "importance_sampling") for e in episodes]
    assert all(d.model_input.images for d in datums)  # the picture stays in the datum
    out = trainer.forward(datums, "importance_sampling").result()
    atol = qwen_logprob_atol(policy, prompt.length + 12)
    for episode, result in zip(episodes, out.loss_fn_outputs, strict=True):
        scored = result["logprobs"].tolist()[prompt.length - 1 :]
        for taken, mine, own in zip(episode.policy_mask, episode.logprobs, scored, strict=True):
            if taken:  # the trainer's log-prob of the sampler's token: ratio 1 within atol
                assert abs(mine - own) <= atol


def test_the_picture_placeholders_embedding_gets_no_gradient_and_the_vision_tower_does(qwen):
    directory, _, tokenizer = qwen
    policy, _, _ = load_pretrained(str(directory))  # a full fine-tune: everything trains
    logprobs = response_logprobs(
        policy, prompts(tokenizer, pictures(4)), torch.tensor(RESPONSES), torch.ones(2, 4), 0
    )
    logprobs.sum().backward()
    embeddings = policy.get_input_embeddings().weight.grad
    assert embeddings[policy.config.image_token_id].abs().sum() == 0  # context, never read
    assert embeddings[RESPONSES[0][0]].abs().sum() > 0  # a text token that is read
    vision = [p.grad for n, p in policy.named_parameters() if n.startswith("model.visual.")]
    assert all(g is not None for g in vision) and any(g.abs().sum() > 0 for g in vision)


def test_rlvr_eval_with_k_on_a_qwen2_vl_directory(qwen, capsys):
    from rlvr.cli import main

    directory, _, _ = qwen
    args = ["eval", "--model", str(directory), "--task", "shapes", "--size", "3", "--k", "2"]
    code = main([*args, "--max-new-tokens", "3", "--set", "policy.chat_template=true", "--json"])
    assert code == 0
    out = capsys.readouterr().out
    metrics = json.loads(out[out.index("{") :])
    assert metrics["eval/items"] == 3 and metrics["eval/k"] == 2
    assert 1 <= metrics["eval/mean_tokens"] <= 3 and 0 <= metrics["eval/pass@2"] <= 1


def test_the_image_placeholder_is_never_sampled(qwen):
    """A sampled <|image_pad|> would be a picture without pixels to every later forward
    (`rlvr train --task shapes --model DIR` on the tiny random Qwen2-VL stopped at its first
    reference forward: "578 image placeholder tokens but the pixels fill 576"). rlvr's
    logits give it UNSAMPLED_LOGIT, in the trainer's head and the model's own forward alike."""
    _, policy, _ = qwen
    image = policy.config.image_token_id
    hidden = torch.randn(2, 3, policy.config.text_config.hidden_size)
    logits = lm_head_logits(policy, hidden, fp32_head=True)  # (2, 3, V)
    assert (logits[..., image] == UNSAMPLED_LOGIT).all()
    assert (logits[..., :image] != UNSAMPLED_LOGIT).all()
    ids = torch.tensor([[40, 41, 42]])
    with torch.no_grad():
        assert (policy(ids).logits[..., image] == UNSAMPLED_LOGIT).all()


def test_a_dominant_placeholder_logit_is_never_drawn_and_entropy_stays_finite():
    # Logits (0, 0, 50, 0, 0) with the placeholder at index 2: unmasked it takes
    # e^50 / (e^50 + 4) ≈ 1 of the mass. Masked to −1e9 its probability is
    # exp(−1e9 − log 4) = 0 in float32 even at temperature 0.5, and the other four share
    # it equally: each draw's log-prob is −log 4 and the entropy log 4, with 0·log 0 = 0.
    config = SimpleNamespace(image_token_id=2, vision_config={})
    dominant = torch.zeros(1000, 5)
    dominant[:, 2] = 50.0
    masked = placeholder_unsampled(config, dominant)
    assert dominant[0, 2] == 50.0  # the input is not written to
    params = SamplingParams(temperature=0.5)
    tokens, logprobs = sample_next(masked, params, torch.Generator().manual_seed(0))
    assert not (tokens == 2).any()
    # −log 4 through log_softmax: a float32 rounding of a value of magnitude 1.4, 2 ulp
    torch.testing.assert_close(logprobs, torch.full((1000,), -math.log(4)), atol=3e-7, rtol=0)
    log_p = (masked / params.temperature).log_softmax(-1)
    entropy = -(log_p.exp() * log_p).sum(-1)
    torch.testing.assert_close(entropy, torch.full((1000,), math.log(4)), atol=3e-7, rtol=0)
    text = SimpleNamespace(image_token_id=2)  # no vision_config: a text model's logits
    assert placeholder_unsampled(text, dominant) is dominant


def test_the_completions_log_draws_a_qwen_vl_prompts_picture_not_its_patches(qwen):
    # `rlvr train --task shapes --model DIR` stopped at its first logged completions:
    # "an image must be (channels, height, width) …, got shape (96,)", a row of patches.
    from rlvr.runlog.completions import prompt_images

    _, _, tokenizer = qwen
    picture = pictures(0)[1]  # (1, 3, 32, 48)
    # ImagePrompt + ids keeps the images (unpacking would make a plain list)
    prompt = tokenizer.encode_images("<image>sides?", picture) + [40, 41]  # noqa: RUF005
    (record,) = prompt_images(prompt)["images"]
    assert (record["width"], record["height"]) == (48, 32)  # the picture, not 8×12 patches
    patches_only = ImagePrompt(
        list(prompt), prompt.pixel_values, prompt.spans, prompt.image_grid_thw
    )
    assert prompt_images(patches_only) == {}  # nothing drawable (a service prompt)


def test_rlvr_train_on_shapes_with_a_qwen2_vl_directory_logs_its_pictures(qwen, tmp_path):
    """docs/vision.md's Qwen2-VL command, shortened: one GRPO step with LoRA and the chat
    template, its completions logged with the pictures the model saw (24×24)."""
    from rlvr.cli import main

    directory, _, _ = qwen
    out = tmp_path / "run"
    args = ["train", "--recipe", "grpo", "--task", "shapes", "--model", str(directory)]
    args += ["--set", "policy.lora.rank=4", "--set", "policy.chat_template=true"]
    args += ["--steps", "1", "--prompts-per-step", "2", "--group-size", "2", "--eval-size", "2"]
    args += ["--set", "max_new_tokens=4", "--set", "completions_every=1", "--out", str(out)]
    assert main([*args, "--set", "progress=false"]) == 0
    rows = [json.loads(line) for f in (out / "completions").glob("*.jsonl") for line in f.open()]
    assert rows and all(
        [(i["width"], i["height"]) for i in row["images"]] == [(24, 24)] for row in rows
    )
