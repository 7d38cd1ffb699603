"""merged_state_dict: W + (α/r)·B·A under the base model's key names, checked by hand."""

from __future__ import annotations

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from rlvr.models.hf_policy import add_lora, merged_state_dict, reference_policy
from rlvr.models.policy_options import PolicyOptions


def test_merged_weight_is_w_plus_scaled_ba():
    config = Qwen2Config(
        vocab_size=16,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    base_q = model.model.layers[0].self_attn.q_proj.weight.detach().clone()  # (8, 8)
    options = PolicyOptions.from_dict(
        {"lora": {"rank": 2, "alpha": 4, "target_modules": ["q_proj"]}}
    )
    model = add_lora(model, options)
    q = model.model.layers[0].self_attn.q_proj
    with torch.no_grad():
        q.lora_A["default"].weight.fill_(1.0)  # A (2, 8) of ones
        q.lora_B["default"].weight.fill_(0.5)  # B (8, 2) of halves
    merged = merged_state_dict(model)
    # (B·A)[i, j] = Σ_k 0.5·1 over r=2 → 1.0; scaled by α/r = 4/2 = 2 → every entry + 2.0
    assert torch.allclose(merged["model.layers.0.self_attn.q_proj.weight"], base_q + 2.0)
    assert not any("lora_" in k or "base_layer" in k for k in merged)
    assert set(merged) == set(Qwen2ForCausalLM(config).state_dict())
    assert reference_policy(model).model is model
