"""The household credit study (issue 45, item 4): multi-turn GRPO vs AgentOPSD vs TEMPO on
the embedded household world at equal sampled tokens, seeds × eval games, pre-registered
in study.yaml.

Arms 1-2 run as one `rlvr compare` matrix (a subprocess, with `budget: {mode: tokens}`);
arm 3 is examples/tempo/household_tempo.py with `max_sampled_tokens`, run here, one seed
after another, while the matrix runs. Every arm's final weights are then played on the same
eval games by one function (`evaluate`: `rlvr.eval.evaluate_policy`, the train loop's), and
report.md judges study.yaml's hypothesis with rlvr.compare's verdict code (joint bootstrap
over seeds × items, manipulation checks, Holm).

    python studies/household_credit/study.py --out studies/household_credit/run
    python studies/household_credit/study.py --out /tmp/smoke --seeds 1 --tokens 14000 --eval-size 8
    python studies/household_credit/study.py --out studies/household_credit/run --report-only
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from rlvr.compare.matrix import spec_from_dict
from rlvr.compare.verdict import hypothesis_from_dict, judge
from rlvr.compare.verdict_report import verdict_section
from rlvr.eval import evaluate_policy
from rlvr.models.cache import cache_root
from rlvr.parts.build import make_engine
from rlvr.runlog.logger import read_metrics
from rlvr.tasks import make_task
from rlvr.train.loop import EVAL_SEED_OFFSET
from rlvr.warmstart.load import load_policy

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LABELS = ("grpo", "agent_opsd", "tempo")
REFERENCE = "warm_start"  # evaluated with each seed's eval seed too: where every arm began
TEMPO = ROOT / "examples" / "tempo" / "household_tempo.py"
EDGE = 5  # TD steps averaged at each end of the critic's error curve


def load_study(path: Path = HERE / "study.yaml") -> dict:
    return yaml.safe_load(path.read_text())


def warm_start_dir(study: dict) -> Path:
    """The cached household warm start every arm starts from; its absence is an error
    naming how it is made (~22 min), since a different warm start is a different study."""
    path = cache_root() / "warmstart" / study["warm_start"]
    if not (path / "meta.json").is_file():
        raise SystemExit(
            f"warm start {path} is not cached; make it first (about 22 min on a 2-core CPU): "
            'python -c "from rlvr.warmstart.load import load_policy; '
            "load_policy('embedded', 'household', {'text': 'compact'}, 0)\""
        )
    return path


def compare_matrix(study: dict, seeds: int, tokens: int, out: Path) -> Path:
    """Arms 1-2 as an `rlvr compare` matrix file (validated here), written to out/."""
    matrix = json.loads(json.dumps(study["compare"]))
    matrix["base"]["model"] = str(warm_start_dir(study))
    matrix["seeds"], matrix["budget"]["value"] = seeds, tokens
    spec_from_dict(matrix).cells(out)  # fails now, naming the field, if a config is wrong
    path = out / "compare_input.yaml"
    path.write_text(yaml.safe_dump(matrix, sort_keys=False))
    return path


def load_tempo():
    sys.path.insert(0, str(TEMPO.parent))
    spec = importlib.util.spec_from_file_location("household_tempo", TEMPO)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def run_tempo(study: dict, seed: int, tokens: int, out: Path) -> None:
    """Arm 3, one seed: train to the budget, save the final weights (LoRA merged) and its
    per-step records (warm-up steps numbered below 1, TD steps from 1)."""
    cell = (out / "cells" / f"tempo-seed{seed}").resolve()  # a save name: absolute, as given
    if (cell / "records.json").is_file():
        return
    tempo = load_tempo()
    warm = str(warm_start_dir(study))  # every seed from the one warm start, as arms 1-2
    config = tempo.Config(**study["tempo"], seed=seed, max_sampled_tokens=tokens, base_model=warm)
    started = time.perf_counter()
    history = tempo.train(config)
    run = history.pop("run")
    saved = run.trainer.save_weights_for_sampler(str(cell / "final"), overwrite=True).result()
    warm, td = history["warmup"], history["td"]
    records = [{"step": i - len(warm), **m} for i, m in enumerate(warm, 1)]
    records += [{"step": i, **m} for i, m in enumerate(td, 1)]
    summary = {
        "sampled_tokens": run.sampled,
        "warmup_steps": len(warm),
        "td_steps": len(td),
        "seconds": round(time.perf_counter() - started, 1),
        "policy": str(Path(saved.path).relative_to(cell)),
    }
    (cell / "records.json").write_text(json.dumps({"summary": summary, "records": records}))


def evaluate(policy_dir: Path, seed: int, study: dict, size: int) -> list[float]:
    """Won (0/1) per eval game of the policy in `policy_dir`: every arm through this."""
    e = study["eval"]
    options = study["compare"]["base"]["task_options"]
    task = make_task("household", **options)
    model, tokenizer, _ = load_policy(str(policy_dir), "household", options, seed)
    model.eval()
    engine = make_engine(model, tokenizer)
    problems = task.problems(e["split"])[:size]
    result = evaluate_policy(
        engine,
        task,
        problems,
        samples=e["samples"],
        temperature=e["temperature"],
        max_new_tokens=e["max_new_tokens"],
        seed=seed + EVAL_SEED_OFFSET,
    )
    return result.item_correct


def policy_dir(out: Path, label: str, seed: int, study: dict) -> Path:
    if label == REFERENCE:
        return warm_start_dir(study)
    if label == "tempo":
        cell = out / "cells" / f"tempo-seed{seed}"
        return cell / json.loads((cell / "records.json").read_text())["summary"]["policy"]
    return out / "cells" / f"{label}-seed{seed}" / "checkpoint" / "policy"


def evaluate_all(study: dict, seeds: int, size: int, out: Path) -> dict:
    """items[label][seed]: won per eval game, cached in out/evals.json."""
    path = out / "evals.json"
    items = json.loads(path.read_text()) if path.is_file() else {}
    for label in (*LABELS, REFERENCE):
        for seed in range(seeds):
            key = f"{label}-seed{seed}"
            if len(items.get(key, [])) != size:
                started = time.perf_counter()
                items[key] = evaluate(policy_dir(out, label, seed, study), seed, study, size)
                took = time.perf_counter() - started
                print(f"eval {key}: won {np.mean(items[key]):.3f} ({took:.0f} s)", flush=True)
                path.write_text(json.dumps(items))
    return {lab: {s: items[f"{lab}-seed{s}"] for s in range(seeds)} for lab in (*LABELS, REFERENCE)}


def error_drop(records: list[dict]) -> float:
    """Mean critic/abs_error of the first EDGE TD steps minus that of the last EDGE
    (halves when there are fewer than 2·EDGE)."""
    errors = [r["critic/abs_error"] for r in records if r["step"] >= 1]
    edge = min(EDGE, len(errors) // 2)
    if edge == 0:
        return math.nan
    return float(np.mean(errors[:edge]) - np.mean(errors[-edge:]))


def run_records(seeds: int, out: Path) -> list[Path]:
    """The files a report is built from: each compare cell's metrics, each TEMPO run's
    records (the eval results are in out/evals.json, or played again from the weights)."""
    cells = out / "cells"
    arms = [
        cells / f"{label}-seed{s}" / "metrics.jsonl" for label in LABELS[:2] for s in range(seeds)
    ]
    return arms + [cells / f"tempo-seed{s}" / "records.json" for s in range(seeds)]


def collect(seeds: int, out: Path, items: dict) -> tuple[dict, dict]:
    """records[label][seed] as the verdict reads them (the final eval appended as the last
    record, the loop's own 8-item checks dropped), and each run's costs."""
    records, costs = {lab: {} for lab in LABELS}, {lab: {} for lab in LABELS}
    for seed in range(seeds):
        for label in LABELS[:2]:
            cell = out / "cells" / f"{label}-seed{seed}"
            steps = [
                {k: v for k, v in r.items() if not k.startswith("eval/")}
                for r in read_metrics(cell / "metrics.jsonl")
            ]
            tokens = int(sum(r.get("rollout/generated_tokens") or 0 for r in steps))
            last = max(r["step"] for r in steps)
            costs[label][seed] = {"sampled_tokens": tokens, "steps": last}
            records[label][seed] = steps
        data = json.loads((out / "cells" / f"tempo-seed{seed}" / "records.json").read_text())
        steps, summary = data["records"], data["summary"]
        costs["tempo"][seed] = {
            "sampled_tokens": summary["sampled_tokens"],
            "steps": f"{summary['warmup_steps']} + {summary['td_steps']}",
        }
        steps.append({"step": summary["td_steps"], "critic/abs_error_drop": error_drop(steps)})
        records["tempo"][seed] = steps
        for label in LABELS:
            last = max(r["step"] for r in records[label][seed])
            won = float(np.mean(items[label][seed]))
            records[label][seed].append({"step": last, "eval/accuracy": won})
    return records, costs


def write_report(study: dict, seeds: int, out: Path, items: dict) -> Path:
    hypothesis = hypothesis_from_dict(study["hypothesis"], LABELS)
    records, costs = collect(seeds, out, items)
    overall, verdicts = judge(hypothesis, records, items)
    size = len(items["grpo"][0])
    control = float(np.mean([np.mean(items["grpo"][s]) for s in range(seeds)]))
    lines = [
        "# Household credit study: multi-turn GRPO vs AgentOPSD vs TEMPO at equal sampled tokens",
        "",
        f"**Verdict: {overall}**" + (f" (pilot: {seeds} of 5 seeds)" if seeds < 5 else ""),
        "",
        verdict_section(hypothesis, records, items, size, control),
        "",
        "## Final eval success (won, 0/1) per seed",
        "",
        f"{size} eval games, one sample each at temperature {study['eval']['temperature']}, "
        "12 commands; every arm's final weights played by `study.py:evaluate`, with the "
        "eval seed of its RL seed. The warm start, played the same way, is where every arm "
        "began (a reference, not an arm).",
        "",
        "| arm | " + " | ".join(f"seed {s}" for s in range(seeds)) + " | mean |",
        "|---|" + "---|" * (seeds + 1),
    ]
    for label in (*LABELS, REFERENCE):
        won = [float(np.mean(items[label][s])) for s in range(seeds)]
        lines.append(
            f"| {label} | " + " | ".join(f"{w:.3f}" for w in won) + f" | {np.mean(won):.3f} |"
        )
    lines += [
        "",
        "## The budget: sampled tokens per run",
        "",
        f"B = {study_tokens(out):,}; each run stops after the step at which its count reaches B.",
        "",
        "| arm | " + " | ".join(f"seed {s}" for s in range(seeds)) + " | mean |",
        "|---|" + "---|" * (seeds + 1),
    ]
    for label in LABELS:
        tokens = [costs[label][s]["sampled_tokens"] for s in range(seeds)]
        cells = " | ".join(f"{t:,.0f} ({costs[label][s]['steps']})" for s, t in enumerate(tokens))
        lines.append(f"| {label} | {cells} | {np.mean(tokens):,.0f} |")
    lines += [
        "",
        "(steps in brackets: GRPO/AgentOPSD rollout batches of 4 games × 8; TEMPO warm-up + TD.)",
        "",
        "## Mechanisms per seed",
        "",
        "| seed | AgentOPSD mean `turn/weight_dev_mean` | TEMPO `critic/abs_error` first → last TD steps (drop) |",
        "|---|---|---|",
    ]
    for s in range(seeds):
        dev = np.mean([r["turn/weight_dev_mean"] for r in records["agent_opsd"][s]
                       if "turn/weight_dev_mean" in r and r["step"] >= 1])  # fmt: skip
        td = [
            r["critic/abs_error"]
            for r in records["tempo"][s]
            if "critic/abs_error" in r and r["step"] >= 1
        ]
        edge = min(EDGE, len(td) // 2)
        first, last = np.mean(td[:edge]), np.mean(td[-edge:])
        lines.append(f"| {s} | {dev:.4f} | {first:.3f} → {last:.3f} ({first - last:+.3f}) |")
    report = out / "compare_report.md"
    if report.is_file():
        text = report.read_text()
        at = text.find("## What differed between cells")
        end = text.find("\n## ", at + 1)
        if at >= 0:
            section = text[at : end if end > at else None].split("\n")[2:]
            lines += ["", "## Arms 1-2: what differed (rlvr compare)", "", *section]
    lines += ["", "Design, departures and the reading: [README.md](../README.md)."]
    path = out / "report.md"
    path.write_text("\n".join(lines).rstrip() + "\n")
    write_csv(out, seeds, costs, items, verdicts)
    return path


def study_tokens(out: Path) -> int:
    return int(yaml.safe_load((out / "compare_input.yaml").read_text())["budget"]["value"])


def write_csv(out: Path, seeds: int, costs: dict, items: dict, verdicts) -> None:
    with (out / "per_seed.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["arm", "seed", "sampled_tokens", "steps", "eval_won", "eval_items"])
        for label in LABELS:
            for s in range(seeds):
                c = costs[label][s]
                won = float(np.mean(items[label][s]))
                writer.writerow(
                    [label, s, c["sampled_tokens"], c["steps"], f"{won:.4f}", len(items[label][s])]
                )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=int, help="default: study.yaml's (5)")
    parser.add_argument("--tokens", type=int, help="the budget B; default: study.yaml's")
    parser.add_argument("--eval-size", type=int, help="default: study.yaml's eval.size")
    parser.add_argument("--jobs", type=int, default=1, help="parallel compare cells")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    study = load_study()
    seeds = args.seeds or study["seeds"]
    size = args.eval_size or study["eval"]["size"]
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        tokens = args.tokens or study["tokens"]
        matrix = compare_matrix(study, seeds, tokens, out)
        command = [sys.executable, "-m", "rlvr.cli", "compare", "--matrix", str(matrix)]
        command += ["--out", str(out), "--jobs", str(args.jobs)]
        with (out / "compare.log").open("a") as log:
            compare = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
            for seed in range(seeds):
                run_tempo(study, seed, tokens, out)
            if compare.wait() != 0:
                raise SystemExit(
                    f"rlvr compare failed ({compare.returncode}); see {out}/compare.log"
                )
        (out / "report.md").replace(out / "compare_report.md")
    else:
        missing = [str(f) for f in run_records(seeds, out) if not f.is_file()]
        if missing:
            raise SystemExit(
                f"--report-only: {out} lacks {len(missing)} run record(s), e.g. {missing[0]}; "
                f"run the study there first (without --report-only)"
            )
    items = evaluate_all(study, seeds, size, out)
    print(f"wrote {write_report(study, seeds, out, items)}")


if __name__ == "__main__":
    main()
