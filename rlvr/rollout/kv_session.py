"""A stateful decoding session over an `HFEngine` that keeps every row's KV cache between
calls, so a multi-turn episode prefills only what is new each turn (the environment's
observation, and the turn's last sampled token, whose keys were never computed) instead
of its whole context.

`generate_ids(contexts, params, generator, rows)` samples like `HFEngine.generate_ids`;
`rows[i]` names the row of the previous call that context i continues. The cache of that
row is reused up to the longest common prefix of the ids it holds and context i, checked
token by token, so tokens sampled past a stop string (kept in the cache but cut from the
episode) are dropped and a wrong `rows` costs speed, never correctness. At least the
context's last token is always prefilled: its hidden state predicts the next token.

Layout: every row's reused keys/values are gathered, right-aligned, into columns [0, A)
of a new cache (A = the longest reused prefix), the new tokens are left-padded into
[A, A + S) and decoded tokens follow; rotary positions are the tokens' indices in their
context, as when the context is prefilled whole, and holes are masked. The numbers
equal a full re-prefill up to floating-point reduction order (tests/rollout prove it:
same tokens and log-probs within 1e-5; the RNG draws one multinomial per row and step
either way). Both of the engine's paths are covered: rlvr's lean decode loop
(`StaticDecoder.decode_from`) and the model's own forward with a `DynamicCache`
(`past_key_values`). Models with sliding-window or non-attention layers (their caches
drop or transform columns), dynamic RoPE (its angles follow the length) and wrapped
engines get no session (`open_session` → None): the caller re-prefills. The precision
wrappers keep theirs: a bf16 sampler copy is an HFEngine of its own, and an engine under
the trainer's autocast runs its session under that autocast too.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from rlvr.models.context import response_limits
from rlvr.models.fused_llama import STATIC_ROPE_TYPES
from rlvr.rollout.base import Generation, SamplingParams
from rlvr.rollout.hf_engine import HFEngine, decode_callbacks
from rlvr.vision.prompts import image_inputs, image_tail, shared_prefix

Cache = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values (B, Hkv, W, D)


def open_session(engine) -> KVSession | None:
    """A session over `engine` when it can keep caches between calls, else None. A wrapper
    that keeps the rows as they are opens its own (`engine.open_session()`, looked up on
    its class: the precision wrappers of rlvr.train.sampler.precision do)."""
    if hasattr(type(engine), "open_session"):
        return engine.open_session()
    if type(engine) is not HFEngine:  # a wrapper (e.g. ForcedInterruption) changes the rows
        return None
    if engine._static is not None:
        return KVSession(engine)
    cfg = getattr(engine.model, "config", None)
    layer_types = getattr(cfg, "layer_types", None) or ["full_attention"]
    window = getattr(cfg, "sliding_window", None) if getattr(cfg, "use_sliding_window", 1) else None
    # Dynamic RoPE rescales every position's angle with the length: cached keys go stale.
    rotary = getattr(getattr(engine.model, "base_model", None), "rotary_emb", None)
    rope = getattr(rotary, "rope_type", "default")
    full = all(t == "full_attention" for t in layer_types) and window is None
    return KVSession(engine) if full and rope in STATIC_ROPE_TYPES else None


def _common_length(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two id lists."""
    n = min(len(a), len(b))
    for k in range(n):
        if a[k] != b[k]:
            return k
    return n


class KVSession:
    """Calls of one multi-turn rollout over `engine`, each reusing the previous call's
    KV cache. `prefilled` and `reused` count the context tokens run through the model and
    read from the cache over all calls, once per prompt (its group forks after it)."""

    def __init__(self, engine: HFEngine) -> None:
        self.engine = engine
        self.cache: Cache = []
        self.ids: list[list[int]] = []  # per row: the tokens whose keys/values are cached
        self.cols: list[list[int]] = []  # per row: their cache columns
        self.prefilled = 0
        self.reused = 0

    def generate_ids(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        generator: torch.Generator,
        rows: list[int | None] | None = None,
    ) -> Generation:
        """`HFEngine.generate_ids`, with context i continuing row `rows[i]` of the
        previous call (None, or `rows` None: nothing to reuse)."""
        rows = [None] * len(prompts) if rows is None else rows
        if len(rows) != len(prompts):
            raise ValueError(f"rows has {len(rows)} entries for {len(prompts)} prompts")
        for r in rows:
            if r is not None and not 0 <= r < len(self.ids):
                raise ValueError(
                    f"rows holds {r}, not a row of the previous call (0..{len(self.ids) - 1})"
                )
        engine = self.engine
        group = params.group_size
        prompt_ids = [ids for ids in prompts for _ in range(group)]
        prompt_index = torch.arange(len(prompts)).repeat_interleave(group)
        was_training = engine.model.training
        engine.model.eval()
        try:
            with torch.no_grad():
                tokens, logprobs, lengths = self._decode(prompts, rows, params, generator)
        finally:
            engine.model.train(was_training)
        return engine._package(prompt_ids, prompt_index, tokens, logprobs, lengths, params)

    def _decode(self, prompts, rows, params, generator):
        """As `HFEngine._decode`, through the reused cache."""
        engine = self.engine
        device = next(engine.model.parameters()).device
        group = params.group_size
        reused = [
            0 if r is None else min(_common_length(self.ids[r], p), len(p) - 1)
            for p, r in zip(prompts, rows, strict=True)
        ]
        # Images: reuse only the same pixels; new ones reach the prefill (rlvr.vision).
        reused = [
            c if r is None else shared_prefix(self.ids[r], p, c)
            for p, r, c in zip(prompts, rows, reused, strict=True)
        ]
        pending = [image_tail(p, c) for p, c in zip(prompts, reused, strict=True)]
        self.prefilled += sum(map(len, pending))  # once per prompt: a group forks after
        self.reused += sum(reused)
        limits = response_limits(map(len, prompts), params.max_new_tokens, engine.context)
        sample, stop, logprobs, lengths = decode_callbacks(
            limits, params, generator, engine.tokenizer.eos_token_id, device
        )

        layout = _Layout(reused, pending, rows, self.cols, device, engine.tokenizer.pad_token_id)
        layout.images = {k: v.to(device) for k, v in image_inputs(pending).items()}
        if layout.images and engine._static is not None:
            raise ValueError(
                "prompts show images but the engine decodes through its text-only loop"
            )
        run = self._static if engine._static is not None else self._dynamic
        tokens = run(layout, group, max(limits), sample, stop)
        tokens = torch.stack(tokens, -1)  # (B, T)
        self._remember(prompts, layout, group, tokens)
        return tokens, torch.stack(logprobs, -1), lengths

    def _gathered(self, layout: _Layout, width: int) -> Cache:
        """The reused keys/values of each prefill row, right-aligned in columns [0, A) of
        a (P, Hkv, width, D) cache; the other columns are uninitialised."""
        out = []
        for k, v in self.cache:
            pair = []
            for old in (k, v):
                new = old.new_empty(len(layout.rows), old.shape[1], width, old.shape[3])
                if layout.reach:
                    index = layout.gather[:, None, :, None].expand(
                        -1, old.shape[1], -1, old.shape[3]
                    )
                    new[:, :, : layout.reach] = old.index_select(0, layout.sources).gather(2, index)
                pair.append(new)
            out.append(tuple(pair))
        return out

    def _static(self, layout: _Layout, group: int, max_new_tokens: int, sample, stop):
        """Prefill the new tokens and decode through rlvr's lean loop."""
        decoder = self.engine._static
        fused = decoder.fused
        width = layout.reach + layout.span
        total = width + max_new_tokens
        fused.begin(total, layout.device)
        if self.cache:
            prompt_cache = self._gathered(layout, width)
        else:
            prompt_cache = fused.new_cache(len(layout.rows), width, layout.device)
        hidden = fused.forward(
            layout.input_ids, layout.positions, layout.reach, layout.allowed(), prompt_cache
        )[:, -1]
        prompts = len(layout.rows)
        cache = fused.new_cache(prompts * group, total, layout.device)
        for (k, v), (k_prompt, v_prompt) in zip(cache, prompt_cache, strict=True):
            for full, part in ((k, k_prompt), (v, v_prompt)):
                full.view(prompts, group, *full.shape[1:])[..., :width, :] = part[:, None]
        keys_ok = torch.ones(prompts * group, 1, 1, total, dtype=torch.bool, device=layout.device)
        keys_ok[:, 0, 0, :width] = layout.keys_ok.repeat_interleave(group, 0)
        pos = layout.positions[:, -1:].repeat_interleave(group, 0)  # the last token's
        hidden = hidden.repeat_interleave(group, 0)
        try:
            tokens = decoder.decode_from(
                hidden, pos, width, keys_ok, cache, max_new_tokens, sample, stop
            )
        finally:
            fused.release()  # the next turn's `begin` reads the weights again
        self.cache = cache
        return tokens

    def _dynamic(self, layout: _Layout, group: int, max_new_tokens: int, sample, stop):
        """Prefill the new tokens and decode through the model's own forward, the reused
        keys/values handed over as a `DynamicCache`."""
        engine = self.engine
        if self.cache and layout.reach:
            cache = DynamicCache(ddp_cache_data=self._gathered(layout, layout.reach))
        else:
            cache = DynamicCache()
        attention_mask = layout.keys_ok.long()
        logits = engine._next_logits(
            layout.input_ids, attention_mask, layout.positions, cache, **layout.images
        )
        logits = logits.repeat_interleave(group, 0)  # (B, V)
        cache.batch_repeat_interleave(group)
        attention_mask = attention_mask.repeat_interleave(group, 0)
        position_ids = layout.positions[:, -1:].repeat_interleave(group, 0)
        tokens = []
        for step in range(max_new_tokens):
            if step > 0:
                ones = attention_mask.new_ones(len(attention_mask), 1)
                attention_mask = torch.cat([attention_mask, ones], -1)
                position_ids = position_ids + 1
                logits = engine._next_logits(
                    tokens[-1][:, None], attention_mask, position_ids, cache
                )
            tokens.append(sample(logits))
            if stop(tokens[-1], step):
                break
        self.cache = [(layer.keys, layer.values) for layer in cache.layers]
        return tokens

    def _remember(self, prompts, layout: _Layout, group: int, tokens: torch.Tensor) -> None:
        """Each output row's cached ids and their columns: the reused prefix, the new
        tokens, and every decoded token fed back (all but the last step's)."""
        fed = tokens[:, :-1].tolist()  # (B, T - 1)
        start = layout.reach + layout.span
        decoded = list(range(start, start + tokens.shape[1] - 1))
        ids, cols = [], []
        for i, (prompt, c, new) in enumerate(
            zip(prompts, layout.reused, layout.pending, strict=True)
        ):
            head = list(range(layout.reach - c, layout.reach))
            head += list(range(start - len(new), start))
            for g in range(group):
                ids.append(prompt + fed[i * group + g])
                cols.append(head + decoded)
        self.ids, self.cols = ids, cols


class _Layout:
    """Where each prefill row's reused and new tokens go in the next cache."""

    def __init__(self, reused, pending, rows, old_cols, device, pad_id) -> None:
        self.reused, self.pending, self.rows, self.device = reused, pending, rows, device
        self.images: dict[str, torch.Tensor] = {}  # the new tokens' pixel_values, if any
        self.reach = max(reused)  # A: columns of reused keys/values
        self.span = max(map(len, pending))  # S: columns of new tokens
        prompts, reach, span = len(pending), self.reach, self.span
        self.sources = torch.tensor([r or 0 for r in rows], dtype=torch.long, device=device)
        gather = torch.zeros(prompts, reach, dtype=torch.long)
        keys_ok = torch.zeros(prompts, reach + span, dtype=torch.bool)
        input_ids = torch.full((prompts, span), pad_id, dtype=torch.long)
        positions = torch.zeros(prompts, span, dtype=torch.long)
        for i, (c, new) in enumerate(zip(reused, pending, strict=True)):
            if c:
                gather[i, reach - c :] = torch.tensor(old_cols[rows[i]][:c])
                keys_ok[i, reach - c : reach] = True
            input_ids[i, span - len(new) :] = torch.tensor(new)
            keys_ok[i, reach + span - len(new) :] = True
            positions[i, span - len(new) :] = torch.arange(c, c + len(new))
        self.gather = gather.to(device)
        self.keys_ok = keys_ok.to(device)  # (P, A + S)
        self.input_ids, self.positions = input_ids.to(device), positions.to(device)

    def allowed(self) -> torch.Tensor:
        """(P, 1, S, A + S): the reused keys and, causally, the new tokens' own."""
        span = self.span
        causal = torch.ones(span, span, dtype=torch.bool, device=self.device).tril()
        allowed = self.keys_ok[:, None, :].repeat(1, span, 1)
        allowed[:, :, self.reach :] &= causal[None]
        return allowed[:, None]
