"""The embedded tiny Qwen2: size, tied embeddings, determinism from the seed."""

import pytest
import torch

from rlvr.models import build_tiny_policy, count_parameters, tiny_qwen2_config


def test_default_size_and_tied_embeddings():
    model = build_tiny_policy(tiny_qwen2_config(vocab_size=98), seed=0)
    # per layer: q,k,v (3·128·128 + 3·128 bias) + o (128·128) + mlp (3·128·512) + 2 norms (256)
    #   = 49152 + 384 + 16384 + 196608 + 256 = 262784; × 4 = 1051136
    # + embeddings 98·128 = 12544 (tied with the head) + final norm 128 = 1063808
    assert count_parameters(model) == 1_063_808
    assert model.lm_head.weight is model.model.embed_tokens.weight


def test_weights_depend_only_on_seed():
    config = tiny_qwen2_config(vocab_size=98, hidden=32, layers=1, heads=2, kv_heads=2)
    state = torch.get_rng_state()
    a, b = build_tiny_policy(config, 3), build_tiny_policy(config, 3)
    assert torch.equal(state, torch.get_rng_state())  # the caller's RNG stream is untouched
    c = build_tiny_policy(config, 4)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(a.parameters(), c.parameters(), strict=True))


def test_incompatible_heads_are_rejected():
    with pytest.raises(ValueError, match="divisible"):
        tiny_qwen2_config(vocab_size=98, hidden=130, heads=4)
