"""The forward pass of Llama-family causal LMs (Qwen2, Llama, Mistral without sliding
windows) written out in a few dozen tensor ops: the same arithmetic as the `transformers`
eager forward, with fused QKV and gate/up projections, a precomputed rotary table and a
caller-owned KV cache. Two users:

- the rollout's decode loop (`rlvr.rollout.static_decode`): a preallocated cache;
- the trainer's shared-prefix forward (`shared_prefix_hidden`): a group's G responses
  share one prompt, so the prompt runs once per group and its keys/values are reused by
  every response (with gradient), instead of G times.

The weights are read from the model at every `begin`: without gradients fused once by
`cat`; with them concatenated per product by `CatLinear` (rlvr/models/lean), whose
gradients reach the model's own parameters and which keeps no copy for the backward.
tests/models and tests/rollout prove the results equal the model's own forward within
float tolerance.

peft LoRA projections (Hu et al. 2021, y = W·x + s·B·A·x with s = α/r) take this path too.
With gradients on, the low-rank product runs beside the frozen product, as peft runs it
(the frozen W then gets no weight gradient, which is LoRA's saving); without (sampling,
π_old and π_ref scoring) the adapter is merged into the fused weight once per `begin`,
W + s·B·A, so a decode step costs what the plain model's does. Adapters that are switched
off (π_ref as the base model) contribute nothing. Dropout on the adapter's input in
training mode, DoRA and other variants, merged adapters and mixed-adapter batches compute
something else and keep the model's own forward (`supports`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from rlvr.models.lean import (  # noqa: F401 (tests patch SwiGLU)
    CatLinear,
    NormedCatLinear,
    SwiGLU,
    SwiGLUDown,
    rms_norm,
    swiglu,
)
from rlvr.models.lean.packed import PackedWeight, pack
from rlvr.models.precision import autocast_dtype

SUPPORTED_MODEL_TYPES = ("qwen2", "llama", "mistral")
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")

Cache = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values (B, Hkv, L, D)


def supports(model: torch.nn.Module) -> bool:
    """True when `model` is a Llama-family LM whose forward this module reproduces: SiLU
    gated MLP, RMSNorm, length-independent rotary positions, full attention in every
    layer (no sliding window), no attention dropout in training mode and no gradient
    checkpointing asked for; every projection a plain `nn.Linear` or a plain peft LoRA
    layer over one (`_lora_supported`; a quantized layer computes something else from
    its weights)."""
    cfg = getattr(model, "config", None)
    base = getattr(model, "base_model", None)
    if cfg is None or base is None or getattr(cfg, "model_type", None) not in SUPPORTED_MODEL_TYPES:
        return False
    layer_types = getattr(cfg, "layer_types", None) or ["full_attention"]
    window = getattr(cfg, "sliding_window", None)  # Mistral applies it to every layer
    dropout = model.training and getattr(cfg, "attention_dropout", 0.0) > 0
    return (
        getattr(cfg, "hidden_act", None) == "silu"
        and all(t == "full_attention" for t in layer_types)
        and (window is None or window >= cfg.max_position_embeddings)
        and all(hasattr(base, name) for name in ("embed_tokens", "layers", "norm", "rotary_emb"))
        # Rotary angles must not depend on the sequence length (no dynamic/long RoPE).
        and getattr(base.rotary_emb, "rope_type", "default") in STATIC_ROPE_TYPES
        and not dropout
        and not any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
        and all(_plain_projections(layer) for layer in base.layers)
        # FSDP gathers a layer's weights in that layer's forward, which this path bypasses.
        and not _fsdp_sharded(model)
    )


def _fsdp_sharded(model: torch.nn.Module) -> bool:
    """Whether any part of `model` is sharded by FSDP2 (`fully_shard`)."""
    if not torch.distributed.is_available():
        return False
    from torch.distributed.fsdp import FSDPModule

    return any(isinstance(m, FSDPModule) for m in model.modules())


_PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj")
_PROJECTIONS += ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def _plain_projections(layer: torch.nn.Module) -> bool:
    try:
        projections = [layer.get_submodule(name) for name in _PROJECTIONS]
    except AttributeError:
        return False
    return all(type(m) is torch.nn.Linear or _lora_supported(m) for m in projections)


def _lora_supported(module: torch.nn.Module) -> bool:
    """A peft LoRA `Linear` whose output is exactly base(x) + Σ_a s_a·B_a·A_a·x over its
    active adapters: a plain `nn.Linear` base, not merged, no variant (DoRA), no dropout
    that acts (p > 0 in training mode)."""
    try:
        from peft.tuners.lora import Linear as LoraLinear
    except ImportError:
        return False
    if not isinstance(module, LoraLinear) or type(module.base_layer) is not torch.nn.Linear:
        return False
    if module.merged or getattr(module, "fan_in_fan_out", False):
        return False
    for name in _active(module):
        drop = module.lora_dropout[name]
        acting = isinstance(drop, torch.nn.Dropout) and drop.p > 0 and drop.training
        variant = name in getattr(module, "lora_variant", {})
        bias = getattr(module, "lora_bias", {}).get(name, False)
        if acting or variant or bias or not isinstance(drop, torch.nn.Dropout | torch.nn.Identity):
            return False
    return True


def _active(module: torch.nn.Module, enabled: bool = True) -> list[str]:
    """The adapters that act in `module`'s forward (none while adapters are disabled)."""
    if not enabled or module.disable_adapters:
        return []
    return [name for name in module.active_adapters if name in module.lora_A]


def _base(module: torch.nn.Module) -> torch.nn.Linear:
    return getattr(module, "base_layer", module)


def _low_rank(*modules: torch.nn.Module, enabled: bool) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(A, B) of the fused projection of `modules` (outputs concatenated in order), or None
    when none has an active adapter: A stacks every adapter's A (Σr, in); B is block
    diagonal with each adapter's s·B in its projection's rows (zero rows for a projection
    without one), so F.linear(F.linear(x, A), B) = cat over projections of Σ_a s_a·B_a·A_a·x."""
    downs, blocks = [], []
    for module in modules:
        names = _active(module, enabled) if hasattr(module, "lora_A") else []
        out = _base(module).out_features
        if not names:
            blocks.append(_base(module).weight.new_zeros(out, 0))
            continue
        downs += [module.lora_A[n].weight for n in names]
        blocks.append(torch.cat([module.lora_B[n].weight * module.scaling[n] for n in names], 1))
    if not downs:
        return None
    return torch.cat(downs), torch.block_diag(*blocks)


def _project(
    x: torch.Tensor, w: torch.Tensor | tuple, b: torch.Tensor | None, low: tuple | None
) -> torch.Tensor:
    """W·x + b (W given as the weights to concatenate: through `CatLinear`), plus the
    unmerged low-rank term B·(A·x) when an adapter trains, added into W·x + b in place:
    that fresh product is saved by no backward, and a second output as
    large (a LoRA step's gate/up: 32 rows × 64 tokens × 3072 floats, 25 MB a layer) costs
    a new allocation and its page faults (about 1 s of a 64-token SmolLM2 step). The same
    float additions as `y + low`: bit for bit (tests/models/test_models_fused_llama_lora.py)."""
    if isinstance(w, PackedWeight):  # the decode loop's (`FusedLlama.pack`)
        y = w.linear(x, b)
    else:
        y = CatLinear.apply(x, b, *w) if isinstance(w, tuple) else F.linear(x, w, b)
    if low is None:
        return y
    update = F.linear(F.linear(x, low[0]), low[1])
    return y.add_(update) if update.dtype == y.dtype else y + update


def _normed_project(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    w: torch.Tensor | tuple,
    b: torch.Tensor | None,
    low: tuple | None,
) -> torch.Tensor:
    """The projection of RMSNorm(x): in a float32 training forward of weights concatenated
    per product (a full fine-tune's q/k/v and gate/up) through `NormedCatLinear`, which
    keeps the normed x for neither Function's backward; otherwise `rms_norm` then
    `_project`."""
    if (
        low is None
        and isinstance(w, tuple)
        and torch.is_grad_enabled()
        and x.dtype == norm_weight.dtype == torch.float32
        and all(t.dtype == torch.float32 for t in w)
    ):
        return NormedCatLinear.apply(x, x, norm_weight, eps, b, *w)
    return _project(rms_norm(x, norm_weight, eps), w, b, low)


def _gated_down(gate: torch.Tensor, up: torch.Tensor, layer: _Layer) -> torch.Tensor:
    """The down projection of SiLU(gate) ⊙ up: in a float32 training forward of a plain
    bias-free down projection (a full fine-tune's) through `SwiGLUDown`, which keeps the
    gate's product for neither Function's backward; otherwise `swiglu` then `_project`."""
    w = layer.down_w
    if (
        torch.is_grad_enabled()
        and layer.down_b is None
        and layer.down_low is None
        and isinstance(w, torch.Tensor)
        and gate.dtype == w.dtype == torch.float32
        and not torch.is_autocast_enabled(gate.device.type)
    ):
        return SwiGLUDown.apply(gate, up, w)
    return _project(swiglu(gate, up), w, layer.down_b, layer.down_low)


@dataclass
class _Layer:
    ln1: torch.Tensor
    ln2: torch.Tensor
    qkv_w: torch.Tensor | tuple  # a tuple: the weights `CatLinear` concatenates
    qkv_b: torch.Tensor | None
    o_w: torch.Tensor
    o_b: torch.Tensor | None
    gate_up_w: torch.Tensor | tuple
    gate_up_b: torch.Tensor | None
    down_w: torch.Tensor
    down_b: torch.Tensor | None
    # LoRA terms (A, B) per fused projection when they run unmerged (`_low_rank`).
    qkv_low: tuple | None = None
    o_low: tuple | None = None
    gate_up_low: tuple | None = None
    down_low: tuple | None = None


def _cat_bias(*modules: torch.nn.Module) -> torch.Tensor | None:
    linears = [_base(m) for m in modules]
    if all(m.bias is None for m in linears):
        return None
    return torch.cat(
        [m.bias if m.bias is not None else m.weight.new_zeros(m.out_features) for m in linears]
    )


def _fused(layer: torch.nn.Module, cast: torch.dtype | None, adapters: bool) -> _Layer:
    """The layer's weights, projections fused; under autocast, the projections cast to
    `cast` once here (differentiably) rather than by autocast at every product: a cat of
    weights is no leaf, so autocast's weight cache would not keep it."""
    attn, mlp = layer.self_attn, layer.mlp
    to = (lambda t: t) if cast is None else (lambda t: None if t is None else t.to(cast))
    merge = not torch.is_grad_enabled()  # no gradient: fold the adapters into W once

    def weight(*modules: torch.nn.Module) -> tuple[torch.Tensor | tuple, tuple | None]:
        weights = [_base(m).weight for m in modules]
        low = _low_rank(*modules, enabled=adapters)
        if len(weights) > 1 and not merge and cast is None:
            # A training forward: `CatLinear` concatenates per product, keeping no copy.
            return tuple(weights), low
        w = weights[0] if len(weights) == 1 else torch.cat(weights)
        if low is not None and merge:
            w, low = w + low[1] @ low[0], None
        return to(w), None if low is None else (to(low[0]), to(low[1]))

    qkv_w, qkv_low = weight(attn.q_proj, attn.k_proj, attn.v_proj)
    o_w, o_low = weight(attn.o_proj)
    gate_up_w, gate_up_low = weight(mlp.gate_proj, mlp.up_proj)
    down_w, down_low = weight(mlp.down_proj)
    return _Layer(
        ln1=layer.input_layernorm.weight,
        ln2=layer.post_attention_layernorm.weight,
        qkv_w=qkv_w,
        qkv_b=to(_cat_bias(attn.q_proj, attn.k_proj, attn.v_proj)),
        o_w=o_w,
        o_b=to(_base(attn.o_proj).bias),
        gate_up_w=gate_up_w,
        gate_up_b=to(_cat_bias(mlp.gate_proj, mlp.up_proj)),
        down_w=down_w,
        down_b=to(_base(mlp.down_proj).bias),
        qkv_low=qkv_low,
        o_low=o_low,
        gate_up_low=gate_up_low,
        down_low=down_low,
    )


def fused_copy_floats(model: torch.nn.Module, precision: str = "fp32") -> int:
    """Floats (of 4 bytes) a training forward's `begin` copies out of the weights and holds
    until each layer's backward. In float32 none: the q/k/v and gate/up concatenations are
    made per product (`CatLinear`). Under bf16 autocast every projection is cast to bf16
    once (`_fused`), at 2 bytes a weight: half as many floats as the projections have
    weights. 0 for a model on its own forward."""
    if not supports(model) or precision == "fp32":
        return 0
    projections = 0
    for layer in model.base_model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        cast = (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj)
        cast += (mlp.gate_proj, mlp.up_proj, mlp.down_proj)
        projections += sum(_base(m).weight.numel() for m in cast)
    return projections // 2


def _extend(cache: torch.Tensor, new: torch.Tensor, col: int) -> torch.Tensor:
    """The keys (or values) (B, Hkv, col + S, D) that queries at columns [col, col + S)
    attend to: the cached columns [0, col), then `new` (B, Hkv, S, D). A cache wider than
    `col` (the decode's preallocated one) is written in place; one exactly `col` wide (the
    training forward's prompt) is extended by concatenation, which keeps in-place writes
    (and their whole-cache gradient copies) out of the autograd graph."""
    if cache.shape[2] == col:
        return torch.cat((cache, new), 2)
    cache[:, :, col : col + new.shape[2]] = new
    return cache[:, :, : col + new.shape[2]]


class FusedLlama:
    """The backbone of a supported model as plain tensor ops over a caller-owned cache."""

    def __init__(self, model: torch.nn.Module) -> None:
        cfg = model.config
        self.model = model
        self.heads = cfg.num_attention_heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.eps = cfg.rms_norm_eps
        self.scale = self.head_dim**-0.5

    def begin(self, positions: int, device: torch.device) -> None:
        """Read (and fuse) the current weights; tabulate rotary angles for `positions`.
        Inside bf16 autocast the projections, rotary tables and KV cache are bf16 while the
        residual stream and norms stay in the weights' float32 (`rlvr.models.precision`)."""
        base = self.model.base_model
        cast = autocast_dtype(device)
        adapters = getattr(self.model, "adapters_enabled", True)
        self.layers = [_fused(layer, cast, adapters) for layer in base.layers]
        self.dtype = cast or base.embed_tokens.weight.dtype
        table = torch.arange(positions, device=device)[None]
        cos, sin = base.rotary_emb(base.embed_tokens.weight[:1], table)  # (1, positions, D)
        self.cos, sin = cos[0].to(self.dtype), sin[0].to(self.dtype)
        # rotate_half(x)·sin = swap_halves(x)·sin±, where sin± negates the first half:
        # (−a)·b and a·(−b) are the same float, so this saves a negation per layer.
        half = self.head_dim // 2
        self.sin_signed = torch.cat((-sin[:, :half], sin[:, half:]), -1)

    def pack(self, rows: int) -> None:
        """Pack the projections' weights for products with `rows`-row inputs, the decode
        loop's (`rlvr.models.lean.packed`: the same floats, MKL's repacking at every step
        saved); a weight that cannot be packed as exactly stays as it is, and so does one
        that trains (a training forward concatenates its weights per product)."""
        self.layers = [
            replace(
                layer,
                qkv_w=pack(layer.qkv_w, rows, layer.qkv_b),
                o_w=pack(layer.o_w, rows, layer.o_b),
                gate_up_w=pack(layer.gate_up_w, rows, layer.gate_up_b),
                down_w=pack(layer.down_w, rows, layer.down_b),
            )
            for layer in self.layers
        ]

    def release(self) -> None:
        """Drop what `begin` read: the fused weights are a copy of every projection (on
        SmolLM2-135M 0.4 GiB), which a decoder kept between rollouts would hold through
        the update, the step's peak; the next `begin` reads the weights again anyway."""
        self.layers = []
        self.cos = self.sin_signed = None

    def new_cache(self, batch: int, width: int, device: torch.device) -> Cache:
        """Uninitialised: `forward` writes every column before any query reads it."""
        shape = (batch, self.kv_heads, width, self.head_dim)
        return [
            (
                torch.empty(shape, dtype=self.dtype, device=device),
                torch.empty(shape, dtype=self.dtype, device=device),
            )
            for _ in self.layers
        ]

    def forward(
        self,
        ids: torch.Tensor,
        pos: torch.Tensor,
        col: int,
        allowed: torch.Tensor,
        cache: Cache,
    ) -> torch.Tensor:
        """Final-norm hidden states (B, S, H) of `ids` (B, S) at rotary positions `pos`
        (B, S); their keys/values go to cache columns [col, col+S) (see `_extend`) and
        `allowed` (B, 1, S, col+S) says which cached keys each query may attend to."""
        base = self.model.base_model
        x = base.embed_tokens(ids)
        batch, steps, _ = x.shape
        cos, sin = self.cos[pos][:, :, None], self.sin_signed[pos][:, :, None]  # (B, S, 1, D)
        nq, nkv, d = self.heads, self.kv_heads, self.head_dim
        rep, half = nq // nkv, d // 2
        neg = torch.finfo(self.dtype).min  # the scores' dtype: a finite mask value
        blocked = ~allowed
        for layer, (k_cache, v_cache) in zip(self.layers, cache, strict=True):
            # (B, S, (nq + 2·nkv)·D); `split`, not slices: one backward op, no zero-filled grads.
            qkv = _normed_project(x, layer.ln1, self.eps, layer.qkv_w, layer.qkv_b, layer.qkv_low)
            qk, v = qkv.split(((nq + nkv) * d, nkv * d), -1)
            # Rotary positions on the query and key heads at once (B, S, nq + nkv, D). The
            # halves are swapped by `cat`: `roll` gives the same values, but inductor
            # compiles it into a decode step 2.4x slower.
            qk = qk.view(batch, steps, nq + nkv, d)
            qk = qk * cos + torch.cat((qk[..., half:], qk[..., :half]), -1) * sin
            q, k = qk.split((nq, nkv), 2)
            q = q.transpose(1, 2)  # (B, nq, S, D)
            keys = _extend(k_cache, k.transpose(1, 2), col)
            values = _extend(v_cache, v.view(batch, steps, nkv, d).transpose(1, 2), col)
            # Grouped-query attention without copying K/V: query heads h·rep … h·rep+rep−1
            # share key/value head h, as `repeat_kv` arranges them.
            q = q.reshape(batch, nkv, rep * steps, d)
            scores = (q @ keys.transpose(-1, -2)).view(batch, nq, steps, -1) * self.scale
            scores = scores.masked_fill(blocked, neg)
            probs = scores.softmax(-1, dtype=torch.float32).to(x.dtype)
            out = probs.view(batch, nkv, rep * steps, -1) @ values  # (B, nkv, rep·S, D)
            out = out.view(batch, nq, steps, d).transpose(1, 2).reshape(batch, steps, nq * d)
            x = x + _project(out, layer.o_w, layer.o_b, layer.o_low)
            gate_up = _normed_project(
                x, layer.ln2, self.eps, layer.gate_up_w, layer.gate_up_b, layer.gate_up_low
            )
            gate, up = gate_up.chunk(2, -1)
            x = x + _gated_down(gate, up, layer)
        return rms_norm(x, base.norm.weight, self.eps)

    def prefill(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, cache: Cache
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded prompts (P, L) into cache columns [0, L): returns the hidden state
        at the last column (P, H) and each prompt's next position (P,)."""
        real = attention_mask.bool()
        pos = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (P, L)
        width = input_ids.shape[1]
        causal = torch.ones(width, width, dtype=torch.bool, device=input_ids.device).tril()
        allowed = (causal[None] & real[:, None, :])[:, None]  # (P, 1, L, L)
        hidden = self.forward(input_ids, pos, 0, allowed, cache)[:, -1]
        return hidden, pos[:, -1] + 1


def _dedupe(prompt_ids: list[list[int]]) -> tuple[list[list[int]], torch.Tensor]:
    """Distinct prompts in order of first use, and each row's index into them (B,)."""
    index: dict[tuple[int, ...], int] = {}
    rows = [index.setdefault(tuple(p), len(index)) for p in prompt_ids]
    return [list(p) for p in index], torch.tensor(rows, dtype=torch.long)


def shared_prefix_hidden(
    model: torch.nn.Module,
    prompt_ids: list[list[int]],
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    pad_id: int,
) -> torch.Tensor:
    """Final hidden states (B, T, H) from which each response token is predicted, as
    `rlvr.models.logprobs.response_hidden_states`, with every distinct prompt run once:
    rows with the same prompt (a group) read its keys/values, so the prompt's gradient is
    the sum over the rows that share it, exactly as with one copy per row."""
    device = next(model.parameters()).device
    prompts, row_prompt = _dedupe(prompt_ids)
    row_prompt = row_prompt.to(device)
    input_ids, attention_mask = left_pad(prompts, pad_id, device)
    steps = response_ids.shape[1]
    present = response_mask.to(device) > 0
    ends = (present * torch.arange(1, steps + 1, device=device)).amax(-1)
    needed = max(int(ends.max()), 1)  # response columns any row still predicts
    width = input_ids.shape[1]
    fused = FusedLlama(model)
    fused.begin(width + needed, device)
    cache = fused.new_cache(len(prompts), width, device)  # the responses extend it
    last, next_pos = fused.prefill(input_ids, attention_mask, cache)
    # index_select, not `x[row_prompt]`: the latter's backward (index_put_ with accumulate)
    # adds the rows of a group with atomic adds on CPU, in an order that changes from run
    # to run with two or more threads; index_add_ adds them in row order (deterministic).
    hidden = [last.index_select(0, row_prompt)[:, None]]  # predicts response token 0
    if needed > 1:
        inputs = response_ids[:, : needed - 1].to(device).long()  # token t predicts t+1
        keys_present = present[:, : needed - 1]
        pos = next_pos[row_prompt][:, None] + torch.arange(needed - 1, device=device)[None]
        causal = torch.ones(needed - 1, needed - 1, dtype=torch.bool, device=device).tril()
        allowed = torch.cat(
            [
                attention_mask.bool()[row_prompt][:, None, :].expand(-1, needed - 1, -1),
                causal[None] & keys_present[:, None, :],
            ],
            -1,
        )[:, None]  # (B, 1, S, L + S)
        cache = [(k.index_select(0, row_prompt), v.index_select(0, row_prompt)) for k, v in cache]
        hidden.append(fused.forward(inputs, pos, width, allowed, cache))
    hidden = torch.cat(hidden, 1)  # (B, needed, H)
    return F.pad(hidden, (0, 0, 0, steps - needed))


def left_pad(
    rows: list[list[int]], pad_id: int, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded `input_ids` (B, P) and `attention_mask` (B, P) of token-id lists: the
    sampler's prompt layout, which the shared-prefix forward reuses."""
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, row in enumerate(rows):
        if row:
            input_ids[b, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            attention_mask[b, width - len(row) :] = 1
    return input_ids.to(device), attention_mask.to(device)
