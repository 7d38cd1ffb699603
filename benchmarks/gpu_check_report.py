"""What `gpu_check.py` says about a run: the machine and library versions, and a short
text summary of the report (one line per step with its headline numbers)."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _version(package: str) -> str | None:
    """The installed version, without importing the package (vLLM takes seconds)."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _git_commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def environment(device: str) -> dict:
    """Versions, the device and its bf16 peak: what a reader needs to compare two reports."""
    import torch
    from gpu_check_model import MFU_FORMULA, bf16_peak

    info = {
        "python": platform.python_version(),
        **{name: _version(name) for name in ("torch", "transformers", "peft", "vllm")},
        "git_commit": _git_commit(),
        "device": device,
        "cuda": torch.version.cuda,
        "cpu_threads": torch.get_num_threads(),
        "mfu_formula": MFU_FORMULA,
    }
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        info.update(
            gpu=props.name,
            gpu_count=torch.cuda.device_count(),
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            bf16_peak_flops=bf16_peak(props.name),
        )
    return info


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _generate(r: dict) -> str:
    line = f"{r['tokens_per_s']:,.0f} tok/s ({r['decode_path']}, {r['rows']} rows)"
    if "tokens_per_s_cpu_generator" in r:
        line += f"; {r['tokens_per_s_cpu_generator']:,.0f} with the Trainer's CPU generator"
    return line


def _mismatch(r: dict) -> str:
    heads = [k for k in r if k.endswith("_head")]
    return "; ".join(
        f"{k}: max|Δ| {r[k]['max_abs_delta']:.2e}, k1 {r[k]['k1']:.1e}, k3 {r[k]['k3']:.1e}"
        for k in heads
    )


def _grpo(r: dict) -> str:
    return (
        f"loss {r['loss/policy']:.3g}, grad norm {r['train/grad_norm']:.3g}, "
        f"{r['trained_tokens']} tokens, update "
        f"{r['time/policy_update_s']:.2f} s, {r['update_tflops_per_s']:.1f} TFLOP/s, MFU "
        f"{_fmt(r.get('mfu'), '.1%')}, peak {_fmt(r['peak_gpu_gib'], '.1f')} GiB"
    )


def _data_parallel(r: dict) -> str:
    return (
        f"{r['backend']}: grad norm {r['train/grad_norm']:.4g} vs single process "
        f"{r['single_process_grad_norm']:.4g} (rel. diff {r['grad_norm_rel_diff']:.1e})"
    )


def _vllm(r: dict) -> str:
    m = r["mismatch_vs_trainer_fp32_head"]
    return f"{r['tokens_per_s']:,.0f} tok/s; vs trainer max|Δ| {m['max_abs_delta']:.2e}"


HEADLINES = {
    "generate": _generate,
    "generate_generic": _generate,
    "generate_compiled": _generate,
    "mismatch": _mismatch,
    "grpo_full": _grpo,
    "grpo_lora": _grpo,
    "ddp": _data_parallel,
    "fsdp": _data_parallel,
    "vllm": _vllm,
}


def headline(record: dict) -> str:
    if record["status"] == "skipped":
        return record["reason"]
    if record["status"] == "failed":
        return record["error"].splitlines()[0][:160]
    try:
        return HEADLINES[record["kind"]](record["result"])
    except (KeyError, TypeError, ValueError) as err:  # a partial result still prints
        return f"(no headline: {type(err).__name__} {err})"


def summary(report: dict) -> str:
    """A few lines for a terminal: the machine, then each step's status and numbers."""
    env = report["environment"]
    steps = report["steps"]
    counts = {s: sum(r["status"] == s for r in steps) for s in ("ok", "failed", "skipped")}
    where = env.get("gpu") or f"{env.get('device')} ({env.get('cpu_threads')} threads)"
    versions = ", ".join(f"{k} {env.get(k)}" for k in ("torch", "transformers", "peft", "vllm"))
    lines = [
        f"gpu_check ({report['mode']}) on {where}: {versions}, commit "
        f"{(env.get('git_commit') or '?')[:10]}",
        f"{counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped in "
        f"{report.get('wall_s', 0):.0f} s (budget {report['budget_s']:g} s)",
    ]
    width = max((len(r["name"]) for r in steps), default=0)
    for r in steps:
        seconds = f"{r['seconds']:6.1f}s" if "seconds" in r else " " * 7
        lines.append(f"{r['name']:<{width}}  {r['status']:<7} {seconds}  {headline(r)}")
    if "error" in env:
        lines.append(f"environment: {env['error']}")
    lines.append(f"MFU: {env.get('mfu_formula')}")
    return "\n".join(lines) + "\n"
