"""Run the cells of a matrix through the one training loop: resumable and parallel.

A cell is finished iff `summary.json` exists in its directory (`run_training` writes it
last); an unfinished cell directory is left over from an interruption and is wiped before
the cell runs again. Finished cells are never redone. With `jobs > 1` cells run in
spawned worker processes, each with `cores // jobs` torch threads.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import yaml

from rlvr.compare.matrix import Cell, MatrixSpec, save_spec


@dataclass
class MatrixRun:
    """What a call to `run_matrix` did."""

    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    stale: list[str] = field(default_factory=list)
    seconds: float = 0.0


def is_finished(cell: Cell) -> bool:
    return (Path(cell.config["out"]) / "summary.json").exists()


def run_cell(config: dict[str, Any]) -> dict[str, Any]:
    """Train one cell from its config dict (picklable, so it crosses process boundaries)."""
    from rlvr.train import resolve_config, run_training

    out = Path(config["out"])
    if out.exists():
        shutil.rmtree(out)  # a partial run: its summary.json is missing
    return run_training(resolve_config(config))


def _init_worker(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def stale_cells(cells: list[Cell]) -> list[str]:
    """Finished cells whose recorded config.yaml differs from the one the spec asks for
    (e.g. the base config changed since they ran): they are kept, and reported."""
    from rlvr.train import resolve_config

    stale = []
    for cell in cells:
        path = Path(cell.config["out"]) / "config.yaml"
        if is_finished(cell) and path.exists():
            recorded = yaml.safe_load(path.read_text())
            expected = resolve_config(cell.config).to_dict()
            # A field added to TrainConfig after the cell ran is absent, not a difference;
            # `out` changes when a matrix directory is moved, `progress` is display only.
            if any(
                expected.get(k) != v for k, v in recorded.items() if k not in {"out", "progress"}
            ):
                stale.append(cell.name)
    return stale


def run_matrix(
    spec: MatrixSpec,
    out_dir: str | Path,
    jobs: int = 1,
    log: Callable[[str], None] | None = None,
) -> MatrixRun:
    """Run every unfinished cell of `spec` under `out_dir`; returns what ran and failed."""
    log = log or (lambda message: print(message, file=sys.stderr, flush=True))
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be an integer ≥ 1, got {jobs!r}")
    save_spec(spec, out_dir)
    cells = spec.cells(out_dir)
    result = MatrixRun(stale=stale_cells(cells))
    for name in result.stale:
        log(f"warning: finished cell {name} was run with a different config; kept as is")
    pending = [c for c in cells if not is_finished(c)]
    result.skipped = [c.name for c in cells if is_finished(c)]
    log(f"matrix: {len(cells)} cells, {len(result.skipped)} finished, {len(pending)} to run")
    started = time.perf_counter()
    if jobs == 1 or len(pending) <= 1:
        _run_serial(pending, result, log)
    else:
        _run_parallel(pending, jobs, result, log)
    result.seconds = time.perf_counter() - started
    _record_invocation(Path(out_dir), jobs, result)
    return result


def _record_invocation(out_dir: Path, jobs: int, result: MatrixRun) -> None:
    """Append what this invocation did to DIR/invocations.jsonl (the report sums them)."""
    record = {
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "jobs": jobs,
        "ran": result.ran,
        "failed": sorted(result.failed),
        "skipped": len(result.skipped),
        "seconds": round(result.seconds, 1),
    }
    with (out_dir / "invocations.jsonl").open("a") as fh:
        fh.write(json.dumps(record) + "\n")


def _done(cell: Cell, summary: dict[str, Any], result: MatrixRun, log, total: int) -> None:
    result.ran.append(cell.name)
    final = summary["final"]["eval/accuracy"]
    wall = summary["seconds"]["wall_s"]
    log(f"[{len(result.ran)}/{total}] {cell.name}: final accuracy {final:.3f} ({wall:.0f} s)")


def _run_serial(pending: list[Cell], result: MatrixRun, log) -> None:
    for cell in pending:
        try:
            summary = run_cell(cell.config)
        except Exception as err:  # one failed cell must not lose the others
            result.failed[cell.name] = f"{type(err).__name__}: {err}"
            log(f"cell {cell.name} failed: {result.failed[cell.name]}")
            continue
        _done(cell, summary, result, log, len(pending))


def _run_parallel(pending: list[Cell], jobs: int, result: MatrixRun, log) -> None:
    threads = max(1, (os.cpu_count() or 1) // jobs)
    with ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=get_context("spawn"),
        initializer=_init_worker,
        initargs=(threads,),
    ) as pool:
        futures = {pool.submit(run_cell, cell.config): cell for cell in pending}
        for future in as_completed(futures):
            cell = futures[future]
            try:
                summary = future.result()
            except Exception as err:
                result.failed[cell.name] = f"{type(err).__name__}: {err}"
                log(f"cell {cell.name} failed: {result.failed[cell.name]}")
                continue
            _done(cell, summary, result, log, len(pending))
