"""The GPU path in one call: generation throughput, GRPO steps (full and LoRA) with peak
memory and MFU, the sampler/trainer log-prob mismatch, DDP and FSDP over NCCL, and vLLM,
on random models at real shapes. Nothing is downloaded (docs/gpu.md, "The GPU check").

Each step is timed and guarded: a failure is recorded with its traceback's tail and the
next step runs. Steps run smallest model first, breadth before scale, and a step that
would start after `--budget-s` is recorded as skipped (one still running when the budget
ends is stopped at the next Python instruction and recorded as failed). The report is
rewritten after every step, so a run killed from outside still leaves what it measured.

Run:  python benchmarks/gpu_check.py --out DIR [--sizes qwen2.5-0.5b,qwen3-4b]
      [--budget-s 420] [--only grpo_full,mismatch] [--fast] [--dtype bfloat16]
`--fast` runs the same steps on tiny shapes in float32 on the CPU in well under a minute
(tests/test_gpu_check.py). Exit status 0 whatever the steps did; 2 on a misused command.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import json
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # these modules, and rlvr from the tree

from gpu_check_report import environment, summary  # noqa: E402

KINDS = ("generate", "generate_generic", "mismatch", "grpo_full", "grpo_lora")
KINDS += ("ddp", "fsdp", "generate_compiled", "vllm")
FIRST_SIZE_ONLY = ("ddp", "fsdp", "generate_compiled", "vllm")
DEFAULT_BUDGET_S = 420.0


@dataclass(frozen=True)
class Step:
    kind: str
    size: str
    run: Callable[[], dict]

    @property
    def name(self) -> str:
        return f"{self.kind}/{self.size}"


class StepTimeout(BaseException):
    """The step was still running when the budget ran out. A BaseException, like
    KeyboardInterrupt, so that code which turns errors into data (rlvr's reward guard)
    does not swallow it."""


def _call(module: str, function: str, *args, **kwargs) -> dict:
    """`module.function(*args, **kwargs)`, imported when the step runs: a library missing
    on the device fails the steps that need it, not the plan."""
    return getattr(importlib.import_module(module), function)(*args, **kwargs)


def plan(ctx, sizes: list[str], only: set[str]) -> list[Step]:
    """Every step in the order it runs: each size's generation, mismatch and GRPO steps,
    smallest size first, with DDP and FSDP after the first size's; then the compiled
    decode (a minute of compiling), and vLLM last, since it may keep GPU memory in its
    own processes."""
    sampling = functools.partial(_call, "gpu_check_sampling")
    training = functools.partial(_call, "gpu_check_training")
    per_size = {
        "generate": functools.partial(sampling, "generate", ctx),
        "generate_generic": functools.partial(sampling, "generate", ctx, static_cache=False),
        "mismatch": functools.partial(sampling, "mismatch", ctx),
        "grpo_full": functools.partial(training, "grpo", ctx, lora=False),
        "grpo_lora": functools.partial(training, "grpo", ctx, lora=True),
    }
    first = {
        "ddp": functools.partial(training, "data_parallel", ctx, mode="ddp"),
        "fsdp": functools.partial(training, "data_parallel", ctx, mode="fsdp"),
    }
    last = {
        "generate_compiled": functools.partial(sampling, "generate", ctx, compile=True),
        "vllm": functools.partial(sampling, "vllm", ctx),
    }
    steps = []
    for i, size in enumerate(sizes):
        for kind, fn in {**per_size, **(first if i == 0 else {})}.items():
            steps.append(Step(kind, size, functools.partial(fn, size)))
    steps += [Step(kind, sizes[0], functools.partial(fn, sizes[0])) for kind, fn in last.items()]
    return [s for s in steps if not only or s.kind in only]


class Runner:
    """Runs steps within a time budget, recording each as ok, failed or skipped."""

    def __init__(self, budget_s: float, device: str) -> None:
        self.budget_s, self.device = budget_s, device
        self.started = time.monotonic()

    def left_s(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def run(self, step: Step) -> dict:
        from gpu_check_model import Skip

        record: dict = {"name": step.name, "kind": step.kind, "size": step.size}
        left = self.left_s()
        if left < 1:
            return {**record, "status": "skipped", "reason": f"budget of {self.budget_s:g} s spent"}
        started = time.perf_counter()
        try:
            with _deadline(left):
                record.update(status="ok", result=step.run())
        except Skip as reason:
            record.update(status="skipped", reason=str(reason))
        except (Exception, StepTimeout) as err:  # a failure is data; the next step runs
            record.update(status="failed", **failure(err))
        record["seconds"] = round(time.perf_counter() - started, 3)
        self.release()
        return record

    def release(self) -> None:
        """Free what the step left, so that the next one starts from an empty GPU."""
        import torch

        gc.collect()
        if self.device.startswith("cuda"):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()


class _deadline:
    """StepTimeout in the step at its next Python line once `seconds` have passed: a
    timer thread sends SIGUSR1. Not SIGALRM: rlvr's verifiers and reward functions keep
    their own time limits with it, and move to a helper process when it is taken."""

    def __init__(self, seconds: float) -> None:
        self.seconds = max(1.0, seconds)
        self.active = False

    def __enter__(self) -> None:
        def stop(signum, frame):
            if self.active:  # not once the step has returned
                raise StepTimeout(
                    f"still running when the budget ran out ({self.seconds:.0f} s left)"
                )

        self.previous = signal.signal(signal.SIGUSR1, stop)
        self.timer = threading.Timer(self.seconds, os.kill, (os.getpid(), signal.SIGUSR1))
        self.timer.daemon = True
        self.active = True
        self.timer.start()

    def __exit__(self, *exc) -> None:
        self.active = False
        self.timer.cancel()
        signal.signal(signal.SIGUSR1, self.previous)


def failure(err: BaseException) -> dict:
    """The error and the last lines of its traceback, short enough to read in a report."""
    lines = traceback.format_exception(type(err), err, err.__traceback__)
    tail = "".join(lines)[-3000:]
    return {"error": f"{type(err).__name__}: {err}"[:1000], "traceback_tail": tail}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; misuse exits with status 2 and a message naming the flag."""
    from gpu_check_model import FAST_SIZES, GPU_SIZES, SHAPES

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True, help="folder for report.json and summary.txt")
    parser.add_argument("--sizes", help=f"comma list of {', '.join(SHAPES)}")
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S)
    parser.add_argument("--only", help=f"comma list of step kinds: {', '.join(KINDS)}")
    parser.add_argument("--fast", action="store_true", help="tiny shapes, float32, CPU")
    parser.add_argument("--device", help="cuda when available, else cpu (--fast: cpu)")
    parser.add_argument(
        "--dtype", choices=("float32", "bfloat16"), help="policy dtype (bfloat16; --fast: float32)"
    )
    args = parser.parse_args(argv)
    sizes = (args.sizes or ",".join(FAST_SIZES if args.fast else GPU_SIZES)).split(",")
    unknown = [s for s in sizes if s not in SHAPES]
    if unknown:
        parser.error(f"--sizes: unknown {unknown}; valid: {', '.join(SHAPES)}")
    only = set(args.only.split(",")) if args.only else set()
    if only - set(KINDS):
        parser.error(f"--only: unknown {sorted(only - set(KINDS))}; valid: {', '.join(KINDS)}")
    if not args.budget_s > 0:
        parser.error(f"--budget-s must be > 0 seconds, got {args.budget_s}")
    args.sizes, args.only = sizes, only
    return args


def _device(args: argparse.Namespace) -> str:
    import torch

    if args.device:
        return args.device
    return "cuda" if torch.cuda.is_available() and not args.fast else "cpu"


def _environment(device: str) -> dict:
    try:
        return environment(device)
    except Exception as err:  # a missing library is reported by the steps too
        return {"device": device, **failure(err)}


def write_report(out: Path, report: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (out / "summary.txt").write_text(summary(report))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here needs the hub; never wait on it
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        print(f"gpu_check: --out {out}: {err}", file=sys.stderr)
        return 2
    device = _device(args)
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print(f"gpu_check: --device {device}, but torch sees no CUDA device", file=sys.stderr)
            return 2
    report = {
        "argv": sys.argv[1:] if argv is None else argv,
        "mode": "fast" if args.fast else "full",
        "budget_s": args.budget_s,
        "sizes": args.sizes,
        "environment": _environment(device),
        "steps": [],
    }
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpu_check-") as scratch:
        for record in run_steps(args, device, Path(scratch)):
            report["steps"].append(record)
            seconds = record.get("seconds", 0.0)
            print(
                f"gpu_check: {record['name']} {record['status']} ({seconds:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
            report["wall_s"] = round(time.monotonic() - started, 1)
            write_report(out, report)
    print(summary(report), end="")
    return 0


def run_steps(args: argparse.Namespace, device: str, scratch: Path):
    """Each step's record as it finishes; if the steps cannot even be imported (a missing
    dependency on the device), one failed record per step kind says why."""
    try:
        from gpu_check_model import FAST, GPU
        from gpu_check_sampling import Context

        workload = FAST if args.fast else GPU
        workload = replace(workload, dtype=args.dtype or workload.dtype)
        ctx = Context(device, workload, scratch, fast=args.fast)
        steps = plan(ctx, args.sizes, args.only)
    except Exception as err:
        for kind in KINDS:
            yield {
                "name": f"{kind}/-",
                "kind": kind,
                "size": "-",
                "status": "failed",
                **failure(err),
            }
        return
    runner = Runner(args.budget_s, device)
    for step in steps:
        yield runner.run(step)


if __name__ == "__main__":
    sys.exit(main())
