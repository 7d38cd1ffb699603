"""The two sides of `step_vs_trl.py`, each timing its phases on the same work: rlvr's
step (the body of `Trainer.train_step`: generate → rewards → `prepare_batch` →
`policy_update`, without the task registry and prompt pool) and TRL's `GRPOTrainer`,
driven one step at a time; `make_side` builds a contestant from its name."""

from __future__ import annotations

import tempfile
import time
from contextlib import contextmanager

import step_vs_trl_work as work
import torch
from step_vs_trl_work import LR, NoEosTokenizer, Phases, correct, peak_rss_gib, prompts, reward

from rlvr.algo import prepare_batch
from rlvr.algo.recipes import get_recipe
from rlvr.models import response_logprobs
from rlvr.models.hf_policy import reference_policy
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.train import update as rlvr_update
from rlvr.train.allocation import SlicedAdamW, allocate_adamw_state, keep_freed_pages
from rlvr.train.memory_budget import activation_budget
from rlvr.train.records.rollout_record import from_generation
from rlvr.train.sampler.precision import sampling_engine
from rlvr.train.update import UpdateSettings, policy_update


class RlvrSide:
    compile_decode = False  # --compile: the engine's decode step through torch.compile

    def __init__(
        self, model, hf_tok, loss: str, tokens: int, group: int, precision: str = "fp32"
    ) -> None:
        w = work.WORK
        if w.lora:  # peft's adapters on the model itself, as rlvr's policy.lora attaches them
            from peft import get_peft_model

            torch.manual_seed(work.LORA_SEED)
            model = get_peft_model(model, w.lora_config()).get_base_model()
        self.model = model.train()
        self.tokenizer = NoEosTokenizer(hf_tok)
        # TRL's loss_type="dapo" is DAPO's loss (token-mean, clip-higher 0.28) without
        # dynamic sampling; rlvr's dapo recipe is run the same way so both train every row.
        self.recipe = get_recipe(
            loss, kl_coef=w.beta, **({"dynamic_sampling": False} if loss == "dapo" else {})
        )
        # π_ref: a frozen copy, or with LoRA the policy with its adapters off (no copy).
        self.reference = reference_policy(model) if self.recipe.needs_reference else None
        # bf16: autocast over float32 master weights, sampling from a bf16 copy synced
        # after every update (precision: bf16, sampler_precision: bf16).
        self.engine = sampling_engine(
            lambda m: HFEngine(
                m, self.tokenizer, fp32_head=self.recipe.fp32_head, compile=self.compile_decode
            ),
            model,
            precision,
            "bf16" if precision == "bf16" else "same",
        )
        trained = [p for p in model.parameters() if p.requires_grad]
        # As the trainer on a CPU: AdamW's state allocated up front, freed pages kept.
        self.optimizer = allocate_adamw_state(SlicedAdamW(trained, lr=LR, weight_decay=0.0))
        keep_freed_pages(next(model.parameters()).device)
        self.params = SamplingParams(group, 1.0, 1.0, tokens)
        pad = self.tokenizer.pad_token_id
        # As the trainer: micro-batches of as many rows as `memory_budget_gib` allows.
        budget = None
        if w.memory_budget > 0:
            copy = isinstance(self.reference, torch.nn.Module)  # LoRA's view holds no weights
            budget = activation_budget(w.memory_budget, model, copy, precision)
        self.settings = UpdateSettings(
            1,
            1,
            len(prompts()) * group,
            1.0,
            tokens,
            1.0,
            pad,
            precision=precision,
            activation_bytes=budget,
        )
        self.prompt_ids = [self.tokenizer.encode(p) for p in prompts()]
        self.generator = torch.Generator().manual_seed(0)
        self.phases = Phases()
        self.engine.generate_ids = self.phases.wrap("generation", self.engine.generate_ids)

    def step(self) -> dict[str, float]:
        start, start_cpu = time.perf_counter(), time.process_time()
        self.optimizer.zero_grad(set_to_none=True)  # as the trainer, before the rollout
        gen = self.engine.generate_ids(self.prompt_ids, self.params, self.generator)
        rewards = [reward(t) for t in gen.texts]
        rollout = from_generation(
            gen, prompts(), 0, [correct(t) for t in gen.texts], [True] * len(rewards), rewards
        )
        if self.reference is not None:  # as the trainer's `_annotate`, before any update
            with self.phases.time("logprob"), torch.no_grad():
                pad = self.tokenizer.pad_token_id
                rollout.ref_logprobs = rollout.forward_rows(
                    lambda p, r, m: response_logprobs(self.reference, p, r, m, pad), len(rewards)
                )
        prepared = prepare_batch(
            self.recipe,
            rewards=rollout.rewards,
            correct=rollout.correct,
            truncated=rollout.truncated,
            response_mask=rollout.loss_mask,
            group_ids=rollout.group_ids,
            max_new_tokens=self.params.max_new_tokens,
        )
        with self._timed_update():
            metrics = policy_update(
                self.model, self.optimizer, self.recipe, rollout, prepared, self.settings
            )
        self.engine.sync_weights()  # bf16: the sampler's copy; fp32: nothing to do
        elapsed, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        rows = int(prepared.keep.sum())
        return {
            "step": elapsed,
            "cpu": cpu,
            "rows": rows,
            "micro_rows": int(metrics["train/micro_batch_rows"]),
            "rss": peak_rss_gib(),
            **self.phases.take(),
        }

    @contextmanager
    def _timed_update(self):
        saved = (rlvr_update.response_logprobs, rlvr_update._clip_and_step, torch.Tensor.backward)
        rlvr_update.response_logprobs = self.phases.wrap("logprob", saved[0])
        rlvr_update._clip_and_step = self.phases.wrap("optimizer", saved[1])
        torch.Tensor.backward = self.phases.wrap("backward", saved[2])
        try:
            yield
        finally:
            rlvr_update.response_logprobs, rlvr_update._clip_and_step = saved[:2]
            torch.Tensor.backward = saved[2]


class TrlSide:
    """A GRPOTrainer whose `train()` is driven one step at a time by a callback that
    hands control back to the benchmark between steps (a generator-based coroutine).
    TRL runs offline: the tokenizer is built locally, `report_to="none"`, nothing is saved."""

    def __init__(
        self,
        model,
        hf_tok,
        loss: str,
        tokens: int,
        group: int,
        checkpointing: bool,
        steps: int,
        bf16: bool = False,
    ) -> None:
        from datasets import Dataset
        from transformers import TrainerCallback
        from trl import GRPOConfig, GRPOTrainer

        self.phases = phases = Phases()
        self.times: list[dict[str, float]] = []
        side = self

        class Clock(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):
                side._start, side._start_cpu = time.perf_counter(), time.process_time()

            def on_pre_optimizer_step(self, args, state, control, **kw):
                side._opt = time.perf_counter()

            def on_optimizer_step(self, args, state, control, **kw):
                phases.now["optimizer"] += time.perf_counter() - side._opt

            def on_step_end(self, args, state, control, **kw):
                side.times.append(
                    {
                        "step": time.perf_counter() - side._start,
                        "cpu": time.process_time() - side._start_cpu,
                        "rss": peak_rss_gib(),
                        **phases.take(),
                    }
                )

        extra = {"epsilon_high": 0.28} if loss == "dapo" else {}
        args = GRPOConfig(
            output_dir=tempfile.mkdtemp(prefix="trl-bench-"),
            use_cpu=True,
            bf16=bf16,
            fp16=False,
            report_to="none",
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
            max_steps=steps,
            learning_rate=LR,
            weight_decay=0.0,
            lr_scheduler_type="constant",
            warmup_steps=0,
            max_grad_norm=1.0,
            per_device_train_batch_size=len(prompts()) * group,
            num_generations=group,
            max_completion_length=tokens,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            generation_kwargs={"min_new_tokens": tokens},
            beta=work.WORK.beta,
            loss_type=loss,
            gradient_checkpointing=checkpointing,
            dataloader_num_workers=0,
            seed=0,
            **extra,
        )
        dataset = Dataset.from_dict({"prompt": prompts() * 4})
        lora = {}
        if work.WORK.lora:  # TRL wraps the model in peft itself; same adapter, same seed
            torch.manual_seed(work.LORA_SEED)
            lora = {"peft_config": work.WORK.lora_config()}
        self.trainer = GRPOTrainer(
            model=model,
            reward_funcs=[lambda completions, **kw: [reward(c) for c in completions]],
            args=args,
            train_dataset=dataset,
            processing_class=hf_tok,
            callbacks=[Clock()],
            **lora,
        )
        t = self.trainer
        t._generate = phases.wrap("generation", t._generate)
        t._get_per_token_logps_and_entropies = phases.wrap(
            "logprob", t._get_per_token_logps_and_entropies
        )
        t.accelerator.backward = phases.wrap("backward", t.accelerator.backward)

    def run(self) -> None:
        self.trainer.train()


def make_side(name: str, model, hf_tok, loss: str, tokens: int, group: int, steps: int):
    """The contestant `name` (one of the comparisons' contestants) over `model`."""
    if name == "service":  # imported here: the other contestants never load rlvr.service
        from step_vs_trl_service_side import ServiceSide

        return ServiceSide(model, hf_tok, loss, tokens, group)
    if name in ("rlvr", "rlvr_bf16"):
        precision = "bf16" if name == "rlvr_bf16" else "fp32"
        return RlvrSide(model, hf_tok, loss, tokens, group, precision)
    checkpointing = name != "trl_nogc"  # TRL's default is on
    return TrlSide(model, hf_tok, loss, tokens, group, checkpointing, steps, name == "trl_bf16")


def gated(trainer, before, after) -> None:
    """Make `trainer` call `before()` at the start of each step and `after()` at its end:
    the gate's callbacks run first at a step's begin and last at its end, outside the
    timed span."""
    from transformers import TrainerCallback

    class Begin(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            before()

    class End(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            after()

    trainer.callback_handler.callbacks.insert(0, Begin())
    trainer.callback_handler.callbacks.append(End())
