"""One RL training step, rlvr against TRL's GRPOTrainer, on the same work, side by side.

Both sides get the same freshly initialised Qwen2-style model (seed 0; fp32, character
vocabulary of 50), the same 8 prompts × group 8, exactly `--tokens` new tokens per row
(TRL: `min_new_tokens` suppresses EOS; rlvr: the benchmark tokenizer's EOS id is one the
model cannot emit), temperature 1, top-p 1, no top-k, no reference model (β = 0), one
optimizer step per rollout batch (on-policy), the same reward function and AdamW settings.
Three contestants (five with bf16, below) are run in turn, step by step, so that load
from other processes hits them alike: TRL with its defaults (gradient checkpointing on), TRL without gradient
checkpointing, and rlvr. Each runs in a process of its own (built from the same seed, the
driver checks the weights' digest and the torch thread count), and the driver asks each in
turn for one step over a pipe and waits for its phase times: sharing one process slowed
the contestants unequally (allocator, OpenMP pools per thread, caches). `--in-process`
keeps the old harness (one process, TRL trainers in threads) to compare against. Every
contestant's first steps are warm-up and not counted.

The first result line is `ratio X.XX`: TRL-default s/step / rlvr s/step for the first size
and loss (by default the 3 M model with grpo). Two more contestants run unless `--no-bf16`:
TRL's defaults with `bf16=True`, and rlvr with `precision: bf16` (autocast over float32
master weights) and `sampler_precision: bf16` (sampling from a bf16 copy synced after the
update); the next lines are `ratio-bf16 X.XX` (TRL-bf16 / rlvr-bf16: same precision, same
work) and `speedup-bf16 X.XX` (TRL's fp32 defaults / rlvr-bf16: what a user gains). Then per setting: the median and spread
(min–max) of each contestant's step time, the ratios, and the medians of the time spent
in generation / log-prob forwards / backward / optimizer (grad clipping included) and in
the rest (rewards, advantages, bookkeeping); medians of parts need not add up exactly.
A line gives each contestant's median CPU seconds per step (its process's CPU time
over all threads; with one thread it moves less with load from other processes than
wall time does; with `--in-process` it is the shared process's).

The `floor:` line (skip with `--no-floor`) says what bounds rlvr's step from below: the
matrix-multiply FLOPs of one step (forward and backward, counted op by op), the seconds
they would take at this machine's best fp32 GEMM rate (a 1024³ product, measured then),
the share of a profiled rlvr step spent inside matrix multiplies, and the share that the
step's own products take when replayed alone, in the same order on the same memory
(`replay`); each share applied to rlvr's median step. TRL's step time over the replayed
products is a ratio that no cut of rlvr's other work can beat: only faster or fewer
matrix multiplies can.

rlvr's step is the body of `Trainer.train_step` (generate → rewards → `prepare_batch` →
`policy_update`) without the task registry and prompt pool. TRL runs offline: the
tokenizer is built locally, `report_to="none"`, nothing is saved.

Needs the `bench` extra (`pip install -e .[bench]`); rlvr itself never imports TRL.
Run: python benchmarks/step_vs_trl.py [--sizes 3m,30m] [--losses grpo,dapo] [--reps 8]
     [--in-process] [--no-floor] [--compile] [--no-bf16]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import io
import json
import os
import signal
import statistics
import string
import sys
import tempfile
import threading
import time
import warnings
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from harness import contestants
from torch.utils._python_dispatch import TorchDispatchMode

from rlvr.algo import prepare_batch
from rlvr.algo.recipes import get_recipe
from rlvr.models.tiny import count_parameters
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.train import update as rlvr_update
from rlvr.train.records.rollout_record import from_generation
from rlvr.train.sampler.precision import sampling_engine
from rlvr.train.update import UpdateSettings, policy_update

SIZES = {  # name: (hidden, layers, heads, intermediate)
    "3m": (256, 4, 4, 768),
    "30m": (512, 8, 8, 1792),
}
CHARS = string.ascii_lowercase + string.digits + "+-*=() ."  # 44 + 2 specials + 4 spare
PAD, EOS = 0, 1
LR = 1e-5


# ---------------------------------------------------------------- shared setup


def build_model(size: str, vocab: int, seed: int = 0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    hidden, layers, heads, inter = SIZES[size]
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config).float()


def build_hf_tokenizer():
    """A character-level `PreTrainedTokenizerFast`, built in memory (no hub access)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": PAD, "<eos>": EOS} | {c: i + 2 for i, c in enumerate(CHARS)}
    for i in range(50 - len(vocab)):
        vocab[f"<unused{i}>"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")


class NoEosTokenizer:
    """rlvr's tokenizer interface over the same vocabulary, with an EOS id no token has,
    so every row runs the full budget (TRL's `min_new_tokens` does the same there)."""

    pad_token_id = PAD
    eos_token_id = -1

    def __init__(self, hf) -> None:
        self.hf = hf

    @property
    def vocab_size(self) -> int:
        return len(self.hf)

    def encode(self, text: str) -> list[int]:
        return self.hf(text, add_special_tokens=False)["input_ids"]

    def decode(self, ids, skip_special: bool = True) -> str:
        return self.hf.decode(ids, skip_special_tokens=skip_special)


PROMPTS = [
    f"{a}+{b}=" for a, b in [(12, 7), (3, 45), (61, 9), (8, 8), (27, 33), (5, 90), (14, 2), (70, 6)]
]


def reward(text: str) -> float:
    """A cheap reward with spread inside every group: the share of digits in the text."""
    return sum(c.isdigit() for c in text) / max(len(text), 1)


def correct(text: str) -> bool:
    """rlvr's 0/1 verdict (what DAPO's dynamic sampling filters on): at least 9 digits
    of 32 tokens, the median at initialisation (measured: mean 9.1 on seed 0),
    so nearly every group is mixed and both sides train on the same rows (TRL has no
    dynamic sampling); the benchmark prints the rows rlvr trained."""
    return sum(c.isdigit() for c in text) >= 9


# ---------------------------------------------------------------- phase timing


class Phases:
    """Accumulated seconds per phase for the step in progress."""

    def __init__(self) -> None:
        self.now: dict[str, float] = defaultdict(float)

    @contextmanager
    def time(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.now[name] += time.perf_counter() - start

    def wrap(self, name: str, fn):
        def timed(*args, **kwargs):
            with self.time(name):
                return fn(*args, **kwargs)

        return timed

    def take(self) -> dict[str, float]:
        out, self.now = dict(self.now), defaultdict(float)
        return out


# ---------------------------------------------------------------- rlvr


class RlvrSide:
    compile_decode = False  # --compile: the engine's decode step through torch.compile

    def __init__(
        self, model, hf_tok, loss: str, tokens: int, group: int, precision: str = "fp32"
    ) -> None:
        self.model = model.train()
        self.tokenizer = NoEosTokenizer(hf_tok)
        # TRL's loss_type="dapo" is DAPO's loss (token-mean, clip-higher 0.28) without
        # dynamic sampling; rlvr's dapo recipe is run the same way so both train every row.
        self.recipe = get_recipe(
            loss, kl_coef=0.0, **({"dynamic_sampling": False} if loss == "dapo" else {})
        )
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
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
        self.params = SamplingParams(group, 1.0, 1.0, tokens)
        self.settings = UpdateSettings(
            1, 1, len(PROMPTS) * group, 1.0, tokens, 1.0, PAD, precision=precision
        )
        self.prompt_ids = [self.tokenizer.encode(p) for p in PROMPTS]
        self.generator = torch.Generator().manual_seed(0)
        self.phases = Phases()
        self.engine.generate_ids = self.phases.wrap("generation", self.engine.generate_ids)

    def step(self) -> dict[str, float]:
        start, start_cpu = time.perf_counter(), time.process_time()
        gen = self.engine.generate_ids(self.prompt_ids, self.params, self.generator)
        rewards = [reward(t) for t in gen.texts]
        rollout = from_generation(
            gen, PROMPTS, 0, [correct(t) for t in gen.texts], [True] * len(rewards), rewards
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
            policy_update(self.model, self.optimizer, self.recipe, rollout, prepared, self.settings)
        self.engine.sync_weights()  # bf16: the sampler's copy; fp32: nothing to do
        elapsed, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        return {"step": elapsed, "cpu": cpu, "rows": int(prepared.keep.sum()), **self.phases.take()}

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


# ---------------------------------------------------------------- TRL


class TrlSide:
    """A GRPOTrainer whose `train()` is driven one step at a time by a callback that
    hands control back to the benchmark between steps (a generator-based coroutine)."""

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
            per_device_train_batch_size=len(PROMPTS) * group,
            num_generations=group,
            max_completion_length=tokens,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            generation_kwargs={"min_new_tokens": tokens},
            beta=0.0,
            loss_type=loss,
            gradient_checkpointing=checkpointing,
            dataloader_num_workers=0,
            seed=0,
            **extra,
        )
        dataset = Dataset.from_dict({"prompt": PROMPTS * 4})
        self.trainer = GRPOTrainer(
            model=model,
            reward_funcs=[lambda completions, **kw: [reward(c) for c in completions]],
            args=args,
            train_dataset=dataset,
            processing_class=hf_tok,
            callbacks=[Clock()],
        )
        t = self.trainer
        t._generate = phases.wrap("generation", t._generate)
        t._get_per_token_logps_and_entropies = phases.wrap(
            "logprob", t._get_per_token_logps_and_entropies
        )
        t.accelerator.backward = phases.wrap("backward", t.accelerator.backward)

    def run(self) -> None:
        self.trainer.train()


# ---------------------------------------------------------------- driver

CONTESTANTS = ("trl", "trl_nogc", "rlvr")  # the order of the steps within a round
# --bf16 (the default): TRL's defaults with bf16=True, and rlvr with precision: bf16 and
# sampler_precision: bf16, after the three above within each round.
BF16_CONTESTANTS = ("trl_bf16", "rlvr_bf16")


def make_side(name: str, model, hf_tok, loss: str, tokens: int, group: int, steps: int):
    if name in ("rlvr", "rlvr_bf16"):
        precision = "bf16" if name == "rlvr_bf16" else "fp32"
        return RlvrSide(model, hf_tok, loss, tokens, group, precision)
    checkpointing = name != "trl_nogc"  # TRL's default is on
    return TrlSide(model, hf_tok, loss, tokens, group, checkpointing, steps, name == "trl_bf16")


def _gated(trainer, before, after) -> None:
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


def weights_digest(model) -> str:
    """SHA-256 of the parameters, so the driver can check every process built the same."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


# ---- each contestant in its own process (the default)


def _claim_stdout():
    """The protocol's channel: the real stdout. Anything else written to stdout (TRL's
    end-of-train dicts, from Python or C) goes to /dev/null from here on."""
    channel = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    return channel


def _die_with_parent() -> None:
    """Linux: be sent SIGTERM if the driver dies without closing our stdin (SIGKILL);
    elsewhere the end of stdin (or a broken pipe) ends the child after its step."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def _await_step() -> bool:
    """Block until the driver asks for a step; False at the end of input."""
    line = sys.stdin.readline()
    if line.strip() not in ("step", ""):
        raise ValueError(f"child got {line.strip()!r} from the driver; valid: 'step'")
    return bool(line)


def child(name: str, size: str, loss: str, tokens: int, group: int, steps: int, threads: int):
    """Run one contestant in this process, driven through stdin/stdout: one JSON line
    `ready` (thread count, parameter count, weight digest) once everything is set up,
    then one JSON line of phase times per `step` line read; exit at the end of input."""
    channel = _claim_stdout()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the driver shuts us down
    _die_with_parent()
    torch.set_num_threads(threads)

    def send(message: dict) -> None:
        channel.write(json.dumps(message) + "\n")
        channel.flush()

    hf_tok = build_hf_tokenizer()
    model = build_model(size, len(hf_tok))
    ready = {
        "threads": torch.get_num_threads(),
        "params": count_parameters(model),
        "weights": weights_digest(model),
    }
    side = make_side(name, model, hf_tok, loss, tokens, group, steps)
    if isinstance(side, RlvrSide):
        send(ready)
        while _await_step():
            send(side.step())
        return
    # TRL's train() owns its loop: a gate at each step's begin answers for the previous
    # step (or `ready` before the first) and waits for the next `step`. Answering there,
    # not at the step's end, keeps TRL's between-step work off the other contestants.
    pending = [ready]

    def before() -> None:
        send(pending.pop())
        if not _await_step():
            raise SystemExit(0)

    _gated(side.trainer, before, lambda: pending.append(side.times[-1]))
    side.run()
    send(pending.pop())
    if _await_step():  # wait for the end of input: exiting now would overlap rlvr's step
        raise ValueError(f"{name} asked for a step after its last ({steps})")


def check_ready(ready: dict[str, dict], threads: int) -> None:
    """Every process must have built the same weights and use the driver's thread count."""
    digests = {r["weights"] for r in ready.values()}
    counts = {name: r["threads"] for name, r in ready.items()}
    if len(digests) != 1:
        raise RuntimeError(f"contestants built different weights: {digests}")
    if set(counts.values()) != {threads}:
        raise RuntimeError(f"contestants' torch thread counts {counts}, driver's {threads}")


def run_setting(size, loss, reps, warmup, tokens, group, threads: int, names=CONTESTANTS):
    """Per contestant, the phase times of each counted step, and the parameter count.
    Each contestant runs in its own process; the driver asks each in turn for one step
    and waits for its answer, so they alternate step by step."""
    flags = [f"--sizes={size}", f"--losses={loss}", f"--reps={reps}", f"--warmup={warmup}"]
    flags += [f"--tokens={tokens}", f"--group={group}", f"--threads={threads}"]
    flags += ["--compile"] if RlvrSide.compile_decode else []
    script = os.path.abspath(__file__)
    argv = lambda name: [sys.executable, script, f"--child={name}", *flags]  # noqa: E731
    with contestants(names, argv) as procs:
        ready = {name: proc.receive() for name, proc in procs.items()}
        check_ready(ready, threads)
        times: dict[str, list] = {name: [] for name in procs}
        for _ in range(warmup + reps):
            for name, proc in procs.items():
                times[name].append(proc.step())
    return ready["rlvr"]["params"], {name: t[warmup:] for name, t in times.items()}


# ---- all three in this process (--in-process: the old harness, for comparison)


def run_setting_in_process(size, loss, reps, warmup, tokens, group):
    """As `run_setting`, but all three share this process, each TRL trainer in a thread
    of its own. Sharing a process slows the contestants unequally (allocator, OpenMP
    pools per thread, caches): kept only to compare against."""
    hf_tok = build_hf_tokenizer()
    base = build_model(size, len(hf_tok))
    steps = warmup + reps
    trl = {
        name: make_side(name, copy.deepcopy(base), hf_tok, loss, tokens, group, steps)
        for name in CONTESTANTS[:2]
    }
    rlvr = RlvrSide(copy.deepcopy(base), hf_tok, loss, tokens, group)
    # TRL's train() owns its loop, so each TRL trainer runs in a thread that the driver
    # lets take one step at a time: the three contestants alternate step by step.
    gates = {name: (threading.Semaphore(0), threading.Semaphore(0)) for name in trl}
    for name, side in trl.items():
        go, done = gates[name]
        _gated(side.trainer, go.acquire, done.release)
    threads = [threading.Thread(target=s.run, daemon=True) for s in trl.values()]
    for t in threads:
        t.start()
    rlvr_times = []
    for _ in range(steps):
        for name in trl:
            go, done = gates[name]
            go.release()
            done.acquire()
        rlvr_times.append(rlvr.step())
    for t in threads:
        t.join()
    results = {name: side.times[warmup:] for name, side in trl.items()}
    results["rlvr"] = rlvr_times[warmup:]
    return count_parameters(base), results


PHASES = ("generation", "logprob", "backward", "optimizer")


def summarize(times: list[dict[str, float]]) -> dict[str, float]:
    steps = [t["step"] for t in times]
    out = {"median": statistics.median(steps), "min": min(steps), "max": max(steps)}
    for phase in PHASES:
        out[phase] = statistics.median(t.get(phase, 0.0) for t in times)
    out["other"] = statistics.median(t["step"] - sum(t.get(p, 0.0) for p in PHASES) for t in times)
    return out


def paired(results, name: str, against: str = "rlvr") -> float:
    """Median over rounds of TRL step / rlvr step within the same round: the contestants
    of a round run back to back, so load that drifts between rounds cancels."""
    return statistics.median(
        t["step"] / r["step"] for t, r in zip(results[name], results[against], strict=True)
    )


def report(size, loss, params, results, first: bool) -> None:
    s = {name: summarize(t) for name, t in results.items()}
    rows = sorted({t["rows"] for t in results["rlvr"]})
    ratio = s["trl"]["median"] / s["rlvr"]["median"]
    ratio_nogc = s["trl_nogc"]["median"] / s["rlvr"]["median"]
    bf16 = "rlvr_bf16" in s
    if bf16:
        ratio_bf16 = s["trl_bf16"]["median"] / s["rlvr_bf16"]["median"]
        speedup_bf16 = s["trl"]["median"] / s["rlvr_bf16"]["median"]
    if first:
        print(f"ratio {ratio:.2f}")
        if bf16:
            print(f"ratio-bf16 {ratio_bf16:.2f}")
            print(f"speedup-bf16 {speedup_bf16:.2f}")
    print(
        f"\n== {size} ({params / 1e6:.2f} M params), loss {loss}: "
        f"TRL-default/rlvr {ratio:.2f}x, TRL-no-checkpointing/rlvr {ratio_nogc:.2f}x "
        f"(ratio of medians); per-round paired medians {paired(results, 'trl'):.2f}x, "
        f"{paired(results, 'trl_nogc'):.2f}x"
    )
    if bf16:
        print(
            f"bf16: TRL-bf16/rlvr-bf16 {ratio_bf16:.2f}x (paired "
            f"{paired(results, 'trl_bf16', 'rlvr_bf16'):.2f}x), TRL-default (fp32)/rlvr-bf16 "
            f"{speedup_bf16:.2f}x (paired {paired(results, 'trl', 'rlvr_bf16'):.2f}x), "
            f"rlvr fp32/bf16 {s['rlvr']['median'] / s['rlvr_bf16']['median']:.2f}x"
        )
    print(
        f"{'contestant':<10} {'s/step':>7} {'min':>6} {'max':>6} "
        + " ".join(f"{p[:9]:>9}" for p in (*PHASES, "other"))
    )
    for name, m in s.items():
        print(
            f"{name:<10} {m['median']:7.3f} {m['min']:6.3f} {m['max']:6.3f} "
            + " ".join(f"{m[p]:9.3f}" for p in (*PHASES, "other"))
        )
    print(f"rows rlvr trained per step: {rows} (TRL trains every row)")
    cpu = ", ".join(
        f"{name} {statistics.median(t['cpu'] for t in results[name]):.3f}" for name in s
    )
    print(f"CPU s/step (median; the process's CPU time over all its threads): {cpu}")
    sys.stdout.flush()


MATMUL_OPS = ("mm", "addmm", "bmm", "baddbmm")  # aten ops, as dispatched and profiled


class MatmulTrace(TorchDispatchMode):
    """Records every matrix multiply dispatched (forward and backward), in order: the op,
    each operand's address, shape and strides, the keyword arguments; and counts
    2·m·k·n FLOPs per product."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0
        self.calls: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in MATMUL_OPS:
            a, b = args[-2:] if name in ("addmm", "baddbmm") else args[:2]
            self.flops += 2 * a.numel() * b.shape[-1]  # (…, m, k) @ (…, k, n)
            operands = [_Operand.of(x) if isinstance(x, torch.Tensor) else x for x in args]
            named = {
                k: _Operand.of(x) if isinstance(x, torch.Tensor) else x
                for k, x in (kwargs or {}).items()
            }  # e.g. `out=` of compiled code
            self.calls.append((func, operands, named))
        return func(*args, **(kwargs or {}))


@dataclass(frozen=True)
class _Operand:
    address: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype

    @classmethod
    def of(cls, t: torch.Tensor) -> _Operand:
        return cls(t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)

    def extent(self) -> int:
        return 1 + sum((n - 1) * step for n, step in zip(self.shape, self.stride, strict=True))


def replay(calls: list[tuple]):
    """A function that runs the recorded products again, alone and in their order. An
    operand's address picks its buffer, so products that read the same tensor (a weight)
    read the same buffer again, and activations reuse memory the way the allocator
    reused it: the caches see the step's memory, less everything between the products."""
    extent: dict[tuple, int] = {}
    for _, operands, named in calls:
        for x in (*operands, *named.values()):
            if isinstance(x, _Operand):
                key = (x.address, x.dtype)
                extent[key] = max(extent.get(key, 0), x.extent())
    buffers = {key: torch.randn(n).to(key[1]) for key, n in extent.items()}

    def materialize(x):
        if not isinstance(x, _Operand):
            return x
        return buffers[(x.address, x.dtype)].as_strided(x.shape, x.stride)

    ready = [
        (func, [materialize(x) for x in operands], {k: materialize(x) for k, x in named.items()})
        for func, operands, named in calls
    ]

    def run() -> None:
        for func, args, kwargs in ready:
            func(*args, **kwargs)

    return run


def best_gemm_rate(size: int = 1024, reps: int = 10) -> float:
    """FLOP/s of this machine's fastest fp32 matrix multiply that we know of: a square
    `size`³ product, best of `reps`, with the current torch thread count."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def floor(size, loss, tokens, group, rounds: int = 5) -> dict[str, float]:
    """What bounds rlvr's step from below, measured in this process on a fresh rlvr side:
    the matrix-multiply FLOPs of one step (forward and backward, recorded by
    `MatmulTrace`) and the seconds those take at the best fp32 GEMM rate measured now;
    the share of a profiled step spent inside matrix multiplies; and the share of the
    step, of its generation and of the rest that the step's own products take when
    `replay`ed alone, in order, with their FLOP/s so (sums over `rounds`, each round a
    real step then the replays, so that drift hits both alike)."""
    from torch.profiler import ProfilerActivity, profile

    hf_tok = build_hf_tokenizer()
    side = RlvrSide(build_model(size, len(hf_tok)), hf_tok, loss, tokens, group)
    for _ in range(2):
        side.step()
    generate, ends = side.engine.generate_ids, []

    def marked(*args, **kwargs):  # where the generation's products end in the trace
        out = generate(*args, **kwargs)
        ends.append((len(trace.calls), trace.flops))
        return out

    side.engine.generate_ids = marked
    with MatmulTrace() as trace:
        side.step()
    side.engine.generate_ids = generate
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        wall = side.step()["step"]
    in_matmul = sum(
        e.self_cpu_time_total
        for e in prof.key_averages()
        if e.key.removeprefix("aten::") in MATMUL_OPS
    )
    (cut, gen_flops), *_ = ends
    parts = {"generation": replay(trace.calls[:cut]), "rest": replay(trace.calls[cut:])}
    alone, real = defaultdict(float), defaultdict(float)  # summed over counted rounds
    for counted in [False] + [True] * rounds:  # a warm-up round first
        times = side.step()
        times["rest"] = times["step"] - times["generation"]
        for part, products in parts.items():
            start = time.perf_counter()
            products()
            alone[part] += counted * (time.perf_counter() - start)
            real[part] += counted * times[part]
    real["step"], alone["step"] = sum(real.values()), sum(alone.values())
    rate = best_gemm_rate()
    # Shares, not seconds: the alternating run's step times and these were measured at
    # different moments, and the machine's speed drifts. The profiler slows small ops
    # more than matrix multiplies, so its share errs low and its ceiling below errs high.
    return {
        "flops": trace.flops,
        "products": len(trace.calls),
        "rate": rate,
        "ideal_s": trace.flops / rate,
        "share": in_matmul / 1e6 / wall,
        **{f"alone_{part}": alone[part] / real[part] for part in real},
        # FLOP/s of the products replayed in order
        "rate_generation": gen_flops * rounds / alone["generation"],
        "rate_rest": (trace.flops - gen_flops) * rounds / alone["rest"],
    }


def report_floor(bound: dict[str, float], results) -> None:
    step = {name: statistics.median(t["step"] for t in results[name]) for name in CONTESTANTS}
    in_matmul = step["rlvr"] * bound["share"]
    alone = step["rlvr"] * bound["alone_step"]
    print(
        f"floor: rlvr's step multiplies {bound['flops'] / 1e9:.1f} GFLOP of matrices "
        f"({bound['products']} products); at {bound['rate'] / 1e9:.0f} GFLOP/s (this machine's "
        f"best fp32 GEMM, 1024^3, now) that is {bound['ideal_s']:.3f} s. A profiled rlvr step "
        f"spends {bound['share']:.0%} of its time inside matrix multiplies: {in_matmul:.3f} s of "
        f"the median step above; TRL-default / that: {step['trl'] / in_matmul:.2f}x, "
        f"TRL-no-checkpointing / that: {step['trl_nogc'] / in_matmul:.2f}x. The same products "
        f"replayed alone, in order, take {bound['alone_step']:.0%} of a step's time "
        f"({bound['alone_generation']:.0%} of the generation's, {bound['alone_rest']:.0%} of "
        f"the rest's), at {bound['rate_generation'] / 1e9:.0f} GFLOP/s in the generation and "
        f"{bound['rate_rest'] / 1e9:.0f} GFLOP/s in the rest: "
        f"{alone:.3f} s; TRL-default / that: {step['trl'] / alone:.2f}x, "
        f"TRL-no-checkpointing / that: {step['trl_nogc'] / alone:.2f}x: ratios that no cut "
        "of rlvr's other work can beat without faster (or fewer) matrix multiplies"
    )
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="3m", help=f"comma list of {sorted(SIZES)}")
    parser.add_argument("--losses", default="grpo,dapo", help="comma list: grpo, dapo")
    parser.add_argument("--reps", type=int, default=8, help="counted steps per contestant")
    parser.add_argument("--warmup", type=int, default=2, help="uncounted first steps")
    parser.add_argument("--tokens", type=int, default=32, help="new tokens per completion")
    parser.add_argument("--group", type=int, default=8, help="completions per prompt")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="the old harness: all contestants in one process, TRL in threads (to compare)",
    )
    parser.add_argument(
        "--no-floor", action="store_true", help="skip the matrix-multiply floor of each setting"
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="rlvr samples with its decode step compiled (engine_options.compile); the "
        "compilation happens in the warm-up steps",
    )
    parser.add_argument(
        "--no-bf16",
        action="store_true",
        help="skip the bf16 contestants (TRL bf16=True, rlvr precision/sampler_precision bf16)",
    )
    parser.add_argument("--child", choices=CONTESTANTS + BF16_CONTESTANTS, help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    RlvrSide.compile_decode = args.compile
    if args.child:  # one contestant, driven through stdin/stdout
        steps = args.warmup + args.reps
        child(args.child, args.sizes, args.losses, args.tokens, args.group, steps, args.threads)
        return
    threads = torch.get_num_threads()
    where = (
        "all in one process (TRL in threads)"
        if args.in_process
        else "each contestant in its own process (same thread count, checked)"
    )
    header = (
        f"# threads={threads} torch {torch.__version__}; "
        f"{len(PROMPTS)} prompts x {args.group} x {args.tokens} tokens, fp32 (and bf16: "
        f"{'none' if args.no_bf16 or args.in_process else ', '.join(BF16_CONTESTANTS)}), beta=0; "
        f"{args.warmup} warm-up + {args.reps} counted steps each, alternating; {where}"
        + ("; rlvr's decode step compiled" if args.compile else "")
    )
    first = True
    for size in args.sizes.split(","):
        for loss in args.losses.split(","):
            setting = (size, loss, args.reps, args.warmup, args.tokens, args.group)
            if args.in_process:
                with contextlib.redirect_stdout(io.StringIO()):  # TRL's end-of-train dicts
                    params, results = run_setting_in_process(*setting)
            else:
                names = CONTESTANTS + (() if args.no_bf16 else BF16_CONTESTANTS)
                params, results = run_setting(*setting, threads, names)
            report(size, loss, params, results, first)
            if not args.no_floor:
                report_floor(floor(size, loss, args.tokens, args.group), results)
            if first:
                print(header)
            first = False


if __name__ == "__main__":
    main()
