"""The model's own logit processing (Gemma-2 soft-capping, Cohere logit_scale, Granite
logits_scaling) is applied where rlvr computes logits from hidden states; a model with
processing rlvr does not know is refused at load time (issue 9)."""

import pytest
import torch
from rounding_testlib import logprob_atol
from transformers import (
    CohereConfig,
    CohereForCausalLM,
    Gemma2Config,
    Gemma2ForCausalLM,
    GraniteConfig,
    GraniteForCausalLM,
    Qwen2ForCausalLM,
)

from rlvr.models import (
    CharTokenizer,
    build_tiny_policy,
    load_pretrained,
    response_logprobs,
    tiny_qwen2_config,
)
from rlvr.models.load import check_logits_match

PAD = 0
SMALL = {
    "vocab_size": 24,
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "bos_token_id": None,
}


def tiny(model_cls, config_cls, **attributes):
    config = config_cls(**SMALL, **attributes)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = model_cls(config).eval()
    with torch.no_grad():  # large logits, so that a cap or a scale changes the log-probs
        model.get_output_embeddings().weight.mul_(20.0)
    return model


MODELS = {
    "gemma2_softcap": lambda: tiny(
        Gemma2ForCausalLM, Gemma2Config, head_dim=8, final_logit_softcapping=0.5
    ),
    "cohere_logit_scale": lambda: tiny(CohereForCausalLM, CohereConfig, logit_scale=0.0625),
    "granite_logits_scaling": lambda: tiny(GraniteForCausalLM, GraniteConfig, logits_scaling=8.0),
}


@pytest.mark.parametrize("fp32_head", [True, False])
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_logprobs_equal_the_models_own_logits(kind, fp32_head):
    model = MODELS[kind]()
    prompt_ids = [[5, 6, 7], [8]]
    response_ids = torch.tensor([[11, 12, 1], [13, 1, PAD]])
    response_mask = torch.tensor([[1.0, 1, 1], [1, 1, 0]])
    got = response_logprobs(
        model, prompt_ids, response_ids, response_mask, PAD, temperature=0.7, fp32_head=fp32_head
    )
    with torch.no_grad():
        for b, prompt in enumerate(prompt_ids):
            n = int(response_mask[b].sum())
            row = torch.tensor([prompt + response_ids[b, :n].tolist()])
            logits = model(row).logits[0, len(prompt) - 1 : -1].float() / 0.7
            expected = logits.log_softmax(-1).gather(-1, response_ids[b, :n, None])[:, 0]
            # A padded batch and one row add in other orders: τ / 0.7 (rounding_testlib.py).
            tau = logprob_atol(model.config) / 0.7
            torch.testing.assert_close(got[b, :n].detach(), expected, atol=tau, rtol=0)
    check_logits_match(model, kind)  # and the load-time check accepts it


class ScaledQwen2(Qwen2ForCausalLM):
    """A stub for an unknown model: its forward multiplies the logits by a config value."""

    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        out.logits = out.logits * self.config.lm_head_multiplier
        return out


def test_unknown_logit_processing_is_refused_naming_the_attribute():
    config = tiny_qwen2_config(vocab_size=24, hidden=16, layers=1, heads=2, kv_heads=1)
    config.lm_head_multiplier = 3.0
    torch.manual_seed(0)
    model = ScaledQwen2(config)
    with pytest.raises(ValueError, match=r"not supported.*lm_head_multiplier"):
        check_logits_match(model, "stub")


def test_load_pretrained_runs_the_check(tmp_path, monkeypatch):
    tokenizer = CharTokenizer()
    config = tiny_qwen2_config(tokenizer.vocab_size, hidden=16, layers=1, heads=2, kv_heads=1)
    config.lm_head_multiplier = 3.0
    build_tiny_policy(config, seed=0).save_pretrained(tmp_path)
    tokenizer.save(tmp_path)
    load_pretrained(str(tmp_path))  # plain Qwen2: accepted
    original = Qwen2ForCausalLM.forward

    def scaled_forward(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        out.logits = out.logits * self.config.lm_head_multiplier
        return out

    monkeypatch.setattr(Qwen2ForCausalLM, "forward", scaled_forward)
    with pytest.raises(ValueError, match="lm_head_multiplier"):
        load_pretrained(str(tmp_path))
