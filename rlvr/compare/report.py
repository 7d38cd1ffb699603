"""The comparison report: `DIR/results.csv`, `DIR/report.md` and `DIR/plots/*.png`.

It reads only what the runs wrote (summary.json, metrics.jsonl, config.yaml), so it can be
rebuilt at any time from finished cells (`rlvr compare --report-only`).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rlvr.compare.budget import budget_lines
from rlvr.compare.curves import SigmoidFit, fit_sigmoid
from rlvr.compare.differences import Difference, all_differences, difference_check
from rlvr.compare.markdown import md_table
from rlvr.compare.markdown import mean_text as _mean
from rlvr.compare.matrix import MatrixSpec
from rlvr.compare.report_episodes import env_section
from rlvr.compare.results import COLUMNS, CellResult, load_cell, write_results_csv
from rlvr.eval.significance import (
    detectable_delta,
    evalsize,
    paired_bootstrap,
    sign_test,
    t_interval,
)


@dataclass
class Report:
    path: Path
    plots: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _group(results: list[CellResult]) -> dict[str, list[CellResult]]:
    groups: dict[str, list[CellResult]] = {}
    for result in results:
        groups.setdefault(result.cell.label, []).append(result)
    return groups


def _ci(values: list[float], digits: int = 3) -> str:
    finite = [v for v in values if v is not None and np.isfinite(v)]
    return t_interval(finite).format(digits) if finite else "—"


def _initial(cell: CellResult) -> float | None:
    return cell.summary.get("initial", {}).get("eval/accuracy")


def _gain(cell: CellResult) -> float | None:
    """Final minus initial held-out accuracy of one cell (its own seed's evaluations)."""
    initial = _initial(cell)
    return None if initial is None else cell.summary["final"]["eval/accuracy"] - initial


def summary_table(groups: dict[str, list[CellResult]]) -> str:
    # No "best" accuracy: a maximum over evaluations of the same test items is chosen on
    # the test set and biased upward; only the final evaluation is reported.
    header = ["condition", "seeds", "initial acc", "final acc", "gain", "format rate", "resp. len",
              "gen. tokens", "discarded", "rollout s", "train s", "total s", "clip frac",
              "seq clip frac"]  # fmt: skip
    rows = []
    for label, cells in groups.items():
        final = [c.summary["final"] for c in cells]
        secs = [c.summary["seconds"] for c in cells]
        rows.append([
            label, str(len(cells)),
            _ci([_initial(c) for c in cells]),
            _ci([f["eval/accuracy"] for f in final]),
            _ci([_gain(c) for c in cells]),
            _ci([f.get("eval/format_rate") for f in final]),
            _mean([f.get("eval/response_length") for f in final], "{:.1f}"),
            _mean([c.summary["generated_tokens"] for c in cells]),
            _mean([c.summary["discarded_tokens"] for c in cells]),
            _mean([s.get("time/rollout_s") for s in secs], "{:.0f}"),
            _mean([s.get("time/train_s") for s in secs], "{:.0f}"),
            _mean([s.get("wall_s") for s in secs], "{:.0f}"),
            _mean([c.mean_metric("clip/frac") for c in cells], "{:.4f}"),
            _mean([c.mean_metric("clip/seq_frac") for c in cells], "{:.4f}"),
        ])  # fmt: skip
    return md_table(header, rows)


def _paired_items(a: list[CellResult], b: list[CellResult]) -> tuple[np.ndarray, np.ndarray]:
    """(seeds, items) arrays of final per-item correctness over the seeds both share."""
    a_by, b_by = {c.cell.seed: c for c in a}, {c.cell.seed: c for c in b}
    seeds = sorted(set(a_by) & set(b_by))
    if not seeds:
        return np.empty((0, 0)), np.empty((0, 0))
    return np.stack([a_by[s].items for s in seeds]), np.stack([b_by[s].items for s in seeds])


def paired_table(groups: dict[str, list[CellResult]], baseline: str) -> str:
    header = ["condition", "Δ final acc vs " + baseline, "95% bootstrap CI", "paired seeds",
              "items better / worse / tied", "sign-test p (conditional on the trained models)"]  # fmt: skip
    rows = []
    for label, cells in groups.items():
        if label == baseline or baseline not in groups:
            continue
        a, b = _paired_items(cells, groups[baseline])
        if a.size == 0 or a.shape != b.shape:
            rows.append([label, "—", "no paired seeds with equal eval sets", "0", "—", "—"])
            continue
        ci = paired_bootstrap(a, b)
        test = sign_test(a, b)
        rows.append([
            label, f"{ci.mean:+.3f}", f"[{ci.low:+.3f}, {ci.high:+.3f}]", str(a.shape[0]),
            f"{test.wins} / {test.losses} / {test.ties}", f"{test.p_value:.3g}",
        ])  # fmt: skip
    return md_table(header, rows)


def fit_curves(groups: dict[str, list[CellResult]]) -> tuple[dict[str, SigmoidFit], list[str]]:
    """A sigmoid per condition on every (generated tokens, accuracy) eval point."""
    fits, notes = {}, []
    for label, cells in groups.items():
        rows = [r for c in cells for r in c.rows if r["eval/accuracy"] is not None]
        r0 = float(np.mean([c.summary["initial"]["eval/accuracy"] for c in cells]))
        try:
            fits[label] = fit_sigmoid(
                [r["generated_tokens"] for r in rows], [r["eval/accuracy"] for r in rows], r0
            )
        except (ValueError, RuntimeError) as err:
            notes.append(f"{label}: no fit ({err})")
    return fits, notes


def fit_table(fits: dict[str, SigmoidFit]) -> str:
    header = ["condition", "R0", "A (asymptote)", "C_mid (tokens)", "B", "R²", "points", "quality"]
    rows = [
        [label, f"{f.r0:.3f}", f"{f.a:.3f}", f"{f.c_mid:,.0f}", f"{f.b:.2f}", f"{f.r2:.2f}",
         str(f.points), f.quality()]
        for label, f in fits.items()
    ]  # fmt: skip
    return md_table(header, rows)


def differences_section(
    diffs: list[Difference], labels: list[str], baseline: str, compares: tuple[str, ...]
) -> tuple[str, list[str]]:
    """Every setting that differed between cells, the ✔/✘ check, and a warning per field
    nothing in the matrix explains (rlvr/compare/differences.py)."""
    declared = (
        f"declared `compares`: {', '.join(compares)}"
        if compares
        else ("no `compares` declared: the compared fields are the overrides' fields")
    )
    lines = [f"Each cell's recorded config.yaml against the `{baseline}` cell (same seed; "
             f"`seed` and `out` always differ and are not listed); {declared}."]  # fmt: skip
    by_label: dict[str, dict[str, Difference]] = {}
    for d in diffs:
        by_label.setdefault(d.label, {}).setdefault(d.key, d)
    for label, found in by_label.items():
        listed = ", ".join(
            f"{d.text()}" + ("" if d.kind == "compared" else f" ({d.kind})")
            for _, d in sorted(found.items())
        )
        lines.append(f"- **{label}** ({len(found)} field(s)): {listed}")
    if not by_label:
        lines.append("- no setting differs (every cell runs the same condition)")
    ok, problems = difference_check(diffs, labels, baseline, compares)
    if ok:
        lines.append("\nOnly the compared fields differ between conditions. ✔")
    else:
        lines.append("\n✘ **More than the compared fields differ** (or a compared field does "
                     "not); the comparison does not change one thing at a time:")  # fmt: skip
        lines += [f"- ✘ {p}" for p in problems]
    warnings = list(dict.fromkeys(d.warning() for d in diffs if d.kind == "stray"))
    if warnings:
        lines.append("\n**WARNING: cells differ in fields that nothing in the matrix sets; "
                     "the comparison is confounded:**")  # fmt: skip
        lines += [f"- ⚠ {w}" for w in warnings]
    return "\n".join(lines), warnings


def evalsize_section(groups: dict[str, list[CellResult]], baseline: str) -> str:
    cells = groups.get(baseline) or next(iter(groups.values()))
    items = len(cells[0].summary["final_eval_items"])
    p = float(np.mean([c.summary["final"]["eval/accuracy"] for c in cells]))
    p = min(max(p, 0.01), 0.99)
    delta = detectable_delta(p, items)
    rows = [[f"{d:+.2f}", f"{evalsize(p, d):,}"] for d in (0.01, 0.02, 0.03, 0.05, 0.10)
            if p + d < 1]  # fmt: skip
    return "\n".join([
        f"With {items} eval items and a baseline accuracy of {p:.3f}, a single run resolves "
        f"a difference of about **{delta:.3f}** (power 0.8, two-sided α = 0.05).",
        "Items per condition needed for other differences:\n",
        md_table(["δ", "items"], rows),
        "\nTwo-proportion z-test, normal approximation, independent samples (Fleiss, Levin & "
        "Paik 2003, Eq. 4.14; `rlvr evalsize`). This comparison is paired (same items for "
        "every cell) and averages seeds, so it needs fewer items than this.",
    ])  # fmt: skip


def _header(spec: MatrixSpec, results, missing: list[str], out: Path) -> str:
    base = spec.base
    lines = [
        f"# Comparison: {', '.join(spec.labels())} on `{base.get('task', 'arithmetic')}`",
        "",
        f"- **Budget** (as set): {spec.budget.describe()}.",
        *budget_lines(_group(results)),
        f"- **Seeds**: {', '.join(map(str, spec.seeds))}; **baseline**: `{spec.baseline_label}`.",
        f"- **Cells**: {len(results)} finished"
        + (f", {len(missing)} missing: {', '.join(missing)}" if missing else "") + ".",
        f"- **Base config** (shared by every cell): `{base}`.",
        "- CIs over seeds are mean ± t₀.₉₇₅,ₙ₋₁·s/√n (Student t, n seeds).",
    ]  # fmt: skip
    cell_seconds = sum(r.summary["seconds"]["wall_s"] for r in results)
    lines.append(f"- **Cell seconds** (sum of every cell's wall time): {cell_seconds:,.0f} s.")
    lines.append(_invocations_line(out))
    return "\n".join(lines)


def _invocations_line(out: Path) -> str:
    path = out / "invocations.jsonl"
    if not path.exists():
        return "- **Matrix wall time**: not recorded (no invocations.jsonl)."
    runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    seconds = sum(r["seconds"] for r in runs)
    ran = sum(len(r["ran"]) for r in runs)
    jobs = sorted({r["jobs"] for r in runs})
    lines = [
        f"- **Matrix wall time**: {seconds:,.0f} s over {len(runs)} invocation(s) of "
        f"`rlvr compare` (jobs = {', '.join(map(str, jobs))}), {ran} cells run."
    ]
    commands = dict.fromkeys(shlex.join(["rlvr", *r["argv"]]) for r in runs if r["ran"])
    lines += [f"- **Command** (ran cells): `{command}`" for command in commands]
    return "\n".join(lines)


PLOT_TITLES = {
    "accuracy_vs_step.png": "Accuracy vs optimizer step",
    "accuracy_vs_tokens.png": "Accuracy vs generated tokens",
    "accuracy_vs_wall.png": "Accuracy vs wall time",
    "response_length.png": "Training response length",
    "clip_fraction.png": "Clip fraction",
    "compute_fit.png": "Sigmoid compute fits",
}


def _sections(spec, groups, fits, fit_notes, diff_text, plots, out: Path) -> list[str]:
    baseline = spec.baseline_label
    plot_lines = [f"![{PLOT_TITLES.get(p.name, p.name)}]({p.relative_to(out).as_posix()})"
                  for p in plots]  # fmt: skip
    return [
        "## Results per condition",
        "Held-out accuracy before training (the warm start, sampled with each seed's eval "
        "seed) and at the final eval, and the gain from one to the other per seed (each mean "
        "± 95% CI over seeds: RL moved accuracy beyond the seed spread when the gain's CI "
        "excludes 0), format rate and mean "
        "response length at the final eval (nothing is selected on the eval items); generated and discarded tokens, rollout, train "
        "and total seconds per cell (means); clip fractions averaged over training steps.",
        summary_table(groups),
        *env_section(groups),
        f"## Paired comparisons against `{baseline}`",
        "Δ = mean final accuracy minus the baseline's. The bootstrap (10,000 resamples) "
        "resamples paired seeds and eval items jointly. The sign test counts eval items whose "
        "seed-averaged correctness is higher / lower than the baseline's (exact binomial, "
        "two-sided; McNemar's exact test with one seed): it is **conditional on the trained "
        "models** (it treats these runs as fixed and ignores run-to-run variance), so it says "
        "whether these models differ on these items, not whether the recipes do; the verdict "
        "never uses it.",
        paired_table(groups, baseline),
        "## Compute curves (ScaleRL sigmoid)",
        "R(C) = R0 + (A − R0) / (1 + (C_mid/C)^B) (Khatri et al. 2025, arXiv 2510.13786, "
        "Eq. 1), C = cumulative generated tokens, R0 = mean initial accuracy, fitted to every "
        "eval point of every seed. A is the predicted ceiling, C_mid the tokens to reach half "
        "the gain. A fit is marked unreliable when R² < 0.8, when C_mid lies outside the "
        "measured compute (then A is an extrapolation), or when A sits at its bound 1.",
        fit_table(fits) + ("\n\n" + "\n".join(f"- {n}" for n in fit_notes) if fit_notes else ""),
        "## Eval-set size",
        evalsize_section(groups, baseline),
        "## What differed between cells",
        diff_text,
        "## Plots",
        "Thin lines: single seeds; thick: mean over seeds.",
        "\n\n".join(plot_lines),
        "## Files",
        f"`results.csv`: one row per cell and eval point; columns {', '.join(COLUMNS)}. "
        "Token and seconds columns are cumulative up to the eval point; `wall_s` is seconds "
        "since the run started; training metrics (reward/, rollout/response_length, clip/, env/) "
        "are means over the steps since the previous eval point. Per-cell runs are under "
        "`cells/<label>-seed<k>/`.",
    ]  # fmt: skip


def study_data(results: list[CellResult]) -> tuple[dict, dict]:
    """records[label][seed] (metrics.jsonl) and items[label][seed] (final per-item
    correctness, empty for cells that recorded none) of the finished cells."""
    records: dict[str, dict[int, list]] = {}
    items: dict[str, dict[int, list]] = {}
    for r in results:
        records.setdefault(r.cell.label, {})[r.cell.seed] = r.records
        items.setdefault(r.cell.label, {})[r.cell.seed] = r.summary.get("final_eval_items") or []
    return records, items


def _verdict(spec: MatrixSpec, results: list[CellResult]) -> str:
    from rlvr.compare.verdict import hypothesis_from_dict
    from rlvr.compare.verdict_report import verdict_section

    records, items = study_data(results)
    baseline = [r for r in results if r.cell.label == spec.baseline_label] or results
    eval_items = len(baseline[0].summary.get("final_eval_items") or [])
    accuracy = float(np.mean([r.summary["final"]["eval/accuracy"] for r in baseline]))
    hypothesis = hypothesis_from_dict(spec.hypothesis, spec.labels())
    return verdict_section(hypothesis, records, items, eval_items, accuracy)


def finished_results(spec: MatrixSpec, out: Path) -> tuple[list[CellResult], list[str]]:
    """The finished cells' results and the names of the unfinished ones."""
    loaded = [(c, load_cell(c)) for c in spec.cells(out)]
    results = [r for _, r in loaded if r is not None]
    if not results:
        raise ValueError(f"no finished cells under {out / 'cells'}; run `rlvr compare` first")
    return results, [c.name for c, r in loaded if r is None]


def build_report(
    spec: MatrixSpec,
    out_dir: str | Path,
    predict: float | None = None,
    predict_compute: str = "tokens",
) -> Report:
    """Write results.csv, report.md and plots/ for the finished cells of `spec`; with
    `predict`, a section testing early-compute sigmoid fits (rlvr/compare/predict.py)."""
    from rlvr.compare.plots import plot_comparison

    out = Path(out_dir)
    results, missing = finished_results(spec, out)
    write_results_csv(results, out / "results.csv")
    groups = _group(results)
    fits, fit_notes = fit_curves(groups)
    diff_text, warnings = differences_section(
        all_differences(results, spec.baseline_label, spec.compares, spec.budget.per_cell_keys),
        spec.labels(),
        spec.baseline_label,
        spec.compares,
    )
    plots = plot_comparison(results, fits, out / "plots")
    body = [_header(spec, results, missing, out)]
    if spec.hypothesis is not None:
        body += ["## Verdict (pre-registered hypothesis)", _verdict(spec, results)]
    body += _sections(spec, groups, fits, fit_notes, diff_text, plots, out)
    if predict is not None:
        from rlvr.compare.predict import predict_section

        body += [
            f"## Predictive fits (first {predict:g} of compute)",
            predict_section(groups, predict, predict_compute),
        ]
    path = out / "report.md"
    path.write_text("\n\n".join(body) + "\n")
    if missing:
        warnings.append(f"{len(missing)} cells have not finished: {', '.join(missing)}")
    return Report(path, plots, warnings)


def study_set_report(out_dirs: list[str | Path]) -> str:
    """Holm over every prediction of the studies run in `out_dirs` (each holds the
    matrix.yaml, with its hypothesis, that `rlvr compare` wrote)."""
    from rlvr.compare.matrix import load_spec
    from rlvr.compare.verdict import hypothesis_from_dict
    from rlvr.compare.verdict_report import study_set_section

    studies = []
    for out in map(Path, out_dirs):
        if not (out / "matrix.yaml").is_file():
            raise ValueError(f"--holm {out}: no matrix.yaml (not a `rlvr compare --out` directory)")
        spec = load_spec(out / "matrix.yaml")
        if spec.hypothesis is None:
            raise ValueError(f"--holm {out}: its matrix.yaml has no hypothesis to judge")
        results, _ = finished_results(spec, out)
        hypothesis = hypothesis_from_dict(spec.hypothesis, spec.labels())
        studies.append((str(out), hypothesis, *study_data(results)))
    return study_set_section(studies)
