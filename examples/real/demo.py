"""`make demo-real`: train the example's config, then compare the model before and after on
the same held-out questions, sampled the same way, and print one line.

1. `rlvr train --config examples/real/grpo_smollm2.yaml` (GRPO, full fine-tune);
2. `rlvr eval --k K --data eval.jsonl --items …` of the base model and of the checkpoint,
   with the config's template, verifier, chat template, temperature and response budget;
3. `rlvr.eval.paired.paired_items`: after − before per question (avg of its K samples),
   a 95 % paired-bootstrap interval over the questions and the exact sign test, as
   `rlvr compare --items` prints it.

    python examples/real/demo.py [--config FILE] [--data FILE] [--k K] [--set KEY=VALUE ...]

`--data` (default: the config's eval_data) and `--set` (passed to `rlvr train`) are for
choosing settings on examples/real/dev.jsonl; the shipped figures are on eval.jsonl.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

from rlvr.eval.paired import format_paired, paired_items

CONFIG = Path(__file__).resolve().parent / "grpo_smollm2.yaml"


def rlvr(*args: str) -> None:
    print("$ rlvr " + " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "rlvr", *args], check=True)


def eval_args(cfg: dict, model: str, data: str, k: int, items: Path) -> list[str]:
    """`rlvr eval --k` of `model` on every row of `data`, with the run's settings."""
    sets = [f"task_options.{key}={json.dumps(value)}" for key, value in cfg["task_options"].items()]
    sets = [s for s in sets if not s.startswith(("task_options.data=", "task_options.eval_data="))]
    sets += [f"policy.{key}={json.dumps(value)}" for key, value in cfg.get("policy", {}).items()]
    return [
        "eval", "--model", model, "--task", cfg["task"], "--data", data, "--k", str(k),
        "--temperature", str(cfg["temperature"]), "--max-new-tokens", str(cfg["max_new_tokens"]),
        "--seed", "1", "--items", str(items),
        *(arg for s in sets for arg in ("--set", s)),
    ]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(CONFIG))
    parser.add_argument("--data", help="questions to compare on (default: the config's eval_data)")
    parser.add_argument("--k", type=int, default=8, help="samples per question (default 8)")
    parser.add_argument("--set", action="append", default=[], help="passed to rlvr train")
    args = parser.parse_args()
    started = time.perf_counter()
    cfg = yaml.safe_load(Path(args.config).read_text())
    out = Path(cfg["out"])
    data = args.data or cfg["task_options"]["eval_data"]
    sets = [arg for s in args.set for arg in ("--set", s)]
    rlvr("train", "--config", args.config, "--out", str(out), "--overwrite", *sets)
    before, after = out / "items_before.jsonl", out / "items_after.jsonl"
    rlvr(*eval_args(cfg, cfg["model"], data, args.k, before))
    rlvr(*eval_args(cfg, str(out / "checkpoint" / "policy"), data, args.k, after))
    result = paired_items(after, before)
    minutes, seconds = divmod(round(time.perf_counter() - started), 60)
    print(format_paired(result, str(after), str(before)))
    print(
        f"held-out accuracy {result.mean_b:.3f} → {result.mean_a:.3f} "
        f"(Δ {result.diff:+.3f}, 95 % paired CI [{result.diff_ci_low:+.3f}, "
        f"{result.diff_ci_high:+.3f}], {result.items} questions × {result.k} samples) "
        f"in {minutes} min {seconds:02d} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
