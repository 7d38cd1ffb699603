"""What every comparison of `step_vs_trl.py` shares: each contestant in a process of its
own, built from the same seed and driven one step at a time over a pipe (`child` is the
contestant's end, `run_setting` the driver's), and the report of a setting: each
comparison's ratio lines, then every contestant's step time, spread and phases."""

from __future__ import annotations

import json
import os
import signal
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import step_vs_trl_work as work
import torch
from harness import contestants
from step_vs_trl_sides import RlvrSide, TrlSide, gated, make_side
from step_vs_trl_work import build_work, weights_digest

from rlvr.models.tiny import count_parameters

ENTRY = Path(__file__).with_name("step_vs_trl.py")  # what each contestant's process runs
PHASES = ("generation", "logprob", "backward", "optimizer")


@dataclass(frozen=True)
class Comparison:
    """Contestants run side by side and the lines that compare them: `headline(s)` once,
    above the first setting; `summary(size, loss, params, s, results)` per setting, where
    `s` holds each contestant's `summarize`d times and `results` its raw step times."""

    contestants: tuple[str, ...]
    headline: Callable[[dict], list[str]]
    summary: Callable[..., list[str]]


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

    hf_tok, model = build_work(size)
    ready = {
        "threads": torch.get_num_threads(),
        "params": count_parameters(model),
        "weights": weights_digest(model),
    }
    side = make_side(name, model, hf_tok, loss, tokens, group, steps)
    if not isinstance(side, TrlSide):  # rlvr's loop or the service: a step per call
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

    gated(side.trainer, before, lambda: pending.append(side.times[-1]))
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


def run_setting(size, loss, reps, warmup, tokens, group, threads: int, names):
    """Per contestant, the phase times of each counted step, and the parameter count.
    Each contestant runs in its own process; the driver asks each in turn for one step
    and waits for its answer, so they alternate step by step."""
    flags = [f"--sizes={size}", f"--losses={loss}", f"--reps={reps}", f"--warmup={warmup}"]
    flags += [f"--tokens={tokens}", f"--group={group}", f"--threads={threads}"]
    flags += ["--compile"] if RlvrSide.compile_decode else []
    flags += work.WORK.flags()
    argv = lambda name: [sys.executable, str(ENTRY), f"--child={name}", *flags]  # noqa: E731
    with contestants(names, argv) as procs:
        ready = {name: proc.receive() for name, proc in procs.items()}
        check_ready(ready, threads)
        times: dict[str, list] = {name: [] for name in procs}
        for _ in range(warmup + reps):
            for name, proc in procs.items():
                times[name].append(proc.step())
    return ready["rlvr"]["params"], {name: t[warmup:] for name, t in times.items()}


# ---- the report of a setting


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


def report(size, loss, params, results, first: bool, comparisons: list[Comparison]) -> None:
    """Each comparison's headline (above the first setting only) and summary, then every
    contestant's median step, spread and phases, rlvr's trained rows and CPU time."""
    s = {name: summarize(t) for name, t in results.items()}
    rows = sorted({t["rows"] for t in results["rlvr"]})
    if first:
        for comparison in comparisons:
            for line in comparison.headline(s):
                print(line)
    for comparison in comparisons:
        for line in comparison.summary(size, loss, params, s, results):
            print(line)
    print(
        f"{'contestant':<10} {'s/step':>7} {'min':>6} {'max':>6} "
        + " ".join(f"{p[:9]:>9}" for p in (*PHASES, "other"))
    )
    for name, m in s.items():
        print(
            f"{name:<10} {m['median']:7.3f} {m['min']:6.3f} {m['max']:6.3f} "
            + " ".join(f"{m[p]:9.3f}" for p in (*PHASES, "other"))
        )
    micro = sorted({t["micro_rows"] for t in results["rlvr"] if "micro_rows" in t})
    print(
        f"rows rlvr trained per step: {rows} (TRL trains every row); rows per micro-batch "
        f"(memory_budget_gib {work.WORK.memory_budget or 'none'}): {micro}"
    )
    cpu = ", ".join(
        f"{name} {statistics.median(t['cpu'] for t in results[name]):.3f}" for name in s
    )
    print(f"CPU s/step (median; the process's CPU time over all its threads): {cpu}")
    if all("rss" in t[-1] for t in results.values()):
        rss = ", ".join(f"{name} {results[name][-1]['rss']:.2f}" for name in s)
        print(f"peak RSS GiB (each contestant's process, after its last step): {rss}")
    sys.stdout.flush()
