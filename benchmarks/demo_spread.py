"""`make demo`'s held-out accuracy across the CPU's instruction sets and seeds (issue 43).

torch picks its CPU kernels by instruction set (`ATEN_CPU_CAPABILITY`: default, avx2,
avx512), and each rounds float sums in its own order, so the warm start and the RL run
take other paths on another CPU. For each instruction set this CPU offers, the demo runs
with a fresh warm-start cache (`RLVR_CACHE`, so the warm start is retrained under that
instruction set; `warm_seed` stays 0, so the seeds of one instruction set share it) and
each seed; one run at a time, one torch thread, as `make demo`. An entry `avx512:COMPATIBLE`
also sets `MKL_CBWR=COMPATIBLE`: MKL's matrix products take another code path (on an AMD
CPU, MKL runs its AVX2 kernels whatever `MKL_ENABLE_INSTRUCTIONS` says; an Intel AVX-512
CPU runs others). Prints a markdown table (and the CPU, torch's detected capability) of
`rlvr train`'s last line per run.
Run: .venv/bin/python benchmarks/demo_spread.py [--isas default,avx2,avx512] [--seeds 0,1,2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "configs" / "demo.yaml"
CAPABILITY = "import torch; print(torch.backends.cpu.get_cpu_capability())"


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def capability(env: dict[str, str]) -> str:
    """What torch runs under `env`: an instruction set the CPU lacks falls back."""
    out = subprocess.run([sys.executable, "-c", CAPABILITY], env=env, capture_output=True)
    return out.stdout.decode().strip()


def demo_run(env: dict[str, str], seed: int, out: Path) -> dict[str, float]:
    """One `make demo` run with `--seed`; its before/after accuracies and wall seconds."""
    command = [sys.executable, "-m", "rlvr", "train", "--config", str(DEMO)]
    command += ["--seed", str(seed), "--out", str(out), "--overwrite", "--no-progress"]
    start = time.perf_counter()
    subprocess.run(command, env=env, cwd=ROOT, check=True, capture_output=True)
    summary = json.loads((out / "summary.json").read_text())
    before, after = summary["initial"], summary["final"]
    return {
        "sampled": (before["eval/accuracy"], after["eval/accuracy"]),
        "greedy": (before["eval/greedy_accuracy"], after["eval/greedy_accuracy"]),
        "wall_s": time.perf_counter() - start,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--isas", default="default,avx2,avx512", help="ATEN_CPU_CAPABILITY")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--work", default=None, help="cache and run folders (default: a tmp)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="rlvr-demo-spread-"))
    print(f"CPU: {cpu_model()}; native capability: {capability(dict(os.environ))}")
    print(
        "| ATEN_CPU_CAPABILITY[:MKL_CBWR] | torch runs | seed | sampled before → after | gain "
        "| greedy before → after | wall s |"
    )
    print("|---|---|---|---|---|---|---|")
    for entry in args.isas.split(","):
        isa, _, cbwr = entry.partition(":")
        env = {**os.environ, "OMP_NUM_THREADS": "1", "ATEN_CPU_CAPABILITY": isa}
        if cbwr:
            env["MKL_CBWR"] = cbwr
        env["RLVR_CACHE"] = str(work / f"cache-{entry}")  # a fresh warm start per entry
        runs = capability(env)
        for seed in [int(s) for s in args.seeds.split(",")]:
            r = demo_run(env, seed, work / f"run-{entry}-{seed}")
            (s0, s1), (g0, g1) = r["sampled"], r["greedy"]
            print(
                f"| {entry} | {runs} | {seed} | {s0:.3f} → {s1:.3f} | {s1 - s0:+.3f} "
                f"| {g0:.3f} → {g1:.3f} | {r['wall_s']:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
