"""The terminal view of a run: config summary, newest metrics, newest completions.

Token classes are told apart by ANSI colour when writing to a terminal, and by bracket
markers otherwise (a pipe, a file, `--no-color`, `NO_COLOR`): policy text is plain,
`⟦obs: …⟧` an environment's observation, `⟦forced: …⟧` text the engine forced in,
`⟦masked: …⟧` tokens masked out of the loss. Model text is untrusted: control characters
(an escape sequence could rewrite the terminal) are printed as visible `\\xNN` escapes.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

from rlvr.show.load import NO_COMPLETIONS, Run, images, latest_metrics, segments

SHOWN_METRICS = (
    "eval/accuracy",
    "eval/greedy_accuracy",
    "eval/format_rate",
    "reward/mean",
    "reward/accuracy",
    "reward/format_rate",
    "rollout/response_length",
    "rollout/truncated_frac",
    "rollout/kept_responses",
    "clip/frac",
    "loss/kl",
    "policy/entropy",
    "train/grad_norm",
    "time/wall_s",
)
ENV_METRICS = (
    "env/turns",
    "env/tool_calls",
    "env/failed_frac",
    "env/tool_error_rate",
    "env/valid_call_rate",
    "env/tool_success_rate",
    "env/observation_tokens",
    "env/observations_cut",
    "env/ended_budget",
)
"""The episodes' health, shown for multi-turn runs (docs/metrics.md, `env/`)."""
ANSI = {
    "observation": "36",
    "forced": "33",
    "masked": "2;9",
    "prompt": "2",
    "good": "32",
    "bad": "31",
}
MARK = {"observation": "obs", "forced": "forced", "masked": "masked"}
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
INDENT = " " * 14


def clean(text: str) -> str:
    """`text` with control characters (but newline and tab) made visible: `\\x1b`."""
    return CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def paint(text: str, style: str, color: bool) -> str:
    return f"\x1b[{ANSI[style]}m{text}\x1b[0m" if color and text else text


def render_segments(parts: list[dict[str, str]], color: bool) -> str:
    """The completion with each token class visibly distinct (colour or ⟦kind: …⟧)."""
    out = []
    for part in parts:
        text, kind = clean(part["text"]), part["kind"]
        if kind == "policy":
            out.append(text)
        elif color:
            out.append(paint(text, kind, color))
        else:
            out.append(f"⟦{MARK[kind]}: {text}⟧")
    return "".join(out)


def legend(color: bool) -> str:
    if color:
        return "legend: policy  " + "  ".join(paint(kind, kind, True) for kind in MARK)
    return "legend: policy text plain, ⟦obs: …⟧ observation, ⟦forced: …⟧ forced, ⟦masked: …⟧ masked"


def fmt(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def config_lines(run: Run) -> list[str]:
    cfg = run.config
    options = cfg.get("task_options") or {}
    task = str(cfg.get("task", "?")) + (f" {fmt_options(options)}" if options else "")
    status = (run.summary or {}).get("status", "no summary.json (running, or stopped early)")
    last = run.metrics[-1].get("step") if run.metrics else None
    batch = f"{cfg.get('prompts_per_step', '?')} prompts × {cfg.get('group_size', '?')}"
    return [
        f"run {run.path}",
        f"  task {task}   recipe {cfg.get('recipe', '?')}   model {cfg.get('model', '?')}",
        f"  steps {last if last is not None else '—'} of {cfg.get('steps', '?')}   "
        f"seed {cfg.get('seed', '?')}   batch {batch}   status {status}",
    ]


def fmt_options(options: dict) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in options.items()) + "}"


def metric_lines(run: Run, step: int | None) -> list[str]:
    if not run.metrics:
        return ["metrics: none logged yet (no metrics.jsonl)"]
    latest = latest_metrics(run.metrics, step)
    at = max((s for _, s in latest.values() if isinstance(s, int)), default=None)
    lines = [f"metrics at step {at}" + (f" (--step {step})" if step is not None else "")]
    lines += _values(latest, SHOWN_METRICS, at)
    if any(name in latest for name in ENV_METRICS):
        lines += ["episodes", *_values(latest, ENV_METRICS, at)]
        lines += env_alerts(latest)
    return lines


def _values(latest: dict[str, tuple], names: tuple[str, ...], at: int | None) -> list[str]:
    lines = []
    for name in names:
        if name in latest:
            value, logged = latest[name]
            note = f"  (step {logged})" if logged != at else ""
            lines.append(f"  {name:26} {fmt(value)}{note}")
    return lines


def env_alerts(latest: dict[str, tuple]) -> list[str]:
    """What needs a look in the newest episode metrics: the environment failed, tools
    failed, or the token budget cut most episodes."""
    value = lambda name: latest.get(name, (0.0, None))[0] or 0.0  # noqa: E731
    alerts = []
    if value("env/failed_frac") > 0:
        alerts.append(
            f"the environment failed on {value('env/failed_frac'):.0%} of the episodes "
            f"(env/failed_frac; each failed row says why)"
        )
    if value("env/tool_error_rate") > 0:
        alerts.append(f"{value('env/tool_error_rate'):.0%} of tool calls failed")
    if value("env/ended_budget") > 0.5:
        alerts.append(
            f"{value('env/ended_budget'):.0%} of the episodes ran out of tokens "
            f"(raise max_new_tokens)"
        )
    return [f"  ! {alert}" for alert in alerts]


def row_lines(row: dict[str, Any], color: bool) -> list[str]:
    """One completion: its numbers, prompt, text (token classes distinct) and turns."""
    mark = paint("✓ correct", "good", color) if row["correct"] else paint("✗ wrong", "bad", color)
    advantage = row.get("advantage")
    numbers = [
        mark,
        f"reward {fmt(row['reward'])}",
        *shaped(row),
        "advantage " + ("—" if advantage is None else f"{advantage:+.3g}"),
        f"length {row.get('length', '?')}",
        *(["truncated"] if row.get("truncated") else []),
        "kept" if row.get("kept", True) else "dropped",
        *(["text cut when logged"] if row.get("cut") else []),
    ]
    head = f"[group {row.get('group', '?')} · sample {row.get('sample', '?')}] "
    lines = [head + "  ".join(numbers)]
    lines += _field("prompt", paint(clean(row["prompt"]), "prompt", color))
    if row.get("images"):
        lines += _field("images", "  ".join(map(image_marker, images(row))))
    lines += _field("completion", render_segments(segments(row), color))
    rewards = row.get("rewards") or {}
    if rewards:
        lines += _field("rewards", "  ".join(f"{clean(k)}={fmt(v)}" for k, v in rewards.items()))
    if row.get("turns") is not None:
        lines += _field("turns", turns_summary(row))
    if row.get("env_failed") or failed_to_start(row):
        reason = row.get("env_failed") or "it could not start (an older run: no reason logged)"
        lines += _field("env failed", paint(clean(reason), "bad", color))
    return lines


def image_marker(image: dict[str, Any]) -> str:
    """`[image 24×24]` for a picture the prompt showed (`rlvr show --html` draws it)."""
    unreadable = "" if image["png"] else ", unreadable"
    return f"[image {image['width']}×{image['height']}{unreadable}]"


def shaped(row: dict[str, Any]) -> list[str]:
    """The shaped reward (overlong penalty, KL in reward), when logged and not the reward."""
    value = row.get("shaped_reward")
    return [] if value is None or value == row["reward"] else [f"shaped {fmt(value)}"]


def failed_to_start(row: dict[str, Any]) -> bool:
    """An episode whose environment failed before the first turn (no turn at all)."""
    return row.get("turns") == []


def env_failed(row: dict[str, Any]) -> bool:
    """The episode's environment failed (the row's reason, or how it ended)."""
    turns = row.get("turns") or []
    return (
        bool(row.get("env_failed"))
        or failed_to_start(row)
        or (bool(turns) and turns[-1].get("ended") == "env_failed")
    )


def turns_summary(row: dict[str, Any]) -> str:
    turns = row["turns"]
    calls = sum(1 for t in turns if t.get("tool_call"))
    ended = next((t["ended"] for t in reversed(turns) if t.get("ended")), "—")
    notes = [f"tool calls: {calls}"] if calls else []  # episodes without tools record none
    for key, what in (("tool_errors", "tool errors"), ("invalid_calls", "invalid calls")):
        if row.get(key):
            notes.append(f"{what}: {row[key]}")
    notes.append(f"ended: {clean(str(ended))}")
    return f"{len(turns)} ({'; '.join(notes)})"


def _field(name: str, text: str) -> list[str]:
    """`name` then `text`, its continuation lines indented under the first."""
    first, *rest = text.split("\n") or [""]
    return [f"  {name:11} {first}", *(INDENT + line for line in rest)]


def completion_lines(run: Run, step: int | None, rows: int, color: bool) -> list[str]:
    if not run.steps:
        return [f"completions: {NO_COMPLETIONS}"]
    step = run.steps[-1] if step is None else step
    logged = run.rows(step)
    every = (run.index or {}).get("every")
    cadence = f", logged every {every} steps" if every else ""
    lines = [
        f"completions at step {step}: showing {min(rows, len(logged))} of {len(logged)} rows "
        f"({len(run.steps)} steps logged{cadence}; --step N, --rows K)",
        legend(color),
    ]
    for row in logged[:rows]:
        lines += ["", *row_lines(row, color)]
    return lines


def run_text(run: Run, step: int | None, rows: int, color: bool) -> str:
    """The whole terminal view of `run`."""
    if step is not None:
        run.rows(step)  # an unlogged step is named before anything is printed
    parts = [
        *config_lines(run),
        "",
        *metric_lines(run, step),
        "",
        *completion_lines(run, step, rows, color),
    ]
    return "\n".join(parts)


def wrap(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` characters, its own newlines kept."""
    lines = []
    for line in text.split("\n"):
        lines += textwrap.wrap(line, width, drop_whitespace=False, replace_whitespace=False) or [""]
    return lines
