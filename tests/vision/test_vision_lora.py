"""LoRA on the tiny VLM (`policy.lora`, the service's LoRA clients): peft's causal-LM
wrapper needs `prepare_inputs_for_generation`, which TinyVLM lacks; the adapters attach
anyway, only they train, and the pictures reach them."""

from __future__ import annotations

import torch
from vision_testlib import TOK, images, small_vlm

from rlvr.models import response_logprobs
from rlvr.models.hf_policy import add_lora, lora_layers
from rlvr.models.policy_options import LoraOptions, PolicyOptions


def test_lora_attaches_to_the_tiny_vlm_and_trains_only_adapters_through_the_picture():
    model = add_lora(small_vlm(), PolicyOptions(lora=LoraOptions(rank=2, alpha=4)))
    assert lora_layers(model)
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trained and all(".lora_" in n for n in trained)
    for name, p in model.named_parameters():  # B starts at 0: give the adapters an effect
        if "lora_B" in name:
            p.data.normal_(0, 0.3, generator=torch.Generator().manual_seed(3))
    pixels = images(2, seed=1)
    ids = torch.tensor([[20, 21]])
    mask = torch.ones(1, 2)
    logprobs = [
        response_logprobs(model, [TOK.encode_images("<image>N:", p)], ids, mask, 0) for p in pixels
    ]
    assert not torch.equal(logprobs[0], logprobs[1])  # the picture reaches the forward
    logprobs[0].sum().backward()
    grads = [p.grad for n, p in model.named_parameters() if p.requires_grad]
    assert all(g is not None for g in grads) and any(g.abs().sum() > 0 for g in grads)
