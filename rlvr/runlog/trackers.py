"""Trackers: where a run's metrics, completions tables and config go besides metrics.jsonl.

`report_to` names them: tensorboard (the default), wandb, trackio, swanlab, mlflow. Each is
driven through its project's own library, imported only when named; a missing library is
one line naming the extra that installs it, said before the run writes anything.

Every tracker receives the same values: each step's finite metrics at that step
(metrics.jsonl records a non-finite value as null; no tracker gets it), the run's resolved
config with the code's git commit (`code_version`), and the completions tables
(rlvr/runlog/completions.py) where it has tables. Local stores: TensorBoard `RUN/tensorboard`;
wandb, swanlab and mlflow's file store under `RUN/trackers/`; trackio its own `TRACKIO_DIR`.
Each library's environment variables choose online or offline (`WANDB_MODE`,
`SWANLAB_MODE`, `MLFLOW_TRACKING_URI`). A resumed run opens a new run in wandb, trackio,
swanlab and mlflow, named "<name> (resumed at step N)"; TensorBoard drops the events the
interrupted invocation logged after the checkpoint and continues one curve.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

TRACKERS = ("tensorboard", "wandb", "trackio", "swanlab", "mlflow")
"""The names `report_to` takes; each is also its Python module and its rlvr extra."""


class Tracker(Protocol):
    """One experiment tracker's run."""

    name: str
    has_tables: bool

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None: ...

    def log_table(self, step: int, name: str, rows: list[dict[str, Any]]) -> None: ...

    def log_config(self, config: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class RunInfo:
    """What a tracker needs to open its run."""

    out: Path  # the run directory
    project: str
    name: str
    purge_step: int | None = None  # TensorBoard: drop events at or after it (a resumed run)
    resumed_step: int | None = None  # the checkpoint's step when the run was resumed

    @property
    def run_name(self) -> str:
        if self.resumed_step is None:
            return self.name
        return f"{self.name} (resumed at step {self.resumed_step})"


def check_report_to(value: Any) -> None:
    """`report_to` is a list of distinct tracker names."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(
            f"report_to must be a list of tracker names ({', '.join(TRACKERS)}), got "
            f"{value!r}; e.g. [tensorboard, wandb]"
        )
    for name in value:
        if name not in TRACKERS:
            raise ValueError(f"report_to: {name!r} is unknown; valid: {', '.join(TRACKERS)}")
    if len(set(value)) != len(value):
        raise ValueError(f"report_to names a tracker twice: {value!r}")


def check_installed(names: list[str]) -> None:
    """Each named tracker's library can be imported (checked before anything is written)."""
    for name in names:
        if importlib.util.find_spec(name) is None:
            raise ValueError(
                f"report_to: {name!r} needs the {name} package: pip install 'rlvr[{name}]'"
            )


def open_trackers(names: list[str], info: RunInfo, config: dict[str, Any]) -> list[Tracker]:
    """The named trackers' runs, each given the config and the code's git commit."""
    check_installed(names)
    recorded = {**config, **code_version()}
    trackers = []
    for name in names:
        try:
            tracker = ADAPTERS[name](info)
        except Exception as err:
            for opened in trackers:
                opened.close()
            raise RuntimeError(
                f"report_to: {name!r} could not open its run: {type(err).__name__}: {err}"
            ) from err
        tracker.log_config(recorded)
        trackers.append(tracker)
    return trackers


def finite(metrics: dict[str, float]) -> dict[str, float]:
    """The metrics every tracker receives: the finite ones, as floats."""
    return {k: float(v) for k, v in sorted(metrics.items()) if v is not None and math.isfinite(v)}


def code_version() -> dict[str, Any]:
    """`git_commit` (None outside a git checkout) and `git_dirty` of the code that ran: the
    repository holding the rlvr package."""
    here = Path(__file__).resolve().parent

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(here), *args], capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"git_commit": commit, "git_dirty": None if status is None else bool(status)}


TABLE_COLUMNS = (
    "step",
    "group",
    "sample",
    "prompt",
    "completion",
    "reward",
    "rewards",
    "correct",
    "formatted",
    "advantage",
    "length",
    "truncated",
    "kept",
    "turns",
)
"""Columns of a tracker's completions table; `rewards` and `turns` as JSON text."""


def table_data(rows: list[dict[str, Any]]) -> list[list[Any]]:
    """Rows as table cells in `TABLE_COLUMNS` order (nested values as JSON text)."""
    nested = ("rewards", "turns")
    return [[json.dumps(row[c]) if c in nested else row[c] for c in TABLE_COLUMNS] for row in rows]


class TensorBoardTracker:
    """Scalars and the config as text in `RUN/tensorboard` (no tables)."""

    name, has_tables = "tensorboard", False

    def __init__(self, info: RunInfo) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(
            log_dir=str(info.out / "tensorboard"), purge_step=info.purge_step
        )

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def log_table(self, step: int, name: str, rows: list[dict[str, Any]]) -> None:
        raise NotImplementedError("TensorBoard has no tables")

    def log_config(self, config: dict[str, Any]) -> None:
        text = json.dumps(config, indent=2, default=str)
        self.writer.add_text("config", "    " + text.replace("\n", "\n    "), 0)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    """A wandb run in `RUN/trackers/wandb` (`WANDB_MODE=offline` keeps it local). Charts
    use rlvr's `step` as their x-axis, so the critic pre-training's negative steps and a
    resumed run's steps are kept (wandb's own step only increases)."""

    name, has_tables = "wandb", True

    def __init__(self, info: RunInfo) -> None:
        import wandb

        self.wandb = wandb
        directory = info.out / "trackers"
        directory.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=info.project, name=info.run_name, dir=str(directory), reinit="create_new"
        )
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log({"step": step, **metrics})

    def log_table(self, step: int, name: str, rows: list[dict[str, Any]]) -> None:
        table = self.wandb.Table(columns=list(TABLE_COLUMNS), data=table_data(rows))
        self.run.log({"step": step, name: table})

    def log_config(self, config: dict[str, Any]) -> None:
        self.run.config.update(config, allow_val_change=True)

    def close(self) -> None:
        self.run.finish()


class TrackioTracker:
    """A trackio run in its local store (`TRACKIO_DIR`; `trackio show` opens it)."""

    name, has_tables = "trackio", True

    def __init__(self, info: RunInfo) -> None:
        import trackio

        self.trackio = trackio
        self.info = info
        self.run = None

    def log_config(self, config: dict[str, Any]) -> None:
        # trackio takes the config when the run opens, so the run opens here.
        info = self.info
        self.run = self.trackio.init(
            project=info.project,
            name=info.run_name,
            config=config,
            embed=False,
            auto_log_gpu=False,
            auto_log_cpu=False,
        )

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def log_table(self, step: int, name: str, rows: list[dict[str, Any]]) -> None:
        table = self.trackio.Table(columns=list(TABLE_COLUMNS), data=table_data(rows))
        self.run.log({name: table}, step=step)

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()


class SwanlabTracker:
    """A swanlab run in `RUN/trackers/swanlog` (`SWANLAB_MODE=offline` or `local` keeps
    it on disk). swanlab has no tables: each completions row is logged as a text."""

    name, has_tables = "swanlab", True

    def __init__(self, info: RunInfo) -> None:
        import swanlab

        self.swanlab = swanlab
        self.info = info
        self.run = None
        self.warned = False

    def log_config(self, config: dict[str, Any]) -> None:
        info = self.info
        directory = info.out / "trackers" / "swanlog"
        directory.mkdir(parents=True, exist_ok=True)
        self.run = self.swanlab.init(
            project=info.project,
            name=info.run_name,
            log_dir=str(directory),
            config=config,
            reinit=True,
        )

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        if step < 0:  # swanlab drops them with an error line of its own
            if not self.warned:
                warnings.warn(
                    "swanlab takes no negative steps: the critic pre-training's records "
                    "(steps < 0) are in metrics.jsonl and the other trackers only",
                    stacklevel=3,
                )
                self.warned = True
            return
        self.run.log(metrics, step=step)

    def log_table(self, step: int, name: str, rows: list[dict[str, Any]]) -> None:
        texts = [self.swanlab.Text(_row_text(row)) for row in rows]
        self.run.log({name: texts}, step=step)

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()


def _row_text(row: dict[str, Any]) -> str:
    head = (
        f"group {row['group']} sample {row['sample']}: reward {row['reward']}, "
        f"advantage {row['advantage']}, correct {row['correct']}, kept {row['kept']}"
    )
    return f"{head}\n--- prompt\n{row['prompt']}\n--- completion\n{row['completion']}"


class MlflowTracker:
    """An mlflow run: at `MLFLOW_TRACKING_URI` if set, else a file store in
    `RUN/trackers/mlruns` (mlflow ≥ 3 asks for MLFLOW_ALLOW_FILE_STORE=true: set then).
    The config's scalar fields are params, the whole config `config.json`, the commit a
    tag; tables are `completions/step_NNNNNN.json` artifacts. Metric names take mlflow's
    characters (`mlflow_name`: eval/pass@1 is eval/pass_at_1)."""

    name, has_tables = "mlflow", True

    def __init__(self, info: RunInfo) -> None:
        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            uri = (info.out / "trackers" / "mlruns").resolve().as_uri()
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=uri)
        experiment = self.client.get_experiment_by_name(info.project)
        experiment_id = (
            experiment.experiment_id if experiment else self.client.create_experiment(info.project)
        )
        self.run_id = self.client.create_run(experiment_id, run_name=info.run_name).info.run_id

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        entries = [Metric(mlflow_name(k), v, now, step) for k, v in metrics.items()]
        for start in range(0, len(entries), 1000):  # log_batch takes at most 1000
            self.client.log_batch(self.run_id, metrics=entries[start : start + 1000])

    def log_table(self, step: int, name: str, rows: list[dict[str, Any]]) -> None:
        data = table_data(rows)
        columns = {c: [r[i] for r in data] for i, c in enumerate(TABLE_COLUMNS)}
        self.client.log_table(
            self.run_id, data=columns, artifact_file=f"{name}/step_{step:06d}.json"
        )

    def log_config(self, config: dict[str, Any]) -> None:
        from mlflow.entities import Param

        scalar = (str, int, float, bool, type(None))
        params = [Param(k, str(v)) for k, v in config.items() if isinstance(v, scalar)]
        self.client.log_batch(self.run_id, params=params)
        self.client.log_dict(self.run_id, config, "config.json")
        self.client.set_tag(self.run_id, "git_commit", str(config.get("git_commit")))

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def mlflow_name(key: str) -> str:
    """`key` in the characters mlflow allows in a name: "eval/pass@1" → "eval/pass_at_1"."""
    return re.sub(r"[^\w\-. :/]", "_", key.replace("@", "_at_"))


ADAPTERS = {
    "tensorboard": TensorBoardTracker,
    "wandb": WandbTracker,
    "trackio": TrackioTracker,
    "swanlab": SwanlabTracker,
    "mlflow": MlflowTracker,
}
