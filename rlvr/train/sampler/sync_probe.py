"""The weight-sync probe: does the rollout engine sample from the weights just trained?

A sync that silently fails is the worst bug a peer has shipped (verl #7495: the rollout
sampled from the base model for two months of runs; unsloth #8701): the run trains on,
the curves look plausible, and nothing checks. The probe fixes a few prompts of the
task's own training split with their reference completions at the start, and after each
sync (and once before the first step) compares the engine's log-probs of those tokens
(`RolloutEngine.score_ids`, through the engine's own weights and kernels) with the
trainer's (`response_logprobs`), both at temperature 1. A mean |difference| above the
tolerance stops the run with one line naming the step and the gap.

The probe runs after the syncs of steps 1 and 2 and then of every `sync_probe_every`-th
step (default 10): a sync that never lands, or lands the wrong weights, is caught at step
1; one that starts failing later is caught within `sync_probe_every` steps. On SmolLM2-135M
a probe costs about 1.4 s, 7–10 % of a GRPO step; every 10th step makes it about 1 %.

The tolerance is per engine: the HF engine shares the trainer's module, so only the
decode path's rounding separates them (tight in float32); vLLM holds its own copy in its
own kernels (bf16), so its noise floor is higher. `sync_probe_tol` overrides both.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import torch

from rlvr.models.logprobs import response_logprobs
from rlvr.vision.prompts import encode_image_problems

PROBE_ITEMS = 4
PROBE_MAX_TOKENS = 32
ALWAYS_PROBED = 2
"""The first steps whose syncs are always probed, whatever `sync_probe_every` says."""
TOLERANCE = {"hf_float32": 1e-3, "hf": 5e-2, "vllm": 5e-2}
"""Default mean |log π_engine − log π_trainer| allowed, by engine (and policy dtype)."""


class WeightSyncError(ValueError):
    """The engine does not sample from the trainer's weights."""


def default_tolerance(rollout_engine: str, model: torch.nn.Module) -> float:
    dtype = next(model.parameters()).dtype
    if rollout_engine == "hf" and dtype == torch.float32:
        return TOLERANCE["hf_float32"]
    return TOLERANCE[rollout_engine]


@dataclass
class SyncProbe:
    """A fixed probe batch and the tolerance its gap must stay under."""

    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    tolerance: float
    every: int = 1
    started: bool = field(default=False)

    def due(self, step: int) -> bool:
        """Whether the sync after step `step` (1-based) is probed: the first
        `ALWAYS_PROBED`, then every `every`-th."""
        return step <= ALWAYS_PROBED or step % self.every == 0

    @classmethod
    def from_problems(cls, problems, tokenizer, tolerance: float) -> SyncProbe:
        """The first `PROBE_ITEMS` problems (as the engine sees them: chat template
        applied) with their reference completions + EOS, cut to `PROBE_MAX_TOKENS`."""
        picked = list(problems[:PROBE_ITEMS])
        if not picked:
            raise ValueError("sync_probe needs at least one training problem to probe with")
        prompts = encode_image_problems(tokenizer, picked)  # text: tokenizer.encode(p.prompt)
        responses = [
            [*tokenizer.encode(p.target), tokenizer.eos_token_id][:PROBE_MAX_TOKENS] for p in picked
        ]
        return cls(prompts, responses, tolerance)

    @torch.no_grad()
    def gap(self, engine, model: torch.nn.Module, pad_id: int, fp32_head: bool):
        """(mean, max) over the probe's tokens of |log π_engine − log π_trainer|; None
        when the trainer's own log-probs are not finite (the policy diverged: not a sync
        failure, and the run's divergence check names the step)."""
        scored = engine.score_ids(self.prompt_ids, self.response_ids)
        steps = max(map(len, self.response_ids))
        ids = torch.full((len(self.response_ids), steps), pad_id, dtype=torch.long)
        mask = torch.zeros(len(self.response_ids), steps)
        for row, r in enumerate(self.response_ids):
            ids[row, : len(r)] = torch.tensor(r)
            mask[row, : len(r)] = 1.0
        trainer = response_logprobs(model, self.prompt_ids, ids, mask, pad_id, 1.0, fp32_head)
        if not torch.isfinite(trainer[mask > 0]).all():
            return None
        diffs = torch.cat(
            [
                (s.float() - trainer[row, : len(s)].float().cpu()).abs()
                for row, s in enumerate(scored)
            ]
        )
        return float(diffs.mean()), float(diffs.max())

    def check(self, engine, model, pad_id: int, fp32_head: bool, when: str) -> dict[str, float]:
        """Raise `WeightSyncError` naming `when` (e.g. "after step 3") if the gap exceeds
        the tolerance; else the probe's metrics."""
        started = time.perf_counter()
        gap = self.gap(engine, model, pad_id, fp32_head)
        if gap is None:
            return {"time/sync_probe_s": time.perf_counter() - started}
        mean, largest = gap
        if not mean <= self.tolerance:  # NaN fails too
            raise WeightSyncError(
                f"weight-sync probe {when}: the rollout engine's log-probs of the "
                f"{len(self.prompt_ids)} probe responses differ from the trainer's by "
                f"{mean:.3g} on average (max {largest:.3g}) > sync_probe_tol "
                f"{self.tolerance:.3g}: the engine is not sampling from the trained weights "
                f"(a skipped or partial weight sync)"
            )
        return {"train/sync_probe_gap": mean, "time/sync_probe_s": time.perf_counter() - started}


def make_sync_probe(cfg, task, tokenizer, model: torch.nn.Module) -> SyncProbe | None:
    """The run's probe (None with `sync_probe: false`), on the task's training prompts."""
    if not cfg.sync_probe:
        return None
    if getattr(cfg, "sampler_lag", 0):
        warnings.warn(
            f"sync_probe is off with sampler_lag={cfg.sampler_lag}: the sampler holds older "
            f"weights than the trainer by design; set sync_probe: false to silence this",
            stacklevel=2,
        )
        return None
    tolerance = cfg.sync_probe_tol or default_tolerance(cfg.rollout_engine, model)
    probe = SyncProbe.from_problems(task.problems("train"), tokenizer, tolerance)
    probe.every = cfg.sync_probe_every
    return probe
