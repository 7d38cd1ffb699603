"""Text-only paths are unchanged by the image hooks (issue 46): a text model's backbone is
called with exactly the arguments it always had, never a `pixel_values`, on every path
the hooks touch (the engine's generic decode and its scorer, the KV session, the
trainer's generic forward); rlvr's lean Llama loop, which cannot take pixels, refuses
image prompts."""

from __future__ import annotations

import pytest
import torch
from vision_testlib import TOK as VISION_TOK
from vision_testlib import images

from rlvr.models import CharTokenizer, build_tiny_policy, tiny_qwen2_config
from rlvr.models.logprobs import response_hidden_states
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.kv_session import open_session

TOK = CharTokenizer()


def test_a_text_model_never_sees_an_image_argument():
    config = tiny_qwen2_config(TOK.vocab_size, hidden=32, layers=1, heads=2, kv_heads=2)
    model = build_tiny_policy(config, seed=0)
    calls: list[set[str]] = []
    model.base_model.register_forward_pre_hook(
        lambda _, args, kwargs: calls.append(set(kwargs)), with_kwargs=True
    )
    engine = HFEngine(model, TOK, static_cache=False)  # the generic path the hooks touch
    prompts = [TOK.encode("Q: 1+2=? A:"), TOK.encode("Q: 3=? A:")]
    params = SamplingParams(group_size=2, max_new_tokens=3)
    gen = engine.generate_ids(prompts, params, torch.Generator())
    engine.score_ids(prompts, [[5, 6], [7]])
    session = open_session(engine)
    first = session.generate_ids(prompts, params, torch.Generator())
    contexts = [p + first.response_ids[2 * i].tolist() for i, p in enumerate(prompts)]
    step = SamplingParams(group_size=1, max_new_tokens=2)
    session.generate_ids(contexts, step, torch.Generator(), rows=[0, 2])
    decoding = {"input_ids", "attention_mask", "position_ids", "use_cache", "cache"}
    assert calls and all(c == decoding for c in calls)
    calls.clear()
    # The generic forward (a Llama-family policy's goes through rlvr.models.fused_llama).
    response_hidden_states(model.base_model, gen.prompt_ids, gen.response_ids, gen.response_mask, 0)
    assert calls == [{"input_ids", "attention_mask", "position_ids", "use_cache"}]


def test_the_lean_text_loop_refuses_image_prompts():
    config = tiny_qwen2_config(TOK.vocab_size, hidden=32, layers=1, heads=2, kv_heads=2)
    engine = HFEngine(build_tiny_policy(config, seed=0), VISION_TOK)  # rlvr's lean loop
    prompt = VISION_TOK.encode_images("<image>?", images(1, seed=0)[0])
    with pytest.raises(ValueError, match="decodes through rlvr's text-only lean loop"):
        engine.generate_ids([prompt], SamplingParams(group_size=1), torch.Generator())
