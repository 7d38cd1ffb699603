"""The trainer's forward pass: per-token log-probabilities of sampled responses.

Rows are `prompt + response`, right-padded, run in one forward pass. The LM head and the
log-softmax run in float32 (the "FP32 LM head" of MiniMax-M1, arXiv:2506.13585, which
found that low-precision logits make trainer and sampler probabilities disagree), so a
bf16 policy gives the same numbers as the sampler's float32 computation. With a large
vocabulary the head runs over chunks of positions, recomputed in the backward, so the
batch's whole logits never exist at once (`head_logprobs`).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from rlvr.models.fused_llama import shared_prefix_hidden, supports
from rlvr.models.lean.chunked_head import (
    FrozenHeadLogprobs,
    TrainedHeadLogprobs,
    entropy_into,
    gathered_logprobs,
    logprobs_without_grad,
    tempered,
)
from rlvr.models.lean.head_product import head_logits, packed_head
from rlvr.models.precision import full_precision
from rlvr.vision.prompts import image_inputs
from rlvr.vision.qwen_vl import placeholder_unsampled

SHARDED_HEAD = "rlvr_sharded_head"  # the attribute an FSDP-sharded policy carries


def pack_prompt_response(
    prompt_ids: list[list[int]],
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    pad_id: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded `prompt + response` rows and where each response starts.

    Returns `input_ids` (B, L), `attention_mask` (B, L) and `starts` (B,) with `L` = the
    longest `prompt + response` up to the response's last present token (no column is
    all padding). Response token t of row b sits at column `starts[b] + t` when that
    column exists; columns past a row's last present token are never needed.
    """
    batch, steps = response_ids.shape
    if len(prompt_ids) != batch:
        raise ValueError(f"{len(prompt_ids)} prompts for {batch} responses")
    lengths = torch.tensor([len(p) for p in prompt_ids], dtype=torch.long)
    if (lengths == 0).any():
        raise ValueError("every prompt needs at least one token to condition the response on")
    present = response_mask.cpu() > 0  # (B, T)
    ends = (present * torch.arange(1, steps + 1)).amax(-1)  # (B,) last present column + 1
    width = int((lengths + ends).max())
    input_ids = torch.full((batch, width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((batch, width), dtype=torch.long)
    for b, prompt in enumerate(prompt_ids):
        input_ids[b, : len(prompt)] = torch.tensor(prompt, dtype=torch.long)
        attention_mask[b, : len(prompt)] = 1
    rows, t = (torch.arange(steps)[None, :] < ends[:, None]).nonzero(as_tuple=True)
    input_ids[rows, lengths[rows] + t] = response_ids.long().cpu()[rows, t]
    attention_mask[rows, lengths[rows] + t] = present[rows, t].long()
    return input_ids, attention_mask, lengths


def lm_head_logits(model: torch.nn.Module, hidden: torch.Tensor, fp32_head: bool) -> torch.Tensor:
    """Logits from final hidden states, with the model's own logit processing
    (`process_logits`); with `fp32_head` the matmul itself runs in float32, also inside a
    bf16 autocast region (ScaleRL's FP32 head, arXiv:2510.13786)."""
    head = model.get_output_embeddings()
    if not fp32_head:
        if _float32_product(head, hidden):
            return process_logits(model.config, _linear(hidden, head.weight, head.bias))
        return process_logits(model.config, head(hidden).float())
    bias = None if head.bias is None else head.bias.float()
    with full_precision(hidden.device):
        return process_logits(model.config, _linear(hidden.float(), head.weight.float(), bias))


def packed_lm_head(model: torch.nn.Module, hidden: torch.Tensor):
    """`h ↦ lm_head_logits(model, h, fp32_head)` for hidden states `h` of `hidden`'s rows
    (with a float32 head `fp32_head` changes nothing, so either), the head's weight packed
    once for MKL's products (a decode loop's: `rlvr.models.lean.packed`, the same floats);
    None where the head's product is not a plain float32 one on a CPU (`_float32_product`)
    or no exact packed product exists here. The weights are read now: for one rollout, not
    across an update."""
    head = model.get_output_embeddings()
    if not _float32_product(head, hidden):
        return None
    bias = None if head.bias is None else head.bias.detach()
    logits = packed_head(head.weight.detach(), bias, len(hidden))
    if logits is None:
        return None
    return lambda h: process_logits(model.config, logits(h))


def _float32_product(head: torch.nn.Module, hidden: torch.Tensor) -> bool:
    """Whether `head(hidden)` is a plain float32 `F.linear` (no autocast) on a CPU."""
    return (
        hidden.device.type == "cpu"
        and type(head) is torch.nn.Linear
        and hidden.dtype == head.weight.dtype == torch.float32
        and not torch.is_autocast_enabled(hidden.device.type)
    )


def _linear(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
    """F.linear(hidden, weight, bias); on a CPU without a gradient, the same floats from
    `head_logits` over slices of V (a sampler's every decode step)."""
    differentiable = (hidden, weight) if bias is None else (hidden, weight, bias)
    if hidden.device.type != "cpu" or (
        torch.is_grad_enabled() and any(t.requires_grad for t in differentiable)
    ):
        return F.linear(hidden, weight, bias)
    flat = hidden.reshape(-1, hidden.shape[-1])
    out = flat.new_empty(flat.shape[0], weight.shape[0])
    return head_logits(flat, weight, bias, out).view(*hidden.shape[:-1], weight.shape[0])


def process_logits(config: object, logits: torch.Tensor) -> torch.Tensor:
    """What a model's own forward does to `lm_head(hidden)` and rlvr must do too, since it
    computes logits from hidden states: Cohere multiplies by `logit_scale`, Granite divides
    by `logits_scaling`, Gemma-2/3 soft-cap with `final_logit_softcapping` c:
    logits ← c·tanh(logits / c). Models with other processing are refused at load time
    (`rlvr.models.load.check_logits_match`). A Qwen-VL model's image placeholder is
    never written (`rlvr.vision.qwen_vl.placeholder_unsampled`)."""
    logits = placeholder_unsampled(config, logits)
    scale = getattr(config, "logit_scale", None)
    if scale is not None:
        logits = logits * scale
    divisor = getattr(config, "logits_scaling", None)
    if divisor is not None:
        logits = logits / divisor
    cap = getattr(config, "final_logit_softcapping", None)
    if cap is not None:
        logits = torch.tanh(logits / cap) * cap
    return logits


def response_hidden_states(
    backbone: torch.nn.Module,
    prompt_ids: list[list[int]],
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    pad_id: int,
) -> torch.Tensor:
    """Final hidden states (B, T, H) from which each response token is predicted: token t
    of the response is predicted from the hidden state one column before it. Prompts that
    show images (`rlvr.vision.ImagePrompt`) hand their pixels to the backbone too."""
    device = next(backbone.parameters()).device
    input_ids, attention_mask, starts = pack_prompt_response(
        prompt_ids, response_ids, response_mask, pad_id
    )
    # Positions count real tokens only, so they match the left-padded sampler exactly.
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    hidden = backbone(
        input_ids=input_ids.to(device),
        attention_mask=attention_mask.to(device),
        position_ids=position_ids.to(device),
        use_cache=False,
        **{k: v.to(device) for k, v in image_inputs(prompt_ids).items()},  # {} for text
    ).last_hidden_state  # (B, L, H)
    cols = starts[:, None] - 1 + torch.arange(response_ids.shape[1])[None, :]
    # Columns past the packed width predict absent tokens only: any column will do.
    cols = cols.clamp(max=input_ids.shape[1] - 1).to(device)
    return hidden.gather(1, cols[..., None].expand(-1, -1, hidden.shape[-1]))  # (B, T, H)


def response_logprobs(
    model: torch.nn.Module,
    prompt_ids: list[list[int]],
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    pad_id: int,
    temperature: float = 1.0,
    fp32_head: bool = True,
    return_entropy: bool = False,
    entropy_grad: bool = True,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """log π(y_t | x, y_<t) of every response token under `softmax(logits / temperature)`.

    Returns `logprobs` (B, T), 0 where `response_mask` is 0, differentiable w.r.t. the
    model; with `return_entropy`, also the per-token entropy (B, T) of that distribution
    (differentiable only with `entropy_grad`).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    # FSDP gathers the root module's weights only inside a registered forward method: a
    # sharded policy carries `response_head` as one (rlvr/train/distributed/fsdp.py).
    head = getattr(model, SHARDED_HEAD, None) or functools.partial(response_head, model)
    out = head(
        prompt_ids,
        response_ids,
        response_mask,
        pad_id,
        temperature,
        fp32_head,
        return_entropy,
        entropy_grad,
    )
    valid = response_mask.to(out[0].device) > 0
    # where, not multiply: a -inf log-prob at a padded position would turn into NaN.
    masked = tuple(torch.where(valid, x, torch.zeros_like(x)) for x in out)
    return masked if return_entropy else masked[0]


def response_head(
    model: torch.nn.Module,
    prompt_ids: list[list[int]],
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    pad_id: int,
    temperature: float,
    fp32_head: bool,
    return_entropy: bool,
    entropy_grad: bool,
) -> tuple[torch.Tensor, ...]:
    """(log π, [entropy]) (B, T) of every response position, padding not yet masked: the
    backbone (`response_hidden`), then the LM head (`head_logprobs`)."""
    hidden = response_hidden(model, prompt_ids, response_ids, response_mask, pad_id)
    targets = response_ids.to(hidden.device).long()
    return head_logprobs(
        model, hidden, targets, temperature, fp32_head, return_entropy, entropy_grad
    )


def response_hidden(
    model: torch.nn.Module,
    prompt_ids: list[list[int]],
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    pad_id: int,
) -> torch.Tensor:
    """Final hidden states (B, T, H) from which each response token is predicted."""
    # Llama-family models run each group's shared prompt once (same values and gradient).
    if supports(model):
        return shared_prefix_hidden(model, prompt_ids, response_ids, response_mask, pad_id)
    return response_hidden_states(model.base_model, prompt_ids, response_ids, response_mask, pad_id)


def head_logprobs(
    model: torch.nn.Module,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    fp32_head: bool,
    return_entropy: bool = False,
    entropy_grad: bool = True,
) -> tuple[torch.Tensor, ...]:
    """(log π(target), [entropy]) per position (...,) from final hidden states (..., H)
    and `targets` (...,), under softmax(lm_head(hidden) / temperature).

    A large vocabulary makes the logits the biggest tensor of the step (positions × V
    float32, kept for backward, and as much again for their gradient). When they would
    exceed `CHUNK_VALUES`, positions are taken in chunks of `CHUNK_VALUES // V`, and with
    gradients on each chunk runs under `torch.utils.checkpoint`: its logits are freed after
    the forward and recomputed (one chunk at a time) in the backward, which costs one more
    LM-head product; a head that does not train (LoRA's) needs no recompute
    (`FrozenHeadLogprobs`), and one that does (a full fine-tune's) recomputes with fewer
    passes over the logits, the same numbers (`TrainedHeadLogprobs`). Every position's
    numbers are the unchunked ones up to the float rounding of a row-subset matrix product
    (tests/models prove it)."""
    vocab = model.get_output_embeddings().weight.shape[0]

    def head(h: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits = tempered(lm_head_logits(model, h, fp32_head), temperature)
        return _logprobs_of_logits(logits, t, return_entropy, entropy_grad)

    rows = max(1, CHUNK_VALUES // vocab)
    if targets.numel() <= rows:
        return head(hidden, targets)
    # Chunks that autograd would recompute: a head that does not train needs no recompute,
    # one that does needs fewer passes over each chunk's logits than autograd's.
    entropy_grad = return_entropy and entropy_grad
    head_module = model.get_output_embeddings()
    process = functools.partial(process_logits, model.config)
    if frozen_head_applies(model, hidden, fp32_head, entropy_grad):
        return FrozenHeadLogprobs.apply(
            hidden, targets, head_module, process, temperature, return_entropy, rows
        )
    if trained_head_applies(model, hidden, fp32_head, entropy_grad):
        return TrainedHeadLogprobs.apply(
            hidden, targets, head_module.weight, process, temperature, return_entropy, rows,
            keeps_head_probabilities(model),
        )  # fmt: skip
    if not torch.is_grad_enabled() and _float32_head(model, hidden, fp32_head):
        return logprobs_without_grad(
            hidden, targets, head_module, process, temperature, return_entropy, rows
        )
    recompute = torch.is_grad_enabled()
    chunks = zip(
        hidden.reshape(-1, hidden.shape[-1]).split(rows),
        targets.reshape(-1).split(rows),
        strict=True,
    )
    parts = [
        # The head draws no random numbers: no RNG state to save and restore per chunk.
        checkpoint(head, h, t, use_reentrant=False, preserve_rng_state=False)
        if recompute
        else head(h, t)
        for h, t in chunks
    ]
    return tuple(torch.cat(column).view(targets.shape) for column in zip(*parts, strict=True))


def frozen_head_applies(
    model: torch.nn.Module, hidden: torch.Tensor, fp32_head: bool, entropy_grad: bool
) -> bool:
    """Whether `FrozenHeadLogprobs` computes the head: gradients wanted for the hidden
    states only (a plain `nn.Linear` head whose weights do not train, as under LoRA), no
    gradient through the entropy, float32 logits, and no logit processing but the image
    placeholder (whose probability is exactly 0: exp(−1e9) underflows)."""
    head = model.get_output_embeddings()
    return (
        hidden.requires_grad
        and not any(p.requires_grad for p in head.parameters())
        and _plain_head(model, hidden, fp32_head, entropy_grad)
    )


def trained_head_applies(
    model: torch.nn.Module, hidden: torch.Tensor, fp32_head: bool, entropy_grad: bool
) -> bool:
    """Whether `TrainedHeadLogprobs` computes the head: as `frozen_head_applies`, but for a
    bias-free head whose weight trains (a full fine-tune)."""
    head = model.get_output_embeddings()
    return (
        type(head) is torch.nn.Linear
        and head.bias is None
        and head.weight.requires_grad
        and _plain_head(model, hidden, fp32_head, entropy_grad)
    )


def keeps_head_probabilities(model: torch.nn.Module) -> bool:
    """Whether a trained head (`TrainedHeadLogprobs`) keeps each chunk's probabilities from
    its forward for its backward instead of recomputing the chunk's logits there: one
    LM-head product per chunk fewer (1.2 s of a 64-token SmolLM2 step, benchmarks/
    RESULTS.md), for V floats kept per response token. It does when the fused Llama
    forward runs the model (`supports`) and V ≤ L·(I + 2H): the memory budget counts per
    token the SwiGLU product and the normed inputs that its float32 full fine-tune does not
    keep (`rlvr.train.memory_budget.saved_floats_per_token`, counted all the same so that
    no run's micro-batches change), L·(I + 2H) floats, and the probabilities fit in them.
    The numbers are the same either way."""
    if not supports(model):
        return False
    config = model.config
    room = config.num_hidden_layers * (config.intermediate_size + 2 * config.hidden_size)
    return model.get_output_embeddings().weight.shape[0] <= room


def _plain_head(
    model: torch.nn.Module, hidden: torch.Tensor, fp32_head: bool, entropy_grad: bool
) -> bool:
    """A gradient is being taken through a plain `nn.Linear` head into float32 logits with
    no processing but the image placeholder, and none through the entropy."""
    return torch.is_grad_enabled() and not entropy_grad and _float32_head(model, hidden, fp32_head)


def _float32_head(model: torch.nn.Module, hidden: torch.Tensor, fp32_head: bool) -> bool:
    """A plain `nn.Linear` head into float32 logits with no processing but the image
    placeholder."""
    return (
        type(model.get_output_embeddings()) is torch.nn.Linear
        and (
            fp32_head
            or (hidden.dtype == torch.float32 and not torch.is_autocast_enabled(hidden.device.type))
        )
        and all(
            getattr(model.config, name, None) is None
            for name in ("logit_scale", "logits_scaling", "final_logit_softcapping")
        )
    )


def _logprobs_of_logits(
    logits: torch.Tensor, targets: torch.Tensor, return_entropy: bool, entropy_grad: bool
) -> tuple[torch.Tensor, ...]:
    """(log softmax(logits)[target], [entropy]) per position of (..., V) logits."""
    token_logprobs = gathered_logprobs(logits, targets)
    if not return_entropy:
        return (token_logprobs,)
    # Without an entropy bonus the entropy is only logged: keep it out of the autograd graph.
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        return token_logprobs, chunked_entropy(logits)


# Logits per chunk of positions (`head_logprobs`, `chunked_entropy`): about 16 M float32
# values (64 MiB) at a time.
CHUNK_VALUES = 1 << 24


def chunked_entropy(logits: torch.Tensor) -> torch.Tensor:
    """H = −Σ_v p_v log p_v of softmax(logits) per position (...,), computed over chunks
    of positions so that at most `CHUNK_VALUES` log-probs exist at once."""
    flat = logits.reshape(-1, logits.shape[-1])
    rows = max(1, CHUNK_VALUES // max(flat.shape[-1], 1))
    parts = []
    floor = torch.finfo(flat.dtype).min  # 0·log 0 = 0, not 0·(−inf) = NaN
    # Without a gradient the clamp and the product reuse their operands' memory: the
    # same floats, two (positions × V) buffers fewer.
    in_place = not (torch.is_grad_enabled() and logits.requires_grad)
    for chunk in flat.split(rows):
        if in_place:
            parts.append(entropy_into(chunk, torch.empty_like(chunk), torch.empty_like(chunk)))
        else:
            log_probs = chunk.log_softmax(-1)
            parts.append(-(log_probs.exp() * log_probs.clamp(min=floor)).sum(-1))
    return torch.cat(parts).reshape(logits.shape[:-1])
