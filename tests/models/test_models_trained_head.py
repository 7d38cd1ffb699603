"""The LM head of a full fine-tune (a head whose weight trains), chunked over positions:
`TrainedHeadLogprobs` recomputes each chunk's logits in the backward as autograd's
checkpointed path does, with fewer passes over them, and every number is that path's
bit for bit."""

import pytest
import torch
from test_models_frozen_head import HeadProducts, logprobs_entropy_and_grads, no_processing

from rlvr.models import build_tiny_policy, tiny_qwen2_config
from rlvr.models import logprobs as lp
from rlvr.models.lean import chunked_head

PAD = 0
VOCAB = 20


@pytest.mark.parametrize("keep", [False, True])
def test_gradients_of_a_log_prob_by_hand(keep):
    # W rows e₁, e₂, e₁+e₂ and h = (0, 0): every logit 0, p = (⅓, ⅓, ⅓), log π(0) = −log 3.
    # With T = 0.5 and an upstream gradient g = 3:
    #   ∂/∂h = g·(W₀ − pᵀW)/T = 3·((1, 0) − (⅔, ⅔))/0.5 = (2, −4);
    #   ∂/∂W = g·(onehot(0) − p)·hᵀ/T = 0, as h = 0;
    # and at h = (1, 0) the logits are (2, 0, 2) (z = W·h/T), p = (e², 1, e²)/(2e² + 1):
    #   ∂/∂W_v = g·(onehot(0)_v − p_v)·h/T, non-zero in W's first column only.
    weight = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], requires_grad=True)
    hidden = torch.zeros(1, 2, requires_grad=True)
    (logprob,) = lp.TrainedHeadLogprobs.apply(
        hidden, torch.tensor([0]), weight, no_processing, 0.5, False, 1, keep
    )
    torch.testing.assert_close(logprob, -torch.tensor([3.0]).log())
    (3 * logprob).sum().backward()
    torch.testing.assert_close(hidden.grad, torch.tensor([[2.0, -4.0]]))
    torch.testing.assert_close(weight.grad, torch.zeros(3, 2))

    weight.grad = None
    hidden = torch.tensor([[1.0, 0.0]], requires_grad=True)
    (logprob,) = lp.TrainedHeadLogprobs.apply(
        hidden, torch.tensor([0]), weight, no_processing, 0.5, False, 1, keep
    )
    e2 = torch.tensor(2.0).exp()
    p = torch.stack([e2, torch.tensor(1.0), e2]) / (2 * e2 + 1)
    torch.testing.assert_close(logprob, (p[0]).log()[None])
    (3 * logprob).sum().backward()
    expected = torch.zeros(3, 2)
    expected[:, 0] = 3 * (torch.tensor([1.0, 0.0, 0.0]) - p) / 0.5
    torch.testing.assert_close(weight.grad, expected)


def _policy(tied: bool):
    config = tiny_qwen2_config(vocab_size=VOCAB, hidden=32, layers=2, heads=2, kv_heads=1)
    config.tie_word_embeddings = tied
    return build_tiny_policy(config, seed=0)


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("chunk_values", [300, 60])
@pytest.mark.parametrize("keep", [True, False])
def test_equals_autograd_through_the_checkpointed_head_bit_for_bit(
    monkeypatch, tied, temperature, chunk_values, keep
):
    """48 positions in chunks of 15 (300 logits) and of 3 (60), the head tied to the
    embedding or not, each chunk's probabilities kept for the backward or its logits
    recomputed there: log-probs, entropies and every parameter's gradient (the head's
    included, and with a tied head the embedding's rows added to it) are equal."""
    monkeypatch.setattr(lp, "CHUNK_VALUES", chunk_values)
    monkeypatch.setattr(lp, "keeps_head_probabilities", lambda model: keep)
    model = _policy(tied)
    calls = []
    apply = lp.TrainedHeadLogprobs.apply
    monkeypatch.setattr(lp.TrainedHeadLogprobs, "apply", lambda *a: calls.append(1) or apply(*a))
    fast = logprobs_entropy_and_grads(model, temperature)
    assert calls == [1]
    monkeypatch.setattr(lp, "trained_head_applies", lambda *a: False)
    slow = logprobs_entropy_and_grads(model, temperature)
    assert calls == [1]
    assert torch.equal(fast[0], slow[0]) and torch.equal(fast[1], slow[1])
    head = "model.embed_tokens.weight" if tied else "lm_head.weight"
    assert fast[2].keys() == slow[2].keys() and head in fast[2]
    for name, grad in slow[2].items():
        assert torch.equal(fast[2][name], grad), name
        assert grad.abs().max() > 0, name  # the comparison is not between zeros


@pytest.mark.parametrize(
    ("head_trains", "keep", "passes"), [(True, False, 2), (True, True, 1), (False, False, 1)]
)
def test_every_chunk_writes_its_logits_into_one_buffer(monkeypatch, head_trains, keep, passes):
    """48 positions in 16 chunks of 3: each pass over them (the forward, and a trained
    head's backward unless it kept the probabilities) allocates one buffer of 3 × V
    logits, into which every chunk's logits are written, instead of 16 fresh ones."""
    monkeypatch.setattr(lp, "CHUNK_VALUES", 60)
    monkeypatch.setattr(lp, "keeps_head_probabilities", lambda model: keep)
    model = _policy(tied=False)
    model.lm_head.weight.requires_grad_(head_trains)
    buffers, written = [], []
    allocate, write = chunked_head._chunk_buffers, chunked_head._logits_into

    def allocated(*args):
        buffers.append(allocate(*args))
        return buffers[-1]

    def recorded(out, *args):
        written.append(out.data_ptr())
        return write(out, *args)

    monkeypatch.setattr(chunked_head, "_chunk_buffers", allocated)
    monkeypatch.setattr(chunked_head, "_logits_into", recorded)
    logprobs_entropy_and_grads(model, 0.7)
    assert len(buffers) == passes and all(b[0].shape == (3, VOCAB) for b in buffers)
    assert written == [b[0].data_ptr() for b in buffers for _ in range(16)]


def test_under_bf16_autocast_with_an_fp32_head(monkeypatch):
    """ScaleRL's FP32 head inside a bf16 forward: the head's products run in float32 both
    ways (the checkpoint recomputes under the forward's autocast state, whose head turns
    it off), the same numbers."""
    monkeypatch.setattr(lp, "CHUNK_VALUES", 60)
    model = _policy(tied=True)
    fast = logprobs_entropy_and_grads(model, 1.0, bf16=True)
    monkeypatch.setattr(lp, "trained_head_applies", lambda *a: False)
    slow = logprobs_entropy_and_grads(model, 1.0, bf16=True)
    assert torch.equal(fast[0], slow[0]) and torch.equal(fast[1], slow[1])
    for name, grad in slow[2].items():
        assert torch.equal(fast[2][name], grad), name


def test_which_head_takes_which_path():
    model = _policy(tied=False)
    hidden = torch.ones(1, requires_grad=True)
    assert lp.trained_head_applies(model, hidden, False, False)
    assert not lp.frozen_head_applies(model, hidden, False, False)
    assert not lp.trained_head_applies(model, hidden, False, entropy_grad=True)
    with torch.no_grad():  # no gradient: the plain forward, nothing to recompute
        assert not lp.trained_head_applies(model, hidden, False, False)
    model.config.final_logit_softcapping = 30.0  # Gemma's cap: a gradient the formula lacks
    assert not lp.trained_head_applies(model, hidden, False, False)
    del model.config.final_logit_softcapping
    with torch.autocast("cpu", dtype=torch.bfloat16):  # bf16 logits unless fp32_head
        assert not lp.trained_head_applies(model, hidden, False, False)
        assert lp.trained_head_applies(model, hidden, True, False)
    model.lm_head.bias = torch.nn.Parameter(torch.zeros(VOCAB))  # a bias: autograd's path
    assert not lp.trained_head_applies(model, hidden, False, False)
    del model.lm_head.bias
    model.lm_head.bias = None
    model.get_output_embeddings().weight.requires_grad_(False)  # LoRA's frozen head
    assert not lp.trained_head_applies(model, hidden, False, False)
    assert lp.frozen_head_applies(model, hidden, False, False)


def test_a_temperature_of_one_divides_nothing():
    logits = torch.randn(3, 5)
    assert lp.tempered(logits, 1.0) is logits
    torch.testing.assert_close(lp.tempered(logits, 0.5), logits * 2)


def test_entropy_without_a_gradient_is_the_differentiable_one_bit_for_bit():
    logits = torch.randn(7, 50) * 30
    logits[0, :49] = float("-inf")  # one certain token: 0·log 0 = 0, not NaN
    with torch.no_grad():
        quick = lp.chunked_entropy(logits)
    tracked = lp.chunked_entropy(logits.clone().requires_grad_())
    assert torch.equal(quick, tracked.detach()) and quick[0] == 0
    assert (quick[1:] > 0).all()


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_without_a_gradient_two_buffers_give_the_chunked_paths_numbers(
    monkeypatch, bias, temperature
):
    """π_ref's and π_old's forwards (no gradient): 48 positions in 16 chunks of 3, written
    into one allocation of two (3, V) buffers, give the per-chunk path's log-probs and
    entropies bit for bit, with or without a head bias."""
    monkeypatch.setattr(lp, "CHUNK_VALUES", 60)
    model = _policy(tied=True)
    if bias:
        model.lm_head.bias = torch.nn.Parameter(torch.randn(VOCAB))
    buffers = []
    allocate = chunked_head._chunk_buffers
    monkeypatch.setattr(
        chunked_head, "_chunk_buffers", lambda *a: buffers.append(allocate(*a)) or buffers[-1]
    )
    torch.manual_seed(1)
    response_ids = torch.randint(2, VOCAB, (8, 6))
    mask = torch.ones(8, 6)
    mask[1, 4:] = 0

    def forward():
        with torch.no_grad():
            return lp.response_logprobs(
                model, [[5, 6, 7], [8, 9]] * 4, response_ids, mask, PAD,
                temperature=temperature, return_entropy=True,
            )  # fmt: skip

    fast = forward()
    assert len(buffers) == 1 and [b.shape for b in buffers[0]] == [(3, VOCAB)] * 2
    monkeypatch.setattr(lp, "_float32_head", lambda *a: False)
    slow = forward()
    assert len(buffers) == 1  # the per-chunk path allocates its own
    assert torch.equal(fast[0], slow[0]) and torch.equal(fast[1], slow[1])
    assert fast[0][0].abs().min() > 0 and fast[1][0].min() > 0  # not a comparison of zeros


def test_logsumexp_into_a_buffer_is_atens_logsumexp():
    """Rows of ordinary logits, of −inf (all masked), with one +inf, with a NaN, and one
    of very large logits: the same floats (and the same NaNs) as `torch.logsumexp`, the
    shifted exponentials left in the scratch buffer."""
    torch.manual_seed(0)
    z = torch.randn(6, 50) * 20
    z[1] = float("-inf")
    z[2, 7] = float("inf")
    z[3, 0] = float("nan")
    z[4] += 1e30
    z[5, :25] = float("-inf")
    scratch = torch.empty_like(z)
    got = chunked_head.logsumexp_into(z, scratch)
    want = torch.logsumexp(z, -1)
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(
        got.nan_to_num(), want.nan_to_num()
    )
    assert torch.equal(scratch[0], (z[0] - z[0].max()).exp())
    # by hand: log(e⁰ + e⁰) = log 2 for a row of two zeros
    assert (
        chunked_head.logsumexp_into(torch.zeros(1, 2), torch.empty(1, 2)) == torch.tensor(2.0).log()
    )


@pytest.mark.parametrize(("keep", "per_chunk"), [(True, 3), (False, 4)])
def test_kept_probabilities_save_one_product_per_chunk(monkeypatch, keep, per_chunk):
    """16 chunks of 3 positions: the forward's logits, then in the backward dz·W and
    dzᵀ·h, with the logits recomputed first unless the forward kept p = exp(z − lse)."""
    monkeypatch.setattr(lp, "CHUNK_VALUES", 60)
    monkeypatch.setattr(lp, "keeps_head_probabilities", lambda model: keep)
    model = _policy(tied=False)
    with HeadProducts() as spy:
        logprobs_entropy_and_grads(model)
    assert spy.count == per_chunk * 16


def test_a_second_backward_recomputes_what_the_first_consumed(monkeypatch):
    """The kept probabilities are overwritten by the first backward's dz: a second one
    (retain_graph) recomputes the logits and gets the same gradients."""
    monkeypatch.setattr(lp, "CHUNK_VALUES", 60)
    model = _policy(tied=False)
    assert lp.keeps_head_probabilities(model)
    torch.manual_seed(1)
    logprob = lp.response_logprobs(
        model, [[5, 6, 7], [8, 9]] * 4, torch.randint(2, VOCAB, (8, 6)), torch.ones(8, 6), PAD
    )
    logprob.sum().backward(retain_graph=True)
    first = model.lm_head.weight.grad.clone()
    model.zero_grad()
    logprob.sum().backward()
    assert torch.equal(model.lm_head.weight.grad, first) and first.abs().max() > 0


def test_which_models_keep_the_probabilities(monkeypatch):
    """V ≤ L·(I + 2H), the floats per token the budget counts but the fused float32 full
    fine-tune does not keep: 20 ≤ 2·(512 + 64) here; SmolLM2's 49,152 ≤ 30·(1536 + 1152);
    not 2,000 > 1·(32 + 32), nor a model the fused forward does not run."""
    assert lp.keeps_head_probabilities(_policy(tied=False))
    config = tiny_qwen2_config(vocab_size=2000, hidden=16, layers=1, heads=2, kv_heads=1)
    config.intermediate_size = 32
    assert not lp.keeps_head_probabilities(build_tiny_policy(config, seed=0))
    config.vocab_size = 64
    assert lp.keeps_head_probabilities(build_tiny_policy(config, seed=0))
    monkeypatch.setattr(lp, "supports", lambda model: False)
    assert not lp.keeps_head_probabilities(_policy(tied=False))
