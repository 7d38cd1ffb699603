"""Rollouts with a Hugging Face causal LM: batched sampling with a KV cache.

Every prompt is repeated `group_size` times and left-padded, so all rows decode in
lock-step; Llama-family models (Qwen2, Llama, Mistral) decode through `static_decode`'s
lean loop with a preallocated cache, other models through their own forward. The logits
go through the same float32 LM head as the trainer's forward (`rlvr.models.logprobs`), so
with top_p = 1 `sampler_logprobs` matches the trainer's log-probs up to floating-point
reduction order. With top_p < 1 they are the log-probs of the renormalised nucleus, the
distribution actually sampled from.
"""

from __future__ import annotations

import functools
import inspect
import warnings

import torch
from transformers import DynamicCache

from rlvr.models.context import context_length, response_limits
from rlvr.models.fused_llama import left_pad, supports
from rlvr.models.logprobs import lm_head_logits, tempered
from rlvr.models.tokenizer import Tokenizer
from rlvr.rollout.base import Generation, SamplingParams, TextPrompts
from rlvr.rollout.draw import multinomial_one
from rlvr.rollout.static_decode import StaticDecoder
from rlvr.vision.prompts import image_inputs


def top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero every token outside the nucleus: the smallest most-probable set whose mass
    reaches `top_p` (Holtzman et al., arXiv:1904.09751). Returns unnormalised (B, V)."""
    if top_p >= 1.0:
        return probs
    sorted_probs, order = probs.sort(-1, descending=True)
    mass_before = sorted_probs.cumsum(-1) - sorted_probs  # the top token always survives
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
    return torch.zeros_like(probs).scatter_(-1, order, sorted_probs)


def nucleus_log_probs(log_probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """log-probs of the distribution top-p sampling actually draws from: the nucleus
    renormalised, p̃(v) = p(v) / Σ_{u∈nucleus} p(u) inside it, −inf outside.
    (B, V) → (B, V); with top_p = 1 the input itself."""
    if top_p >= 1.0:
        return log_probs
    kept = top_p_filter(log_probs.exp(), top_p) > 0
    inside = log_probs.masked_fill(~kept, float("-inf"))
    return inside - inside.logsumexp(-1, keepdim=True)


def top_k_log_probs(log_probs: torch.Tensor, top_k: int) -> torch.Tensor:
    """log-probs of the distribution top-k sampling draws from: the k most probable
    tokens renormalised, −inf elsewhere (ties at the k-th value are all kept). (B, V) →
    (B, V); with top_k = -1 or ≥ V the input itself."""
    if top_k == -1 or top_k >= log_probs.shape[-1]:
        return log_probs
    kth = log_probs.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
    inside = log_probs.masked_fill(log_probs < kth, float("-inf"))
    return inside - inside.logsumexp(-1, keepdim=True)


def sample_next(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """One sampling step: tokens (B,) drawn from softmax(logits / T) cut to the top-k
    tokens, then to the top-p nucleus, renormalised, and their log-probs (B,) under that
    same distribution (what TIS must correct toward)."""
    log_probs = tempered(logits, params.temperature).log_softmax(-1)  # (B, V)
    log_probs = top_k_log_probs(log_probs, params.top_k)
    log_probs = nucleus_log_probs(log_probs, params.top_p)
    # torch.multinomial's draw, in less than half its time on a CPU (rlvr/rollout/draw.py).
    token = multinomial_one(log_probs.exp().to(generator.device), generator)
    token = token.to(logits.device)  # (B, 1)
    return token[:, 0], log_probs.gather(-1, token)[:, 0]


def decode_callbacks(limits, params: SamplingParams, generator, eos_id: int, device):
    """What a decode loop is given, for prompts whose rows may take `limits` tokens each
    (repeated over each group): `sample` draws the next token and appends its log-prob to
    `logprobs`; `stop` ends rows at EOS or at their limit, records each row's length in
    `lengths` (EOS counted), and says whether every row has ended."""
    lengths = torch.tensor(limits, dtype=torch.long, device=device)
    lengths = lengths.repeat_interleave(params.group_size)
    last_step = lengths - 1
    done = torch.zeros(len(lengths), dtype=torch.bool, device=device)
    logprobs: list[torch.Tensor] = []

    def sample(logits: torch.Tensor) -> torch.Tensor:
        token, logprob = sample_next(logits, params, generator)
        logprobs.append(logprob)
        return token

    def stop(token: torch.Tensor, step: int) -> bool:
        ended = ~done & ((token == eos_id) | (last_step == step))
        lengths.masked_fill_(ended, step + 1)
        done.logical_or_(ended)
        return bool(done.all())

    return sample, stop, logprobs, lengths


def _cache_kwarg(model: torch.nn.Module) -> str:
    """transformers 5 renamed `past_key_values` to `cache`; accept either."""
    params = inspect.signature(model.base_model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class HFEngine(TextPrompts):
    """`RolloutEngine` over an in-process `transformers` causal LM."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Tokenizer,
        fp32_head: bool = True,
        static_cache: bool = True,
        compile: bool = False,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.fp32_head = fp32_head
        self._cache_kwarg = _cache_kwarg(model)
        self.context = context_length(model)
        # Llama-family models decode through rlvr's lean loop; anything else through
        # the model's own forward.
        lean = static_cache and supports(model)
        self._static = StaticDecoder(model, fp32_head, compile) if lean else None
        if compile and not lean:
            warnings.warn(
                "engine_options.compile has no effect: it compiles rlvr's lean decode step, "
                f"which {type(model).__name__} does not use (Llama-family models only, "
                "rlvr.models.fused_llama.supports); sampling runs eagerly",
                stacklevel=2,
            )

    def generate_ids(
        self, prompts: list[list[int]], params: SamplingParams, generator: torch.Generator
    ) -> Generation:
        """`generate` from prompts given as token ids (used to continue partial responses)."""
        prompt_ids = [ids for ids in prompts for _ in range(params.group_size)]
        prompt_index = torch.arange(len(prompts)).repeat_interleave(params.group_size)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                tokens, logprobs, lengths = self._decode(prompt_ids, params, generator)
        finally:
            self.model.train(was_training)
        return self._package(prompt_ids, prompt_index, tokens, logprobs, lengths, params)

    def sync_weights(self) -> None:
        """Nothing to do: this engine samples with the trainer's own module."""

    def score_ids(self, prompts: list[list[int]], responses: list[list[int]]) -> list[torch.Tensor]:
        """Log-probs of given responses through the sampling path itself (the same decode
        loop and KV cache, each step's token forced instead of drawn), at temperature 1."""
        device = next(self.model.parameters()).device
        steps = max(1, *map(len, responses))
        pad = self.tokenizer.pad_token_id
        forced = torch.full((len(responses), steps), pad, dtype=torch.long, device=device)
        for row, ids in enumerate(responses):
            forced[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        logprobs = []

        def force(logits: torch.Tensor) -> torch.Tensor:
            token = forced[:, len(logprobs)]
            logprobs.append(logits.float().log_softmax(-1).gather(-1, token[:, None])[:, 0])
            return token

        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                input_ids, attention_mask = left_pad(prompts, pad, device)
                decode = self._decoder(prompts, device)
                decode(input_ids, attention_mask, 1, steps, force, lambda _, s: s + 1 >= steps)
        finally:
            self.model.train(was_training)
        scored = torch.stack(logprobs, -1).cpu()  # (B, steps)
        return [scored[row, : len(ids)] for row, ids in enumerate(responses)]

    def _decoder(self, prompts: list[list[int]], device: torch.device):
        """The decode loop for `prompts`: rlvr's lean loop or the model's own forward; only
        the latter takes the pixels of prompts that show images (`rlvr.vision`)."""
        images = {k: v.to(device) for k, v in image_inputs(prompts).items()}
        if not images:
            return self._static.decode if self._static is not None else self._dynamic_decode
        if self._static is not None:
            raise ValueError(
                f"prompts show images but {type(self.model).__name__} decodes through "
                f"rlvr's text-only lean loop; image prompts need a vision-language model"
            )
        return functools.partial(self._dynamic_decode, images=images)

    def _next_logits(
        self, input_ids, attention_mask, position_ids, cache, **images: torch.Tensor
    ) -> torch.Tensor:
        hidden = self.model.base_model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            **{self._cache_kwarg: cache},
            **images,  # the prefill's pixel_values; nothing for text (rlvr.vision)
        ).last_hidden_state[:, -1]  # (B, H)
        return lm_head_logits(self.model, hidden, self.fp32_head)  # (B, V) float32

    def _decode(
        self, prompt_ids: list[list[int]], params: SamplingParams, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Incremental decoding of `group_size` samples per prompt. Returns tokens (B, T),
        their log-probs (B, T) and response lengths (B,) counting EOS; entries past a
        row's length are garbage for `_package` to mask."""
        device = next(self.model.parameters()).device
        group = params.group_size
        # A group shares its prompt: each prompt is prefilled once, its KV cache copied.
        prompts = prompt_ids[::group]
        input_ids, attention_mask = left_pad(prompts, self.tokenizer.pad_token_id, device)
        # A row stops at the model's context even when max_new_tokens would go past it.
        limits = response_limits(map(len, prompt_ids[::group]), params.max_new_tokens, self.context)
        sample, stop, logprobs, lengths = decode_callbacks(
            limits, params, generator, self.tokenizer.eos_token_id, device
        )
        decode = self._decoder(prompts, device)
        tokens = decode(input_ids, attention_mask, group, max(limits), sample, stop)
        return torch.stack(tokens, -1), torch.stack(logprobs, -1), lengths

    def _dynamic_decode(
        self, input_ids, attention_mask, group, max_new_tokens, sample, stop, images=None
    ):
        """The generic path for any `transformers` causal LM: its own forward with a
        `DynamicCache`. Same contract as `StaticDecoder.decode`; `images` (the prompts'
        `pixel_values`) go to the prefill, after which they live in the cache."""
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        logits = self._next_logits(input_ids, attention_mask, position_ids, cache, **(images or {}))
        logits = logits.repeat_interleave(group, 0)  # (B, V)
        cache.batch_repeat_interleave(group)
        attention_mask = attention_mask.repeat_interleave(group, 0)
        position_ids = position_ids[:, -1:].repeat_interleave(group, 0)
        tokens = []
        for step in range(max_new_tokens):
            if step > 0:
                attention_mask = torch.cat(
                    [attention_mask, attention_mask.new_ones(len(attention_mask), 1)], -1
                )
                position_ids = position_ids + 1
                logits = self._next_logits(tokens[-1][:, None], attention_mask, position_ids, cache)
            tokens.append(sample(logits))
            if stop(tokens[-1], step):
                break
        return tokens

    def _package(self, prompt_ids, prompt_index, tokens, logprobs, lengths, params) -> Generation:
        tokens, logprobs, lengths = tokens.cpu(), logprobs.cpu().float(), lengths.cpu()
        steps = tokens.shape[1]
        mask = torch.arange(steps)[None, :] < lengths[:, None]  # (B, T)
        eos = self.tokenizer.eos_token_id
        truncated = tokens.gather(1, (lengths - 1)[:, None])[:, 0] != eos
        texts = [
            self.tokenizer.decode(row[: n - (not cut)].tolist(), skip_special=True)
            for row, n, cut in zip(tokens, lengths.tolist(), truncated.tolist(), strict=True)
        ]
        return Generation(
            prompt_ids=prompt_ids,
            response_ids=tokens.masked_fill(~mask, self.tokenizer.pad_token_id),
            response_mask=mask.float(),
            sampler_logprobs=logprobs.masked_fill(~mask, 0.0),
            truncated=truncated,
            prompt_index=prompt_index,
            texts=texts,
        )
