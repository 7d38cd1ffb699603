"""Run directories and items files for the `rlvr show` tests, written by hand to the
completions schema of docs/metrics.md (what the writer itself produces is shown in
tests/show/test_show_real_run.py)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

INJECTION = "<script>alert(1)</script>"


def single_turn_row(step: int, group: int, sample: int, correct: bool) -> dict:
    answer = "122" if correct else "121"
    return {
        "step": step,
        "prompt": "Q: 59+63=? A:",
        "completion": f" \\boxed{{{answer}}}",
        "group": group,
        "sample": sample,
        "reward": 1.0 if correct else 0.0,
        "rewards": {},
        "correct": correct,
        "formatted": True,
        "advantage": 0.5 if correct else -0.5,
        "length": 13,
        "truncated": False,
        "kept": True,
        "segments": [{"kind": "policy", "text": f" \\boxed{{{answer}}}"}],
        "turns": None,
    }


def multi_turn_row(step: int) -> dict:
    """A calculator episode: a policy turn with a tool call, the tool's observation, a
    forced interruption phrase, and the final policy turn."""
    segments = [
        {"kind": "policy", "text": " <calc>59+63</calc>"},
        {"kind": "observation", "text": "<result>122</result>"},
        {"kind": "forced", "text": " Final answer:"},
        {"kind": "policy", "text": " \\boxed{122}"},
    ]
    return {
        **single_turn_row(step, 1, 0, True),
        "completion": "".join(s["text"] for s in segments),
        "rewards": {"correct": 1.0, "fewer_tries": 0.5},
        "reward": 1.5,
        "advantage": 0.25,
        "length": 40,
        "segments": segments,
        "turns": [
            {
                "turn": 0,
                "policy": " <calc>59+63</calc>",
                "tool_call": "calc(59+63)",
                "observation": "<result>122</result>",
                "ended": None,
            },
            {
                "turn": 1,
                "policy": " \\boxed{122}",
                "tool_call": None,
                "observation": None,
                "ended": "answer",
            },
        ],
    }


def hostile_row(step: int) -> dict:
    """Model text that would run a script in a page or rewrite a terminal if not escaped."""
    text = f" {INJECTION}\x1b[2J\x1b]0;owned\x07 done"
    return {
        **single_turn_row(step, 2, 0, False),
        "prompt": "Q: <b>bold</b>? A:",
        "completion": text,
        "advantage": None,
        "kept": False,
        "truncated": True,
        "segments": [{"kind": "policy", "text": text}],
    }


def step_rows(step: int) -> list[dict]:
    return [
        single_turn_row(step, 0, 0, True),
        single_turn_row(step, 0, 1, False),
        multi_turn_row(step),
        hostile_row(step),
    ]


def write_run(out: Path, steps=(2, 4), completions: bool = True, total_steps: int = 4) -> Path:
    """A finished 4-step run: config.yaml, metrics.jsonl (eval at 0 and 4), summary.json
    and, when `completions`, the completions of `steps` (4 rows each)."""
    out.mkdir(parents=True, exist_ok=True)
    config = {
        "recipe": "grpo",
        "task": "arithmetic",
        "task_options": {"digits": 2},
        "model": "embedded",
        "seed": 7,
        "steps": total_steps,
        "prompts_per_step": 2,
        "group_size": 2,
    }
    (out / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    records = [{"step": 0, "eval/accuracy": 0.25}]
    for step in range(1, total_steps + 1):
        record = {"step": step, "reward/mean": step / 10, "rollout/response_length": 13.0 + step}
        if step == total_steps:
            record["eval/accuracy"] = 0.5
        records.append(record)
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (out / "summary.json").write_text(json.dumps({"status": "finished"}))
    if completions:
        folder = out / "completions"
        folder.mkdir()
        for step in steps:
            lines = "".join(json.dumps(r) + "\n" for r in step_rows(step))
            (folder / f"step_{step:06d}.jsonl").write_text(lines)
        index = {"schema": 1, "every": 2, "rows_per_step": 4, "steps": list(steps)}
        (folder / "index.json").write_text(json.dumps(index))
    return out


def item(uid: str, answer: str, texts: list[str], prompt: str = "Q: 1+1=? A:") -> dict:
    """An `rlvr eval --items` record whose samples are `texts` (correct when the boxed
    answer is `answer`)."""
    samples = [
        {
            "text": t,
            "correct": t == f" \\boxed{{{answer}}}",
            "formatted": True,
            "extracted": t.strip()[7:-1],
            "reason": "correct" if t == f" \\boxed{{{answer}}}" else f"expected {answer}",
            "tokens": 13,
            "truncated": False,
        }
        for t in texts
    ]
    c = sum(s["correct"] for s in samples)
    n = len(samples)
    return {
        "uid": uid,
        "task": "arithmetic",
        "prompt": prompt,
        "answer": answer,
        "n": n,
        "c": c,
        "avg": c / n,
        "maj": float(c * 2 > n),
        "format_rate": 1.0,
        "mean_tokens": 13.0,
        "samples": samples,
        "pass@1": c / n,
        **({"pass@2": 1 - (n - c) * (n - c - 1) / (n * (n - 1))} if n >= 2 else {}),
    }


def write_items(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path
