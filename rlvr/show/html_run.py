"""`rlvr show RUN --html`: one static page per run — config, newest metrics, the curves as
inline SVG, and every logged completion, browsable by step and filtered by verdict, with
token classes coloured and multi-turn episodes' turns in a table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr.show.html_page import controls, esc, kv_grid, page
from rlvr.show.load import NO_COMPLETIONS, Run, images, latest_metrics, segments
from rlvr.show.svg import curves_html
from rlvr.show.text import (
    ENV_METRICS,
    SHOWN_METRICS,
    env_alerts,
    env_failed,
    fmt,
    fmt_options,
    image_marker,
    shaped,
)

FILTERS = {
    "all": "all rows",
    "correct": "correct",
    "wrong": "wrong",
    "dropped": "dropped (not trained on)",
    "truncated": "truncated",
    "multiturn": "multi-turn",
    "failed": "environment failed",
    "toolerror": "tool error",
}
"""The filters of every run page; a multi-turn run adds one per turn count (`turns-N`)."""
SEGMENT_TITLES = {
    "policy": "sampled by the policy (trained on)",
    "observation": "environment observation (not trained on)",
    "forced": "forced in by the engine (not trained on)",
    "masked": "masked out of the loss",
}


def row_tags(row: dict[str, Any]) -> str:
    """The filter tags of one completion (the values of FILTERS it belongs to)."""
    tags = ["correct" if row["correct"] else "wrong"]
    tags.append("kept" if row.get("kept", True) else "dropped")
    tags += ["truncated"] * bool(row.get("truncated")) + ["multiturn"] * bool(row.get("turns"))
    tags += ["failed"] * env_failed(row) + ["toolerror"] * bool(row.get("tool_errors"))
    if row.get("turns") is not None:
        tags.append(f"turns-{len(row['turns'])}")
    return " ".join(tags)


def turn_filters(rows: list[dict[str, Any]]) -> dict[str, str]:
    """One filter per number of turns the rows' episodes took."""
    counts = sorted({len(r["turns"]) for r in rows if r.get("turns") is not None})
    return {f"turns-{n}": f"{n} turn{'s' * (n != 1)}" for n in counts}


def segments_html(row: dict[str, Any]) -> str:
    return "".join(
        f'<span class="seg-{s["kind"]}" title="{SEGMENT_TITLES[s["kind"]]}">{esc(s["text"])}</span>'
        for s in segments(row)
    )


def turns_html(turns: list[dict[str, Any]]) -> str:
    """The episode's turns as a table; the tool-call column only when a turn made one."""
    keys = ["turn", "policy", "tool_call", "observation", "ended"]
    if not any(t.get("tool_call") for t in turns):
        keys.remove("tool_call")
    head = "".join(f"<th>{key.replace('_', ' ')}</th>" for key in keys)
    cells = (
        "".join(f"<td><pre>{esc('' if t.get(key) is None else t[key])}</pre></td>" for key in keys)
        for t in turns
    )
    rows = "".join(f"<tr>{row}</tr>" for row in cells)
    return f'<table class="turns"><tr>{head}</tr>{rows}</table>'


def row_html(row: dict[str, Any]) -> str:
    advantage = row.get("advantage")
    head = [
        f"group <b>{esc(row.get('group', '?'))}</b> · sample <b>{esc(row.get('sample', '?'))}</b>",
        '<span class="ok">✓ correct</span>'
        if row["correct"]
        else '<span class="bad">✗ wrong</span>',
        f"reward <b>{esc(fmt(row['reward']))}</b>",
        *map(esc, shaped(row)),
        "advantage <b>" + ("—" if advantage is None else esc(f"{advantage:+.3g}")) + "</b>",
        f"length {esc(row.get('length', '?'))}",
        *(["truncated"] if row.get("truncated") else []),
        "kept" if row.get("kept", True) else "<b>dropped</b>",
        *(["text cut when logged"] if row.get("cut") else []),
        *(
            [f'<span class="bad">{row["tool_errors"]} tool errors</span>']
            if row.get("tool_errors")
            else []
        ),
    ]
    if env_failed(row):
        reason = row.get("env_failed") or "it could not start (no reason logged)"
        head.append(f'<span class="bad env-failed">environment failed: {esc(reason)}</span>')
    rewards = row.get("rewards") or {}
    if rewards:
        head.append("rewards " + ", ".join(f"{esc(k)}={esc(fmt(v))}" for k, v in rewards.items()))
    kind = "correct" if row["correct"] else "wrong"
    parts = [
        f'<article class="row {kind}{"" if row.get("kept", True) else " dropped"}" '
        f'data-tags="{row_tags(row)}">',
        f'<div class="head">{" · ".join(head)}</div>',
        prompt_html(row),
        f'<pre class="completion">{segments_html(row)}</pre>',
    ]
    if row.get("turns"):
        parts.append(turns_html(row["turns"]))
    return "".join(parts) + "</article>"


def prompt_html(row: dict[str, Any]) -> str:
    """The prompt's text, with the pictures it showed beside it (each drawn 4× with its
    pixels kept square, as a data URI: the page stays one file)."""
    text = f'<pre class="prompt">{esc(row["prompt"])}</pre>'
    shown = images(row)
    if not shown:
        return text
    pictures = "".join(image_html(image, n, len(shown)) for n, image in enumerate(shown, 1))
    return f'<div class="with-images"><div class="images">{pictures}</div>{text}</div>'


def image_html(image: dict[str, Any], number: int, count: int) -> str:
    if image["png"] is None:
        return f'<span class="bad">{esc(image_marker(image))}</span>'
    width, height = image["width"], image["height"]
    drawn = isinstance(width, int) and isinstance(height, int)
    size = f' width="{4 * width}" height="{4 * height}"' if drawn else ""
    alt = f"image {number} of {count}, {width}×{height}"
    return f'<img src="data:image/png;base64,{image["png"]}"{size} alt="{esc(alt)}">'


def config_html(run: Run) -> str:
    cfg = run.config
    options = cfg.get("task_options") or {}
    last = run.metrics[-1].get("step") if run.metrics else "—"
    pairs: list[tuple[str, object]] = [
        ("task", f"{cfg.get('task', '?')} {fmt_options(options) if options else ''}".strip()),
        ("recipe", cfg.get("recipe", "?")),
        ("model", cfg.get("model", "?")),
        ("steps", f"{last} of {cfg.get('steps', '?')}"),
        ("seed", cfg.get("seed", "?")),
        ("batch", f"{cfg.get('prompts_per_step', '?')} prompts × {cfg.get('group_size', '?')}"),
        (
            "status",
            (run.summary or {}).get("status", "no summary.json (running, or stopped early)"),
        ),
    ]
    return kv_grid(pairs)


def metrics_html(run: Run) -> str:
    """The newest value of each shown metric; its step when older than the newest."""
    latest = latest_metrics(run.metrics)
    at = max((s for _, s in latest.values() if isinstance(s, int)), default=None)
    pairs = [
        (
            name,
            fmt(latest[name][0]) + ("" if latest[name][1] == at else f" (step {latest[name][1]})"),
        )
        for name in SHOWN_METRICS
        if name in latest
    ]
    if not pairs:
        return "<p>none logged yet (no metrics.jsonl)</p>"
    return f"<h2>Metrics at step {esc(at)}</h2>" + kv_grid(pairs)


def episodes_html(run: Run) -> str:
    """A multi-turn run's episode panel: the newest `env/` metrics and what needs a look
    ("" for a one-turn run); its curves are drawn beside reward and accuracy."""
    latest = latest_metrics(run.metrics)
    if not any(name in latest for name in ENV_METRICS):
        return ""
    pairs = [(name, fmt(latest[name][0])) for name in ENV_METRICS if name in latest]
    alerts = "".join(f'<p class="bad">{esc(a.lstrip(" !"))}</p>' for a in env_alerts(latest))
    return f'<section id="episodes"><h2>Episodes</h2>{kv_grid(pairs)}{alerts}</section>'


def completions_html(run: Run, selected: int | None) -> tuple[str, int]:
    """The controls and one <section> of rows per logged step; and the number of rows."""
    if not run.steps:
        return f"<p>{esc(NO_COMPLETIONS)}</p>", 0
    selected = run.steps[-1] if selected is None else selected
    legend = "".join(f'<span class="seg-{k}">{esc(t)}</span>' for k, t in SEGMENT_TITLES.items())
    sections, count, every = [], 0, []
    for step in run.steps:
        rows = run.rows(step)
        count += len(rows)
        every += rows
        body = "".join(row_html(r) for r in rows)
        sections.append(f'<section class="rows" data-step="{step}">{body}</section>')
    filters = {**FILTERS, **turn_filters(every)}
    parts = [controls(run.steps, selected, filters), f'<p class="legend">{legend}</p>', *sections]
    return "".join(parts), count


def run_page(run: Run, step: int | None = None) -> tuple[str, int]:
    """The page's HTML and the number of completions in it; it opens at `step` (None: the
    newest logged step)."""
    if step is not None:
        run.rows(step)  # an unlogged step is named before anything is written
    completions, count = completions_html(run, step)
    body = "".join(
        [
            f"<h1>rlvr run {esc(run.path.resolve().name)}</h1>",
            config_html(run),
            metrics_html(run),
            episodes_html(run),
            "<h2>Curves</h2>",
            curves_html(run.metrics) if run.metrics else "<p>no metrics.jsonl yet</p>",
            "<h2>Completions</h2>",
            completions,
        ]
    )
    return page(f"rlvr run {run.path.resolve().name}", body), count


def write_run_page(run: Run, path: str | Path, step: int | None = None) -> str:
    """Write the run's page to `path`; returns what it holds, for the CLI's one line."""
    text, count = run_page(run, step)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text)
    return f"{len(run.steps)} logged steps, {count} completions"
