"""A lean decode loop for Llama-family causal LMs (Qwen2, Llama, Mistral without sliding
windows): the same arithmetic as the `transformers` eager forward, with a preallocated
(static) KV cache, fused QKV and gate/up projections and a precomputed rotary table, so a
decode step costs a few dozen tensor ops instead of a framework forward.

The weights are read from the model at every `decode` call (never copied into a second
model), the LM head goes through `rlvr.models.logprobs.lm_head_logits` like the trainer's
forward, and the sampling step is the caller's function, so the numbers equal the generic
`transformers` path up to floating-point reduction order (tests/rollout prove it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from rlvr.models.logprobs import lm_head_logits

SUPPORTED_MODEL_TYPES = ("qwen2", "llama", "mistral")

Sampler = Callable[[torch.Tensor], torch.Tensor]  # (B, V) float32 logits -> (B,) token ids


def supports(model: torch.nn.Module) -> bool:
    """True when `model` is a Llama-family LM whose forward this module reproduces: SiLU
    gated MLP, RMSNorm, rotary positions, full attention in every layer."""
    cfg = getattr(model, "config", None)
    base = getattr(model, "base_model", None)
    if cfg is None or base is None or getattr(cfg, "model_type", None) not in SUPPORTED_MODEL_TYPES:
        return False
    layer_types = getattr(cfg, "layer_types", None) or ["full_attention"]
    return (
        getattr(cfg, "hidden_act", None) == "silu"
        and all(t == "full_attention" for t in layer_types)
        and all(hasattr(base, name) for name in ("embed_tokens", "layers", "norm", "rotary_emb"))
    )


@dataclass
class _Layer:
    ln1: torch.Tensor
    ln2: torch.Tensor
    qkv_w: torch.Tensor
    qkv_b: torch.Tensor | None
    o_w: torch.Tensor
    o_b: torch.Tensor | None
    gate_up_w: torch.Tensor
    gate_up_b: torch.Tensor | None
    down_w: torch.Tensor
    down_b: torch.Tensor | None


def _cat_bias(*linears: torch.nn.Linear) -> torch.Tensor | None:
    if all(m.bias is None for m in linears):
        return None
    return torch.cat(
        [m.bias if m.bias is not None else m.weight.new_zeros(m.out_features) for m in linears]
    )


def _fused(layer: torch.nn.Module) -> _Layer:
    attn, mlp = layer.self_attn, layer.mlp
    return _Layer(
        ln1=layer.input_layernorm.weight,
        ln2=layer.post_attention_layernorm.weight,
        qkv_w=torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]),
        qkv_b=_cat_bias(attn.q_proj, attn.k_proj, attn.v_proj),
        o_w=attn.o_proj.weight,
        o_b=attn.o_proj.bias,
        gate_up_w=torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
        gate_up_b=_cat_bias(mlp.gate_proj, mlp.up_proj),
        down_w=mlp.down_proj.weight,
        down_b=mlp.down_proj.bias,
    )


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm (Zhang & Sennrich 2019) in float32, as `Qwen2RMSNorm`/`LlamaRMSNorm`."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class StaticDecoder:
    """Prefill once per prompt, then decode `group_size` rows per prompt in lock-step."""

    def __init__(self, model: torch.nn.Module, fp32_head: bool) -> None:
        cfg = model.config
        self.model = model
        self.fp32_head = fp32_head
        self.heads = cfg.num_attention_heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.eps = cfg.rms_norm_eps
        self.scale = self.head_dim**-0.5

    def decode(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        group: int,
        max_new_tokens: int,
        sample: Sampler,
        stop: Callable[[torch.Tensor, int], bool],
    ) -> list[torch.Tensor]:
        """Left-padded prompts `input_ids` (P, L) → sampled tokens, one (P·group,) tensor
        per step; `stop(token, step)` is asked after every step whether every row ended."""
        base = self.model.base_model
        self.layers = [_fused(layer) for layer in base.layers]
        prompts, width = input_ids.shape
        total = width + max_new_tokens
        device, dtype = input_ids.device, base.embed_tokens.weight.dtype
        positions = torch.arange(total, device=device)[None]
        cos, sin = base.rotary_emb(base.embed_tokens.weight[:1], positions)  # (1, total, D)
        self.cos, self.sin = cos[0].to(dtype), sin[0].to(dtype)
        shape = (prompts, self.kv_heads, total, self.head_dim)
        self.cache = [
            tuple(torch.zeros(shape, dtype=dtype, device=device) for _ in "kv") for _ in self.layers
        ]
        real = attention_mask.bool()
        pos = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (P, L)
        causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
        allowed = causal[None] & real[:, None, :]  # (P, L, L)
        hidden = self._forward(input_ids, pos, 0, allowed[:, None])[:, -1]  # (P, H)
        # The group shares its prompt: copy the prefilled cache `group` times.
        self.cache = [
            (k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)) for k, v in self.cache
        ]
        hidden = hidden.repeat_interleave(group, 0)
        keys_ok = torch.ones(prompts * group, 1, 1, total, dtype=torch.bool, device=device)
        keys_ok[:, 0, 0, :width] = real.repeat_interleave(group, 0)
        pos = pos[:, -1:].repeat_interleave(group, 0)  # (B, 1)
        tokens = []
        for step in range(max_new_tokens):
            if step > 0:
                pos = pos + 1
                col = width + step - 1
                hidden = self._forward(tokens[-1][:, None], pos, col, keys_ok[..., : col + 1])[
                    :, -1
                ]
            token = sample(lm_head_logits(self.model, hidden, self.fp32_head))
            tokens.append(token)
            if stop(token, step):
                break
        return tokens

    def _forward(
        self, ids: torch.Tensor, pos: torch.Tensor, col: int, allowed: torch.Tensor
    ) -> torch.Tensor:
        """Hidden states (B, S, H) of `ids` (B, S) written to cache columns [col, col+S);
        `allowed` (B, 1, S, col+S) says which cached keys each query may attend to."""
        base = self.model.base_model
        x = base.embed_tokens(ids)
        batch, steps, _ = x.shape
        cos, sin = self.cos[pos][:, None], self.sin[pos][:, None]  # (B, 1, S, D)
        nq, nkv, d = self.heads, self.kv_heads, self.head_dim
        rep = nq // nkv
        neg = torch.finfo(x.dtype).min
        for layer, (k_cache, v_cache) in zip(self.layers, self.cache, strict=True):
            h = _rms_norm(x, layer.ln1, self.eps)
            q, k, v = F.linear(h, layer.qkv_w, layer.qkv_b).split([nq * d, nkv * d, nkv * d], -1)
            q = q.view(batch, steps, nq, d).transpose(1, 2)
            k = k.view(batch, steps, nkv, d).transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin
            k_cache[:, :, col : col + steps] = k * cos + _rotate_half(k) * sin
            v_cache[:, :, col : col + steps] = v.view(batch, steps, nkv, d).transpose(1, 2)
            keys, values = k_cache[:, :, : col + steps], v_cache[:, :, : col + steps]
            # Grouped-query attention without copying K/V: query heads h·rep … h·rep+rep−1
            # share key/value head h, as `repeat_kv` arranges them.
            q = q.reshape(batch, nkv, rep * steps, d)
            scores = (q @ keys.transpose(-1, -2)).view(batch, nq, steps, -1) * self.scale
            scores = scores.masked_fill(~allowed, neg)
            probs = scores.softmax(-1, dtype=torch.float32).to(x.dtype)
            out = probs.view(batch, nkv, rep * steps, -1) @ values  # (B, nkv, rep·S, D)
            out = out.view(batch, nq, steps, d).transpose(1, 2).reshape(batch, steps, nq * d)
            x = x + F.linear(out, layer.o_w, layer.o_b)
            h = _rms_norm(x, layer.ln2, self.eps)
            gate, up = F.linear(h, layer.gate_up_w, layer.gate_up_b).chunk(2, -1)
            x = x + F.linear(F.silu(gate) * up, layer.down_w, layer.down_b)
        return _rms_norm(x, base.norm.weight, self.eps)
