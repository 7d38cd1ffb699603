"""The fused Llama forward's SwiGLU (`fused_llama.SwiGLU`) keeps one I-sized activation
fewer per token and layer than autograd through `F.silu(gate) * up`, and changes nothing
else: the same log-probs and gradients bit for bit, in float32 and under bf16 autocast,
for a full fine-tune and for LoRA; and `memory_budget`'s count (now 3·I for the MLP)
still counts at least what a layer keeps."""

import pytest
import torch
import torch.nn.functional as F
from test_models_fused_llama import PAD, batch, llama_gqa, qwen2
from test_models_fused_llama_lora import with_lora

from rlvr.models import fused_llama, response_logprobs
from rlvr.models.precision import autocast, bf16_supported
from rlvr.train.memory_budget import saved_floats_per_token

needs_bf16 = pytest.mark.skipif(not bf16_supported("cpu"), reason="no native bf16 on this CPU")


def plain(gate, up):
    """The composition `SwiGLU` replaces: autograd keeps silu(gate) for the product."""
    return F.silu(gate) * up


def logprobs_and_grads(model, precision="fp32"):
    """Log-probs of `batch()` through the fused training forward, and the trained
    parameters' gradients of Σ A·log π."""
    prompts, ids, mask = batch()
    advantages = torch.linspace(-1, 1, 7)[:, None]
    model.zero_grad()
    with autocast(precision, "cpu"):
        logprobs = response_logprobs(model, prompts, ids, mask, PAD)
    (logprobs * advantages * mask).sum().backward()
    return logprobs.detach(), [p.grad.clone() for p in model.parameters() if p.requires_grad]


def plain_down(gate, up, layer):
    """The composition `SwiGLUDown` replaces: the plain gate, then the down projection."""
    return fused_llama._project(plain(gate, up), layer.down_w, layer.down_b, layer.down_low)


def with_plain_ops(monkeypatch, measure, *args):
    """`measure(*args)` with the plain composition in the forward in place of `SwiGLU`
    and `SwiGLUDown`."""
    with monkeypatch.context() as patch:
        patch.setattr(fused_llama, "swiglu", plain)
        patch.setattr(fused_llama, "_gated_down", plain_down)
        return measure(*args)


def calls_to_swiglu(monkeypatch):
    """A list that gets the Function's name per `SwiGLU.apply` or `SwiGLUDown.apply`: proof
    a Function ran, without which the equality tests below would compare the plain ops
    with themselves."""
    calls = []
    for function in (fused_llama.SwiGLU, fused_llama.SwiGLUDown):
        apply = function.apply
        monkeypatch.setattr(
            function,
            "apply",
            lambda *a, name=function.__name__, apply=apply: calls.append(name) or apply(*a),
        )
    return calls


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_function_equals_the_composition_bit_for_bit(dtype):
    """Value and both input gradients, on views of one fused gate/up output as the forward
    has them; and with only `up` trained (`needs_input_grad`): no gradient for `gate`."""
    torch.manual_seed(0)
    gate_up = (torch.randn(3, 5, 16) * 4).to(dtype).requires_grad_()  # σ far from ½ too
    grad = torch.randn(3, 5, 8).to(dtype)
    results = []
    for gated in (plain, fused_llama.SwiGLU.apply):
        gate_up.grad = None
        out = gated(*gate_up.chunk(2, -1))
        out.backward(grad)
        results.append((out.detach(), gate_up.grad))
    (want, want_grad), (got, got_grad) = results
    assert got.dtype == want.dtype == dtype
    assert torch.equal(got, want) and torch.equal(got_grad, want_grad)
    assert want_grad.abs().min() > 0  # both halves got a gradient to compare
    gate, up = (t.detach() for t in gate_up.chunk(2, -1))
    up.requires_grad_()
    fused_llama.SwiGLU.apply(gate, up).backward(grad)
    assert gate.grad is None and torch.equal(up.grad, grad * F.silu(gate))


@pytest.mark.parametrize("trained", ["all", "weight", "inputs", "up"])
def test_the_gated_down_projection_equals_the_composition_bit_for_bit(trained):
    """`SwiGLUDown` against `F.linear(SiLU(gate)·up, W)`: the value and every gradient asked
    for, on views of one fused gate/up output, for (..., I) rows of a 3-d batch; with only
    W trained (LoRA's frozen inputs are not; the first layer's gate/up are), only the
    inputs, or only `up`: no gradient for what was not asked."""
    torch.manual_seed(0)
    gate_up = torch.randn(3, 5, 16) * 4
    weight = torch.randn(6, 8)
    grad = torch.randn(3, 5, 6)
    results = []
    for composed in (lambda g, u, w: F.linear(plain(g, u), w), fused_llama.SwiGLUDown.apply):
        leaves = gate_up.clone().requires_grad_(trained in ("all", "inputs")), weight.clone()
        leaves[1].requires_grad_(trained in ("all", "weight"))
        gate, up = leaves[0].chunk(2, -1)
        if trained == "up":
            gate, up = gate.detach(), up.detach().requires_grad_()
            leaves = (up, leaves[1])
        out = composed(gate, up, leaves[1])
        out.backward(grad)
        results.append((out.detach(), [t.grad for t in leaves]))
    (want, want_grads), (got, got_grads) = results
    assert torch.equal(got, want)
    for a, b in zip(got_grads, want_grads, strict=True):
        assert (a is None) == (b is None) and (a is None or torch.equal(a, b))
    assert [g is not None for g in got_grads] == {
        "all": [True, True], "weight": [False, True], "inputs": [True, False], "up": [True, False]
    }[trained]  # fmt: skip
    assert all(g.abs().min() > 0 for g in got_grads if g is not None)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("build", [qwen2, llama_gqa])
def test_training_forward_gradients_are_the_plain_ops_bit_for_bit(build, lora, monkeypatch):
    model = with_lora(build()) if lora else build()
    want, want_grads = with_plain_ops(monkeypatch, logprobs_and_grads, model)
    calls = calls_to_swiglu(monkeypatch)
    got, got_grads = logprobs_and_grads(model)
    # The prompts' forward and the responses' forward, each through every layer; a full
    # fine-tune's bias-free down projection with the gate (`SwiGLUDown`), LoRA's apart.
    assert calls == ["SwiGLU" if lora else "SwiGLUDown"] * 2 * model.config.num_hidden_layers
    assert torch.equal(got, want)
    assert len(got_grads) == len(want_grads) and all(g.abs().max() > 0 for g in want_grads)
    for a, b in zip(got_grads, want_grads, strict=True):
        assert torch.equal(a, b)


@needs_bf16
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_under_bf16_autocast_too(lora, monkeypatch):
    """Under autocast gate and up are bf16 (the projections run in bf16) and so is the
    product, as the composition's; its gradients reach the float32 parameters unchanged."""
    model = with_lora(llama_gqa()) if lora else llama_gqa()
    want, want_grads = with_plain_ops(monkeypatch, logprobs_and_grads, model, "bf16")
    dtypes = []
    apply = fused_llama.SwiGLU.apply
    monkeypatch.setattr(
        fused_llama.SwiGLU, "apply", lambda g, u: dtypes.append((g.dtype, u.dtype)) or apply(g, u)
    )
    got, got_grads = logprobs_and_grads(model, "bf16")
    assert dtypes and set(dtypes) == {(torch.bfloat16, torch.bfloat16)}
    _, fp32_grads = logprobs_and_grads(model, "fp32")
    assert not torch.equal(got_grads[0], fp32_grads[0])  # bf16 really ran
    assert torch.equal(got, want)
    for a, b in zip(got_grads, want_grads, strict=True):
        assert torch.equal(a, b)


def saved_bytes(model, prompts, ids, mask, precision="fp32", activations_only=False) -> int:
    """Bytes of the distinct storages autograd keeps for the backward of the fused
    training forward (a view of a kept tensor costs nothing more); with `activations_only`,
    less the parameters and what `FusedLlama.begin` read from them (fused weights, rotary
    tables), which no token count changes."""
    storages, fused = {}, []

    def pack(t):
        storages.setdefault(t.untyped_storage().data_ptr(), t.untyped_storage())
        return t  # held until the graph is freed: no data_ptr is reused meanwhile

    begin = fused_llama.FusedLlama.begin
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            fused_llama.FusedLlama, "begin", lambda s, *a: fused.append(s) or begin(s, *a)
        )
        hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
        with hooks, autocast(precision, "cpu"):
            response_logprobs(model, prompts, ids, mask, PAD)
    if activations_only:
        read = [*model.parameters(), fused[0].cos, fused[0].sin_signed]
        for layer in fused[0].layers:
            for value in vars(layer).values():
                read += [
                    t for t in (value if isinstance(value, tuple) else (value,)) if t is not None
                ]
        for t in read:
            storages.pop(t.untyped_storage().data_ptr(), None)
    return sum(s.nbytes() for s in storages.values())


@pytest.mark.parametrize(
    "precision", ["fp32", pytest.param("bf16", marks=needs_bf16)], ids=["fp32", "bf16"]
)
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_one_activation_of_intermediate_size_fewer_per_token_and_layer(
    lora, precision, monkeypatch
):
    # batch(): 3 distinct prompts left-padded to 4 columns run once (12 tokens), then 7
    # rows × 4 response columns (the longest response is 5: its last token predicts
    # nothing): 40 tokens through each of 2 layers. The plain ops also keep silu(gate),
    # I = 64 floats a token: 2·40·64 = 5,120 floats, 20,480 B in float32 and 10,240 B in
    # bf16 (the products' dtype under autocast). A float32 full fine-tune's `SwiGLUDown`
    # also keeps no product SiLU(gate)·up for the down projection's weight gradient: as
    # much again, 40,960 B. Fails if anything else kept changes too.
    model = with_lora(llama_gqa()) if lora else llama_gqa()
    before = with_plain_ops(monkeypatch, saved_bytes, model, *batch(), precision)
    after = saved_bytes(model, *batch(), precision)
    width = {"fp32": 4, "bf16": 2}[precision]
    products = 2 if precision == "fp32" and not lora else 1
    assert before - after == products * 2 * 40 * 64 * width


def test_the_budgets_count_is_at_least_what_a_layer_keeps():
    """What one layer more keeps (a 2-layer model's saved bytes less a 1-layer one's: the
    embedding, final norm, head and masks cancel), per token, is at most the layer's share
    of `saved_floats_per_token`. Three rows with their own 30-token prompts and 2 response
    tokens: measured 551.3 floats a token against a count of 608 = 5·32 + 2·(4 + 2·2)·8 +
    4·32 + 3·64 (the prompt's keys per token dominate the attention there). Fails if the
    count undercounts by more than 56 floats, e.g. the MLP counted as 2·I (544)."""
    prompt_len, steps = 30, 2
    prompts = [[2 + (i + j) % 30 for j in range(prompt_len)] for i in range(3)]
    torch.manual_seed(3)
    ids, mask = torch.randint(2, 40, (3, steps)), torch.ones(3, steps)
    kept = [
        saved_bytes(llama_gqa(layers), prompts, ids, mask, activations_only=True)
        for layers in (1, 2)
    ]
    tokens = prompt_len + steps
    per_layer = saved_floats_per_token(llama_gqa(2).config, tokens)
    per_layer -= saved_floats_per_token(llama_gqa(1).config, tokens)
    assert per_layer == 608
    assert (kept[1] - kept[0]) / 4 <= 3 * tokens * per_layer
