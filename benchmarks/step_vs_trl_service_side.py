"""The lab-facing contestant of `step_vs_trl.py --service`: the same GRPO step written
against rlvr.service's primitives, as a lab script (Tinker / PyTRIO style) writes it.

Per step: a sampler of the current weights (`save_weights_and_get_sampling_client`, the
service's in-memory sync: LoRA snapshots the adapters, a full fine-tune every weight),
one `sample` of `group` rows per prompt (exactly `tokens` new tokens: the benchmark's
tokenizer has no reachable EOS, as for rlvr's loop), the rewards, GRPO's group-normalised
advantages computed here, one datum per row, one `forward_backward` over all datums with
`importance_sampling` (DAPO: `ppo` with clip thresholds 0.8 / 1.28), one `optim_step`
(AdamW as the other contestants: β (0.9, 0.999), ε 1e-8, no decay, gradient norm
clipped to 1).

The service's losses are sums over tokens; GRPO's loss is the mean over rows of each
row's token mean, so each row's advantage is scaled by 1/(B·|y_i|) (DAPO's token mean:
1/Σ|y|); every surrogate is positively homogeneous in Â, so this is that loss exactly.

How it departs from a lab script: the `TrainingClient` is built over the benchmark's
in-memory model (the same seed-0 weights the other contestants check by digest), prepared
as `ServiceClient` prepares a loaded model (rlvr's LoRA, `dropout_off`), instead of
`ServiceClient.create_*_training_client(path)`, which would load a tokenizer whose EOS the
model can emit, so rows could end early. The service has no KL term: β must be 0.
"""

from __future__ import annotations

import statistics
import tempfile
import time

import step_vs_trl_work as work
import torch
from step_vs_trl_work import LR, NoEosTokenizer, Phases, peak_rss_gib, prompts, reward

from rlvr.models.hf_policy import prepare_policy
from rlvr.models.modes import dropout_off
from rlvr.models.policy_options import PolicyOptions
from rlvr.rollout import HFEngine
from rlvr.service import AdamParams, Datum, ModelInput, SamplingParams, TrainingClient
from rlvr.service.lora import LoraShape

EPS = 1e-6  # rlvr's group_norm ε (rlvr.algo.advantages.estimators.EPS)
# The other contestants' AdamW: torch's defaults, no weight decay, gradient norm ≤ 1.
ADAM = AdamParams(LR, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, grad_clip_norm=1.0)
LOSSES = {  # benchmark loss: (service loss_fn, its config)
    "grpo": ("importance_sampling", None),
    "dapo": ("ppo", {"clip_low_threshold": 0.8, "clip_high_threshold": 1.28}),
}


def group_advantages(rewards: list[float]) -> list[float]:
    """GRPO (arXiv 2402.03300, §4.1.2): Â_i = (r_i − mean) / (std + ε) within one prompt's
    group, std unbiased (N−1); 0 for every row of a group whose rewards are all equal."""
    mean = sum(rewards) / len(rewards)
    if all(r == rewards[0] for r in rewards):
        return [0.0] * len(rewards)
    std = (sum((r - mean) ** 2 for r in rewards) / max(len(rewards) - 1, 1)) ** 0.5
    return [(r - mean) / (std + EPS) for r in rewards]


def row_scales(lengths: list[int], loss: str) -> list[float]:
    """The weight that turns the service's token sum into the benchmark loss's aggregation:
    GRPO's mean of per-row token means, 1/(B·|y_i|); DAPO's token mean, 1/Σ|y|."""
    if loss == "dapo":
        return [1.0 / sum(lengths)] * len(lengths)
    return [1.0 / (len(lengths) * n) for n in lengths]


def make_datum(prompt: list[int], tokens: list[int], logprobs: list[float], adv: float) -> Datum:
    """Position i of model_input predicts target_tokens[i] (shifted by one); the prompt's
    positions carry Â = 0, so they add nothing to the loss."""
    full = prompt + tokens
    pad = [0.0] * (len(prompt) - 1)
    return Datum(
        model_input=ModelInput.from_ints(full[:-1]),
        loss_fn_inputs={
            "target_tokens": full[1:],
            "logprobs": pad + logprobs,
            "advantages": pad + [adv] * len(tokens),
        },
    )


def service_policy(model: torch.nn.Module) -> torch.nn.Module:
    """`model` as `ServiceClient` prepares a loaded base model: fp32 on the CPU, with
    `--lora`'s adapters (rank r, α 2r, every linear layer, A drawn from the benchmark's
    LoRA seed), every dropout off."""
    lora = work.WORK.lora
    shape = LoraShape(lora, 2.0 * lora, work.LORA_SEED, train_unembed=False) if lora else None
    options = PolicyOptions(dtype="float32", device="cpu", lora=shape and shape.options(model))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(work.LORA_SEED)
        model, _ = prepare_policy(model, options)
    return dropout_off(model)


class ServiceSide:
    """The step as a lab script writes it; `step()` returns its phase times: generation
    (the `sample` calls), logprob (the trainer's forward inside `forward_backward`),
    backward, optimizer (`optim_step`), and, beside them, `forward_backward` (the whole
    call) and `sync` (the sampler of the new weights)."""

    def __init__(self, model, hf_tok, loss: str, tokens: int, group: int) -> None:
        if loss not in LOSSES:
            raise ValueError(f"loss={loss!r} is not valid for the service contestant: {LOSSES}")
        if work.WORK.beta != 0:
            raise ValueError(
                f"--beta {work.WORK.beta}: the service's losses have no KL term; "
                "run --service with --beta 0"
            )
        self.loss, self.tokens, self.group = loss, tokens, group
        tokenizer = NoEosTokenizer(hf_tok)
        model = service_policy(model)
        self.root = tempfile.mkdtemp(prefix="service-bench-")  # nothing is written there
        self.trainer = TrainingClient(model, tokenizer, self.root, 0, HFEngine(model, tokenizer))
        self.prompt_ids = [tokenizer.encode(p) for p in prompts()]
        self.sampling = SamplingParams(max_tokens=tokens, temperature=1.0, top_p=1.0)
        self.phases = Phases()
        # Timing hooks only: the trainer's forward, as RlvrSide times rlvr_update's.
        self.trainer._target_logprobs = self.phases.wrap("logprob", self.trainer._target_logprobs)
        with self.phases.time("sync"):
            self.sampler = self.trainer.save_weights_and_get_sampling_client("step-0")
        self.phases.take()  # the first sampler is setup, not a step's

    def step(self) -> dict[str, float]:
        start, start_cpu = time.perf_counter(), time.process_time()
        datums, lengths = self._rollout()
        loss_fn, config = LOSSES[self.loss]
        backward = torch.Tensor.backward
        torch.Tensor.backward = self.phases.wrap("backward", backward)
        try:
            with self.phases.time("forward_backward"):
                self.trainer.forward_backward(datums, loss_fn, config).result()
        finally:
            torch.Tensor.backward = backward
        with self.phases.time("optimizer"):
            self.trainer.optim_step(ADAM).result()
        with self.phases.time("sync"):
            self.sampler = self.trainer.save_weights_and_get_sampling_client()
        elapsed, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        return {
            "step": elapsed,
            "cpu": cpu,
            "rows": len(datums),
            "new_tokens": [min(lengths), max(lengths)],
            "rss": peak_rss_gib(),
            **self.phases.take(),
        }

    def _rollout(self) -> tuple[list[Datum], list[int]]:
        """One `sample` of `group` rows per prompt, rewards, advantages, datums."""
        rows = []  # (prompt ids, tokens, sampler log-probs, Â)
        for prompt in self.prompt_ids:
            with self.phases.time("generation"):
                result = self.sampler.sample(
                    ModelInput.from_ints(prompt), self.group, self.sampling
                ).result()
            seqs = result.sequences
            advantages = group_advantages([reward(s.text) for s in seqs])
            rows += [
                (prompt, s.tokens, s.logprobs, a) for s, a in zip(seqs, advantages, strict=True)
            ]
        lengths = [len(tokens) for _, tokens, _, _ in rows]
        if set(lengths) != {self.tokens}:
            raise RuntimeError(
                f"the service sampled {sorted(set(lengths))} new tokens per row; the benchmark's "
                f"work is exactly {self.tokens} (an EOS the tokenizer should make unreachable?)"
            )
        scales = row_scales(lengths, self.loss)
        datums = [
            make_datum(prompt, tokens, logprobs, adv * scale)
            for (prompt, tokens, logprobs, adv), scale in zip(rows, scales, strict=True)
        ]
        return datums, lengths


def median_phase(times: list[dict], name: str) -> float:
    return statistics.median(t.get(name, 0.0) for t in times)
