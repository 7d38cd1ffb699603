"""Run the cells of a matrix through the one training loop: resumable and parallel.

A cell is finished iff `summary.json` exists in its directory (`run_training` writes it
last); an unfinished cell left over from an interruption resumes from its newest good
checkpoint (or starts again if it has none or its config changed). Finished cells are
never redone. Every invocation, completed or not, is appended to `invocations.jsonl`. With `jobs > 1` cells run in
spawned worker processes, each with `cores // jobs` torch threads.

Progress: a line per finished cell with the matrix's ETA; inside a running cell its steps
done of its total with an ETA (`CellWatch`, read from the cell's metrics.jsonl, so cells in
worker processes too), quiet for a cell shorter than `CELL_AFTER_S`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import yaml

from rlvr.checks import check_int
from rlvr.compare.matrix import Cell, MatrixSpec, save_spec
from rlvr.runlog.progress import Progress

CELL_AFTER_S = 30.0
"""A cell shorter than this shows no progress of its own (its matrix line says it ended)."""
CELL_POLL_S = 2.0
"""How often the running cells' metrics.jsonl are read."""


@dataclass
class MatrixRun:
    """What a call to `run_matrix` did."""

    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    stale: list[str] = field(default_factory=list)
    seconds: float = 0.0
    started: float = field(default_factory=time.perf_counter)


def is_finished(cell: Cell) -> bool:
    return (Path(cell.config["out"]) / "summary.json").exists()


def run_cell(config: dict[str, Any]) -> dict[str, Any]:
    """Train one cell from its config dict (picklable, so it crosses process boundaries);
    a killed cell continues from its checkpoint."""
    from rlvr.train import resolve_config, run_training

    cfg = resolve_config(config)
    return run_training(cfg, cell_mode(cfg))


def cell_mode(cfg) -> str:
    """'resume' for a partial run with a good checkpoint and the same config, else
    'overwrite' (nothing there, or nothing usable, e.g. a LoRA checkpoint without adapter)."""
    from rlvr.train.checkpoints.checkpoint import find_resumable, resumable_with
    from rlvr.train.run import check_same_run

    out = Path(cfg.out)
    checkpoint = find_resumable(out) if (out / "config.yaml").is_file() else None
    if checkpoint is None or not resumable_with(
        checkpoint, lora=cfg.policy.get("lora") is not None
    ):
        return "overwrite"
    try:
        check_same_run(out, cfg)
    except ValueError:
        return "overwrite"
    return "resume"


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
    argv: list[str] | None = None,
) -> MatrixRun:
    """Run every unfinished cell of `spec` under `out_dir`; returns what ran and failed."""
    log = log or (lambda message: print(message, file=sys.stderr, flush=True))
    check_int("jobs", jobs)
    cells = spec.cells(out_dir)  # validates every cell's config before anything is written
    save_spec(spec, out_dir)
    result = MatrixRun(stale=stale_cells(cells))
    for name in result.stale:
        log(f"warning: finished cell {name} was run with a different config; kept as is")
    pending = [c for c in cells if not is_finished(c)]
    result.skipped = [c.name for c in cells if is_finished(c)]
    log(f"matrix: {len(cells)} cells, {len(result.skipped)} finished, {len(pending)} to run")
    started = result.started = time.perf_counter()
    record = _Invocation(Path(out_dir), jobs, argv)
    record.write(result, "running", 0.0)  # stays "running" if the process is killed
    status = "completed"
    try:
        with CellWatch() as watch:
            if jobs == 1 or len(pending) <= 1:
                _run_serial(pending, result, log, watch)
            else:
                _run_parallel(pending, jobs, result, log, watch)
    except BaseException as err:
        status = "interrupted" if _is_interruption(err) else "error"
        raise
    finally:
        result.seconds = time.perf_counter() - started
        record.write(result, status, result.seconds)
    return result


def _is_interruption(err: BaseException) -> bool:
    from rlvr.train.run import RunInterrupted

    return isinstance(err, KeyboardInterrupt | RunInterrupted)


class _Invocation:
    """This invocation's line in DIR/invocations.jsonl (the report sums them): written
    when it starts, as "running", and rewritten in place with its outcome ("completed",
    "interrupted", "error"); a SIGKILLed invocation keeps "running"."""

    def __init__(self, out_dir: Path, jobs: int, argv: list[str] | None) -> None:
        self.path = out_dir / "invocations.jsonl"
        self.id = f"{os.getpid()}-{time.time_ns()}"
        self.jobs = jobs
        self.argv = list(argv) if argv is not None else sys.argv[1:]
        self.started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")

    def write(self, result: MatrixRun, status: str, seconds: float) -> None:
        record = {
            "id": self.id,
            "started_at": self.started_at,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "status": status,
            "argv": self.argv,
            "jobs": self.jobs,
            "ran": result.ran,
            "failed": sorted(result.failed),
            "skipped": len(result.skipped),
            "seconds": round(seconds, 1),
        }
        lines = self.path.read_text().splitlines() if self.path.exists() else []
        lines = [ln for ln in lines if ln.strip() and json.loads(ln).get("id") != self.id]
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(f"{line}\n" for line in [*lines, json.dumps(record)]))
        os.replace(tmp, self.path)


def _done(cell: Cell, summary: dict[str, Any], result: MatrixRun, log, total: int) -> None:
    result.ran.append(cell.name)
    final = summary["final"]["eval/accuracy"]
    wall = summary["seconds"]["wall_s"]
    done = len(result.ran) + len(result.failed)
    elapsed = time.perf_counter() - result.started
    eta = f"; matrix ETA {elapsed / done * (total - done):.0f} s" if done < total else ""
    log(f"[{len(result.ran)}/{total}] {cell.name}: final accuracy {final:.3f} ({wall:.0f} s){eta}")


def _run_serial(pending: list[Cell], result: MatrixRun, log, watch: CellWatch) -> None:
    from rlvr.train.run import RunInterrupted

    for cell in pending:
        watch.start(cell)
        try:
            summary = run_cell(cell.config)
        except RunInterrupted:
            raise  # the whole invocation stops; the cell resumes next time
        except Exception as err:  # one failed cell must not lose the others
            result.failed[cell.name] = f"{type(err).__name__}: {err}"
            log(f"cell {cell.name} failed: {result.failed[cell.name]}")
            continue
        finally:
            watch.finish(cell)
        _done(cell, summary, result, log, len(pending))


def _run_parallel(pending: list[Cell], jobs: int, result: MatrixRun, log, watch) -> None:
    threads = max(1, (os.cpu_count() or 1) // jobs)
    with ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=get_context("spawn"),
        initializer=_init_worker,
        initargs=(threads,),
    ) as pool:
        futures = {pool.submit(run_cell, cell.config): cell for cell in pending}
        for cell in pending:
            watch.start(cell)  # shown once its worker writes its first step
        try:
            _collect(futures, result, log, len(pending), watch)
        except BaseException as err:
            if _is_interruption(err):
                _stop_workers(pool)
            raise


def _collect(futures, result: MatrixRun, log, total: int, watch: CellWatch) -> None:
    from rlvr.train.run import RunInterrupted

    for future in as_completed(futures):
        cell = futures[future]
        watch.finish(cell)
        try:
            summary = future.result()
        except RunInterrupted:
            raise
        except Exception as err:
            result.failed[cell.name] = f"{type(err).__name__}: {err}"
            log(f"cell {cell.name} failed: {result.failed[cell.name]}")
            continue
        _done(cell, summary, result, log, total)


class CellWatch:
    """Progress inside the running cells: a thread reads each started cell's metrics.jsonl
    every `poll_s` seconds and moves its `Progress` (steps done of the cell's `steps`, a bar
    on a terminal, a line with an ETA every `every_s` off one), which stays quiet for a
    cell shorter than `after_s`; the matrix's "[k/N] …" line closes it. `poll_s=None`: no
    thread (the caller calls `poll`, as tests do)."""

    def __init__(
        self,
        poll_s: float | None = CELL_POLL_S,
        after_s: float = CELL_AFTER_S,
        every_s: float = 30.0,
        file=None,
    ) -> None:
        self.poll_s, self.after_s, self.every_s, self.file = poll_s, after_s, every_s, file
        self.cells: dict[str, _WatchedCell] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def __enter__(self) -> CellWatch:
        if self.poll_s is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self.poll_s is not None:
            self._thread.join()
        for name in list(self.cells):
            self._close(name)

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.poll()

    def start(self, cell: Cell) -> None:
        with self._lock:
            metrics = Path(cell.config["out"]) / "metrics.jsonl"
            self.cells[cell.name] = _WatchedCell(cell, file_state(metrics))

    def poll(self) -> None:
        with self._lock:
            for watched in self.cells.values():
                watched.poll(self)

    def finish(self, cell: Cell) -> None:
        self._close(cell.name)

    def _close(self, name: str) -> None:
        with self._lock:
            watched = self.cells.pop(name, None)
        if watched is not None and watched.bar is not None:
            watched.bar.close(line=False)


@dataclass
class _WatchedCell:
    cell: Cell
    before: tuple[int, int, int] | None  # its metrics.jsonl at the start: a previous run's
    bar: Progress | None = None
    step: int = 0

    def poll(self, watch: CellWatch) -> None:
        path = Path(self.cell.config["out"]) / "metrics.jsonl"
        step = last_step(path, self.before)
        if step is None:
            return
        if self.bar is None:  # its first step: the cell's progress starts here
            tokens = self.cell.config.get("max_generated_tokens")
            self.bar = Progress(
                f"cell {self.cell.name}",
                int(self.cell.config["steps"]),
                target=f"{tokens:,} generated tokens" if tokens else None,
                every_s=watch.every_s,
                file=watch.file,
                initial=step,
                after_s=watch.after_s,
            )
        elif step > self.step:
            self.bar.update(step - self.step)
        self.step = max(step, self.step)


def file_state(path: Path) -> tuple[int, int, int] | None:
    """(inode, size, modification time in ns) of the file at `path`; None if there is none."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def last_step(path: Path, before: tuple[int, int, int] | None = None) -> int | None:
    """The step of the last record of a metrics.jsonl, or None: no file, no complete record
    yet, or the file still as it was (`before`, its `file_state` when the cell started: a
    previous run's). A state, not a time: a file written just after a `time.time()`
    reading can carry an earlier modification time (the kernel's coarse clock)."""
    try:
        if before is not None and file_state(path) == before:
            return None
        with path.open("rb") as fh:
            start = max(0, fh.seek(0, os.SEEK_END) - 65536)  # a record is a few kB
            fh.seek(start)
            tail = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    lines = tail.split("\n")[:-1]  # the last is being written (or empty)
    for line in reversed(lines[1:] if start else lines):  # the first may be cut
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            continue
    return None


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Start no more cells; ask the running ones to finish their step and checkpoint (a
    signal sent to this process alone, e.g. SIGTERM, does not reach the workers)."""
    for process in list((pool._processes or {}).values()):
        if process.is_alive():
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.kill(process.pid, signal.SIGINT)
    pool.shutdown(wait=True, cancel_futures=True)
