"""The report's "Verdict" section, and the Holm-corrected table of a set of studies."""

from __future__ import annotations

from collections.abc import Sequence

from rlvr.compare.verdict import (
    ITEM_METRIC,
    Hypothesis,
    PredictionVerdict,
    apply_holm,
    judge,
    judge_unadjusted,
    study_verdict,
)
from rlvr.eval.significance import evalsize

RULE = (
    "rule: docs/comparisons.md, Verdicts; one-sided α = 0.025 per side, Holm-corrected "
    "over the {family} testable replication prediction(s) of {scope}"
)


def _rows(verdicts: Sequence[PredictionVerdict]) -> list[str]:
    lines = [
        "| prediction (pre-registered) | seeds | Δ per seed | verdict | why |",
        "|---|---|---|---|---|",
    ]
    for v in verdicts:
        per_seed = ", ".join(f"{s}: {d:.4g}" for s, d in v.differences.items()) or "–"
        lines.append(
            f"| {v.prediction.describe()} | {len(v.differences)} | {per_seed} | {v.verdict} | {v.reason} |"
        )
    return lines


def _checks(verdicts: Sequence[PredictionVerdict]) -> list[str]:
    seen = {}
    for v in verdicts:
        for c in v.checks:
            seen.setdefault((c.mechanism, tuple(c.measured)), c)
    if not seen:
        return [
            "**Manipulation checks**: none pre-registered: the verdicts assume the mechanism acts."
        ]
    lines = ["**Manipulation checks** (the mechanism must act for a verdict):"]
    for c in seen.values():
        mark = "✔" if c.passed else "✘ cannot be tested here:"
        why = f" ({c.mechanism.why})" if c.mechanism.why else ""
        lines.append(f"- {mark} {c.mechanism.describe()}{why}: {c.describe()}")
    return lines


def margin_lines(hypothesis: Hypothesis, items: int | None, accuracy: float | None) -> list[str]:
    """For each accuracy prediction with a margin θ ≠ 0: the eval items `rlvr evalsize`
    asks for that margin, against the items used."""
    if not items or accuracy is None:
        return []
    p = min(max(accuracy, 0.01), 0.99)
    lines = []
    for pred in hypothesis.predictions:
        delta = abs(pred.threshold)
        if pred.metric != ITEM_METRIC or delta == 0 or p + delta >= 1:
            continue
        needed = evalsize(p, delta)
        verdict = "enough" if items >= needed else "too few: a single run cannot resolve the margin"
        lines.append(
            f"- margin {delta:g} on {ITEM_METRIC}: `rlvr evalsize --baseline {p:.2f} --delta "
            f"{delta:g}` → {needed:,} items per condition; {items:,} used ({verdict})."
        )
    return lines


def verdict_section(
    hypothesis: Hypothesis, records, items=None, eval_items: int | None = None,
    accuracy: float | None = None,
) -> str:  # fmt: skip
    """The report's "Verdict" section in Markdown."""
    overall, verdicts = judge(hypothesis, records, items)
    replications = [v for v in verdicts if v.prediction.kind == "replication"]
    checks = [v for v in verdicts if v.prediction.kind == "implementation_check"]
    family = max((v.family for v in verdicts), default=0)
    lines = [
        f"**Claim.** {hypothesis.claim}",
        f"**Source.** {hypothesis.source}",
        f"**Study verdict: {overall}** ({RULE.format(family=family, scope='this study')}; ≥ "
        f"{hypothesis.min_seeds} paired seeds pre-registered).",
        "",
        *_checks(verdicts),
        "",
        *(_rows(replications) if replications else ["No replication prediction."]),
    ]
    if checks:
        lines += ["", "**Implementation checks** (true by construction: they verify the "
                  "code, not the claim, and are not counted in the verdict):", "", *_rows(checks)]  # fmt: skip
    margins = margin_lines(hypothesis, eval_items, accuracy)
    if hypothesis.evalsize or margins:
        lines += [""]
    if hypothesis.evalsize:
        lines += [f"Eval size chosen with: `{hypothesis.evalsize}`"]
    lines += margins
    return "\n".join(lines)


def study_set_section(studies: Sequence[tuple[str, Hypothesis, dict, dict | None]]) -> str:
    """Holm over every testable replication prediction of a set of studies (name,
    hypothesis, records, items); each study's verdict is re-derived from the set's."""
    judged = [(name, judge_unadjusted(h, records, items)) for name, h, records, items in studies]
    flat = apply_holm([v for _, vs in judged for v in vs])
    family = max((v.family for v in flat), default=0)
    lines = [
        f"Study set of {len(studies)} studies ({RULE.format(family=family, scope='the set')}).",
        "",
    ]
    lines += ["| study | verdict over the set |", "|---|---|"]
    start = 0
    per_study = []
    for name, vs in judged:
        mine = flat[start : start + len(vs)]
        start += len(vs)
        lines.append(f"| {name} | {study_verdict(mine)} |")
        per_study.append((name, mine))
    for name, mine in per_study:
        lines += ["", f"### {name}", "", *_rows(mine)]
    return "\n".join(lines)
