"""`engine_options: {compile: true}`: the decode step through `torch.compile` equals the
eager step within float tolerance, samples what the eager loop samples from the same
generator, compiles once for every batch size and cache width, and is refused or
warned about where it cannot take effect."""

import shutil

import pytest
import torch
from rounding_testlib import logprob_atol
from transformers import GPT2Config, GPT2LMHeadModel

from rlvr.models import CharTokenizer, build_tiny_policy, tiny_qwen2_config
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.train.config import resolve_config

PROMPTS = ["Q: 37+85=? A:", "Q: 1+2=? A:", "Q: 99+9=? A:"]  # different lengths: left padding

needs_compiler = pytest.mark.skipif(
    not (shutil.which("g++") or shutil.which("c++")),
    reason="torch.compile (inductor) builds C++ kernels on CPU and needs a C++ compiler",
)


@pytest.fixture(scope="module")
def tokenizer():
    return CharTokenizer()


@pytest.fixture(scope="module")
def engines(tokenizer):
    """An eager and a compiled engine over the same tiny Qwen2 (one compilation)."""
    model = build_tiny_policy(tiny_qwen2_config(tokenizer.vocab_size), seed=0)
    return HFEngine(model, tokenizer), HFEngine(model, tokenizer, compile=True)


@needs_compiler
def test_compiled_decode_samples_as_the_eager_loop(engines):
    eager, compiled = engines
    counts = []
    frames = torch._dynamo.utils.counters["stats"]
    # Batches of 3·4 and 2·5 rows, budgets 9 and 14: one compilation must serve both.
    for prompts, group, budget in ((PROMPTS, 4, 9), (PROMPTS[:2], 5, 14)):
        params = SamplingParams(group_size=group, temperature=0.8, max_new_tokens=budget)
        runs = [
            engine.generate(prompts, params, torch.Generator().manual_seed(3))
            for engine in (eager, compiled)
        ]
        torch.testing.assert_close(runs[1].response_mask, runs[0].response_mask)
        assert torch.equal(runs[1].response_ids, runs[0].response_ids)
        # Compiled kernels add in other orders: log-probs of logits / 0.8 within τ / 0.8
        # (rounding_testlib.logprob_atol); a sampled token that flipped would change the ids.
        tau = logprob_atol(eager.model.config) / 0.8
        torch.testing.assert_close(
            runs[1].sampler_logprobs, runs[0].sampler_logprobs, atol=tau, rtol=0
        )
        counts.append(frames["unique_graphs"])
    assert counts[0] >= 1 and counts[1] == counts[0]  # no recompilation for the second batch


@needs_compiler
def test_compiled_step_equals_eager_step(engines):
    """One decode step's hidden states on the same cache, compiled vs eager."""
    _, compiled = engines
    decoder = compiled._static
    fused = decoder.fused
    fused.begin(12, torch.device("cpu"))
    torch.manual_seed(0)
    shape = (6, fused.kv_heads, 12, fused.head_dim)
    cache = [(torch.randn(shape), torch.randn(shape)) for _ in fused.layers]
    ids = torch.randint(2, 20, (6, 1))
    pos = torch.arange(6)[:, None] + 3
    allowed = torch.ones(6, 1, 1, 9, dtype=torch.bool)
    allowed[:2, ..., :2] = False  # left padding of two rows
    with torch.no_grad():
        want = fused.forward(ids, pos, 8, allowed, [(k.clone(), v.clone()) for k, v in cache])
        got = decoder._compiled_step(
            ids, pos, 8, allowed, [(k.clone(), v.clone()) for k, v in cache]
        )
    # Compiled kernels add in other orders. A hidden state's chain of sums is a log-prob's
    # less the head and log-softmax, its terms RMS-normalised activations and N(0, 1) cache
    # entries (|x| < 16 = LOGIT_SCALE): within the log-prob bound (rounding_testlib.py).
    tau = logprob_atol(compiled.model.config)
    torch.testing.assert_close(got, want, atol=tau, rtol=0)


def test_compile_on_a_model_rlvr_does_not_decode_itself_warns(tokenizer):
    config = GPT2Config(vocab_size=tokenizer.vocab_size, n_embd=32, n_layer=1, n_head=2)
    with pytest.warns(UserWarning, match="engine_options.compile has no effect"):
        engine = HFEngine(GPT2LMHeadModel(config), tokenizer, compile=True)
    assert engine._static is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"compile": "yes"}, "engine_options.compile must be true or false, got 'yes'"),
        ({"gpu_memory_utilization": 0.5}, r"\['gpu_memory_utilization'\] do not apply"),
    ],
)
def test_hf_engine_options_are_checked(options, message):
    with pytest.raises(ValueError, match=message):
        resolve_config({"engine_options": options, "progress": False})
