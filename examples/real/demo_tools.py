"""`make demo-real-tools`: train the tool example's config, then compare the model before and
after on the same held-out questions, in the same episodes, and print two lines: the
tool-call rate and the accuracy.

1. `rlvr train --config examples/real/tools_smollm2.yaml` (GRPO, full fine-tune, episodes
   with the calculator);
2. `rlvr eval --run OUT --k K --data eval --items …` of the base model (`--model
   smollm2-135m`) and of the checkpoint: the run's tools, episode budgets, system prompt,
   verifier, temperature and response budget, the same sampling seed;
3. item by item, after − before (each question's mean over its K episodes), a 95 % paired
   bootstrap interval over the questions and the exact sign test (`rlvr.eval.paired`, as
   `rlvr compare --items` does), for three scores: the verifier's accuracy (the last
   number of the episode, the tool's result included), the tool-call rate (the share of
   episodes that called the calculator: once at most) and the accuracy of the answer the
   model states in its final turn (`tool_rewards.stated_answer`, the training reward), the
   one the last line calls accuracy.

    python examples/real/demo_tools.py [--config FILE] [--data FILE] [--k K] [--set KEY=VALUE ...]

`--data` (default: the config's eval_data) and `--set` (passed to `rlvr train`) are for
choosing settings on examples/real/tools_dev.jsonl; the shipped figures are on tools_eval.jsonl.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import yaml

from rlvr.eval.paired import PairedItems, format_paired, paired_items, read_items
from rlvr.eval.significance import paired_bootstrap, sign_test

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from examples.real.tool_rewards import stated_answer

CONFIG = Path(__file__).resolve().parent / "tools_smollm2.yaml"


def rlvr(*args: str) -> None:
    print("$ rlvr " + " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "rlvr", *args], check=True)


def eval_args(run: Path, model: str | None, data: str, k: int, items: Path) -> list[str]:
    """`rlvr eval --k` on every row of `data` with the run's settings and tools; `model`
    None: the run's checkpoint."""
    chosen = ["--model", model] if model else []
    return ["eval", "--run", str(run), *chosen, "--data", data, "--k", str(k), "--seed", "1",
            "--items", str(items)]  # fmt: skip


def called(record: dict, sample: dict) -> float:
    """1 when the episode called the calculator (at most once: `max_tool_calls: 1`)."""
    return float(sample["tool_calls"] > 0)


def stated(record: dict, sample: dict) -> float:
    """1 when the model's own final turn states the answer (`tool_rewards.stated_answer`)."""
    return stated_answer([record["prompt"]], [sample["text"]], [record["answer"]])[0]


def per_item(path: Path, value: Callable[[dict, dict], float]) -> dict[str, float]:
    """Each question's mean of `value` over its episodes, by uid."""
    items = read_items(path)
    return {
        uid: float(np.mean([value(record, s) for s in record["samples"]]))
        for uid, record in items.records.items()
    }


def paired_values(
    after: Path, before: Path, value: Callable[[dict, dict], float], name: str
) -> PairedItems:
    """`value` compared item by item, as `paired_items` compares the verifier's accuracy."""
    checked = paired_items(after, before)  # the two files hold the same items, the same k
    a, b = per_item(after, value), per_item(before, value)
    uids = sorted(a)
    x, y = np.array([a[u] for u in uids]), np.array([b[u] for u in uids])  # (items,)
    interval = paired_bootstrap(x[None], y[None])
    test = sign_test(x[None], y[None])
    return PairedItems(
        items=len(uids), k=checked.k, task=checked.task, score=name,
        mean_a=float(x.mean()), mean_b=float(y.mean()), diff=interval.mean,
        diff_ci_low=interval.low, diff_ci_high=interval.high,
        wins=test.wins, losses=test.losses, ties=test.ties, p_value=test.p_value,
    )  # fmt: skip


def summary(name: str, result: PairedItems) -> str:
    return (
        f"held-out {name} {result.mean_b:.3f} → {result.mean_a:.3f} (Δ {result.diff:+.3f}, "
        f"95 % paired CI [{result.diff_ci_low:+.3f}, {result.diff_ci_high:+.3f}], "
        f"{result.items} questions × {result.k} episodes)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(CONFIG))
    parser.add_argument("--data", help="questions to compare on (default: the config's eval_data)")
    parser.add_argument("--k", type=int, default=4, help="episodes per question (default 4)")
    parser.add_argument("--set", action="append", default=[], help="passed to rlvr train")
    args = parser.parse_args()
    started = time.perf_counter()
    cfg = yaml.safe_load(Path(args.config).read_text())
    out = Path(cfg["out"])
    data = args.data or cfg["task_options"]["eval_data"]
    sets = [arg for s in args.set for arg in ("--set", s)]
    rlvr("train", "--config", args.config, "--out", str(out), "--overwrite", *sets)
    before, after = out / "items_before.jsonl", out / "items_after.jsonl"
    rlvr(*eval_args(out, cfg["model"], data, args.k, before))
    rlvr(*eval_args(out, None, data, args.k, after))
    episode = paired_items(after, before)  # the verifier's: the episode's last number
    calls = paired_values(after, before, called, "tool-call rate")
    accuracy = paired_values(after, before, stated, "answer stated in the final turn")
    minutes, seconds = divmod(round(time.perf_counter() - started), 60)
    for result in (episode, calls, accuracy):
        print(format_paired(result, str(after), str(before)))
    print(summary("tool-call rate", calls))
    print(summary("accuracy", accuracy) + f" in {minutes} min {seconds:02d} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
