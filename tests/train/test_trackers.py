"""Trackers: the values each receives are metrics.jsonl's, read back from each store
(TensorBoard's events, mlflow's client, wandb's offline run file, trackio's database;
swanlab's run is checked on disk), in offline or local mode; a missing library is one
line naming its extra, said before anything is written; a failing tracker costs itself,
not the run."""

from __future__ import annotations

import importlib.util
import json
import math
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml
from local_model import local_policy_dir

from rlvr.runlog import trackers
from rlvr.runlog.completions import read_completions
from rlvr.runlog.logger import MetricsLogger, read_metrics
from rlvr.runlog.trackers import (
    TABLE_COLUMNS,
    RunInfo,
    TensorBoardTracker,
    check_installed,
    code_version,
    mlflow_name,
    table_data,
)
from rlvr.train.config import resolve_config
from rlvr.train.run import run_training

# mlflow's log_table on pandas 3 warns about its own select_dtypes call.
pytestmark = pytest.mark.filterwarnings("ignore:For backward compatibility, 'str' dtypes")
INSTALLED = [n for n in ("wandb", "trackio", "swanlab", "mlflow") if importlib.util.find_spec(n)]


def tensorboard_scalars(directory: Path) -> dict[str, dict[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(directory), size_guidance={"scalars": 0}).Reload()
    return {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}


def expected(records: list[dict]) -> dict[str, dict[int, float]]:
    """metrics.jsonl as {name: {step: value}}, non-finite (null) values left out."""
    out: dict[str, dict[int, float]] = {}
    for record in records:
        for key, value in record.items():
            if key != "step" and value is not None:
                out.setdefault(key, {})[record["step"]] = value
    return out


def test_tensorboard_gets_the_finite_values_and_metrics_jsonl_records_nan_as_null(tmp_path):
    tracker = TensorBoardTracker(RunInfo(tmp_path, "p", "n"))
    logger = MetricsLogger(tmp_path, trackers=[tracker])
    logger.log(1, {"reward/mean": 0.25, "loss/policy": math.nan})
    logger.log(2, {"reward/mean": 1 / 3, "loss/policy": 0.5})
    logger.close()
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert records[0] == {"step": 1, "loss/policy": None, "reward/mean": 0.25}
    scalars = tensorboard_scalars(tmp_path / "tensorboard")
    # TensorBoard stores float32: 1/3 comes back as float32(1/3).
    assert scalars == {
        "reward/mean": {1: 0.25, 2: float(np.float32(1 / 3))},
        "loss/policy": {2: 0.5},
    }


class Broken:
    name, has_tables = "broken", True

    def __init__(self) -> None:
        self.closed = 0

    def log_metrics(self, step, metrics):
        raise ConnectionError("the server went away")

    def log_table(self, step, name, rows):
        raise AssertionError("closed trackers get nothing")

    def log_config(self, config):
        pass

    def close(self):
        self.closed += 1


def test_a_failing_tracker_is_warned_about_once_and_closed_and_the_log_goes_on(tmp_path):
    broken = Broken()
    logger = MetricsLogger(tmp_path, trackers=[broken])
    with pytest.warns(UserWarning, match="report_to: 'broken' failed .ConnectionError: the server"):
        logger.log(1, {"reward/mean": 0.5})
    logger.log(2, {"reward/mean": 0.75})
    logger.log_table(2, "completions", [])
    logger.close()
    assert broken.closed == 1
    assert [r["reward/mean"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0.5, 0.75]


def test_a_missing_library_is_one_line_naming_its_extra_before_anything_is_written(
    tmp_path, monkeypatch
):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    message = "report_to: 'wandb' needs the wandb package: pip install 'rlvr[wandb]'"
    with pytest.raises(ValueError) as caught:
        check_installed(["tensorboard", "wandb"])
    assert str(caught.value) == message
    cfg = resolve_config({"report_to": ["wandb"], "out": str(tmp_path / "run"), "steps": 1})
    with pytest.raises(ValueError, match="needs the wandb package"):
        run_training(cfg)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["neptune"], "report_to: 'neptune' is unknown; valid: tensorboard, wandb, trackio"),
        ("wandb", "report_to must be a list of tracker names .* got 'wandb'"),
        (["wandb", "wandb"], "report_to names a tracker twice"),
    ],
)
def test_report_to_is_checked(value, message):
    with pytest.raises(ValueError, match=message):
        resolve_config({"report_to": value})


def test_a_tracker_name_without_a_tracker_that_takes_it_is_refused():
    with pytest.raises(ValueError, match="tracker_project='mine' names the run in wandb"):
        resolve_config({"tracker_project": "mine"})


def test_the_code_version_is_this_checkout_s_commit():
    head = subprocess.run(
        ["git", "-C", str(Path(__file__).parent), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert code_version()["git_commit"] == (head or None)


def wandb_records(run_file: Path) -> list:
    """The protobuf records of a wandb run file: W&B's LevelDB-style log (a 7-byte header,
    then 32 KiB blocks of chunks: crc32 (4 bytes), length (2), type (1: full, 2: first,
    3: middle, 4: last), data; a block's last < 7 bytes are padding)."""
    from wandb.proto import wandb_internal_pb2

    raw, block, position, pending, records = run_file.read_bytes(), 32768, 7, b"", []
    assert raw[:4] == b":W&B"
    while position + 7 <= len(raw):
        left = block - position % block
        if left < 7:
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", raw[position : position + 7])
        if kind == 0:
            break
        pending += raw[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def wandb_history(run_dir: Path) -> tuple[dict[str, dict[int, float]], dict]:
    """({metric: {step: value}}, config) of the one offline wandb run under `run_dir`."""
    (run_file,) = (run_dir / "trackers" / "wandb").glob("offline-run-*/run-*.wandb")
    history: dict[str, dict[int, float]] = {}
    config = {}
    for record in wandb_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            items = {_wandb_key(i): json.loads(i.value_json) for i in record.history.item}
            for key, value in items.items():
                metric = "/" in key and not key.startswith(("_", "completions"))
                if metric and isinstance(value, int | float):
                    history.setdefault(key, {})[items["step"]] = value
        elif kind in ("config", "run"):
            update = record.config.update if kind == "config" else record.run.config.update
            config.update({_wandb_key(i): json.loads(i.value_json) for i in update})
    return history, config


def _wandb_key(item) -> str:
    return item.key or "/".join(item.nested_key)


COMMIT = "0123456789abcdef0123456789abcdef01234567"  # what code_version says, recorded


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    """Two steps on the local model with every installed tracker (offline or local) and
    the completions table every step: the run directory, metrics.jsonl as {name: {step:
    value}}, the completions rows by step, and trackio's logs and config (read while its
    directory is set)."""
    tmp = tmp_path_factory.mktemp("tracked")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WANDB_MODE", "offline")
        patch.setenv("WANDB_SILENT", "true")
        patch.setenv("SWANLAB_MODE", "offline")
        patch.setenv("TRACKIO_DIR", str(tmp / "trackio"))
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        patch.setattr(trackers, "code_version", lambda: {"git_commit": COMMIT, "git_dirty": True})
        if "trackio" in INSTALLED:
            import trackio.sqlite_storage

            patch.setattr(trackio.sqlite_storage, "TRACKIO_DIR", tmp / "trackio")
        out = tmp / "run"
        run_training(
            resolve_config(
                {
                    "model": local_policy_dir(tmp),
                    "task_options": {"digits": 2, "ops": "+"},
                    "prompts_per_step": 2,
                    "group_size": 2,
                    "max_new_tokens": 6,
                    "eval_size": 4,
                    "steps": 2,
                    "eval_every": 2,
                    "progress": False,
                    "completions_every": 1,
                    "completions_rows": 3,
                    "report_to": ["tensorboard", *INSTALLED],
                    **(
                        {"tracker_project": "rlvr-test"} if INSTALLED else {}
                    ),  # none for tensorboard
                    "out": str(out),
                }
            )
        )
        trackio_store = None
        if "trackio" in INSTALLED:
            from trackio.sqlite_storage import SQLiteStorage

            trackio_store = (
                SQLiteStorage.get_logs("rlvr-test", "run"),
                SQLiteStorage.get_run_config("rlvr-test", "run"),
            )
    want = expected(read_metrics(out / "metrics.jsonl"))
    rows = {step: read_completions(out, step) for step in (1, 2)}
    return out, want, rows, trackio_store


def needs(name: str):
    return pytest.mark.skipif(
        name not in INSTALLED, reason=f"{name} is not installed (pip install 'rlvr[{name}]')"
    )


def test_tensorboard_receives_what_metrics_jsonl_records(tracked):
    out, want, _, _ = tracked
    assert want["reward/mean"].keys() == {1, 2} and "eval/pass@1" in want
    as_float32 = {k: {s: float(np.float32(v)) for s, v in d.items()} for k, d in want.items()}
    assert tensorboard_scalars(out / "tensorboard") == as_float32


@needs("mlflow")
def test_mlflow_receives_what_metrics_jsonl_records(tracked):
    out, want, rows, _ = tracked
    check_mlflow(out, want, rows, COMMIT)


@needs("wandb")
def test_wandb_receives_what_metrics_jsonl_records(tracked):
    out, want, rows, _ = tracked
    history, config = wandb_history(out)
    assert history == want
    assert (config["git_commit"], config["seed"]) == (COMMIT, 0)
    tables = sorted((out / "trackers" / "wandb").glob("offline-run-*/files/media/table/*"))
    assert [json.loads(t.read_text())["data"] for t in tables] == [
        table_data(rows[1]),
        table_data(rows[2]),
    ]


@needs("trackio")
def test_trackio_receives_what_metrics_jsonl_records(tracked):
    _, want, rows, (logs, config) = tracked
    got: dict[str, dict[int, float]] = {}
    tables = []
    for entry in logs:
        for key, value in entry.items():
            if key == "completions":
                tables.append(value["_value"])
            elif "/" in key:
                got.setdefault(key, {})[entry["step"]] = value
    assert got == want
    assert config["git_commit"] == COMMIT
    assert tables == [
        [dict(zip(TABLE_COLUMNS, r, strict=True)) for r in table_data(rows[step])]
        for step in (1, 2)
    ]


@needs("swanlab")
def test_swanlab_writes_its_offline_run_with_a_text_per_completions_row(tracked):
    out, _, rows, _ = tracked
    (run_dir,) = (out / "trackers" / "swanlog").glob("run-*")
    assert len(list((run_dir / "media" / "text").iterdir())) == len(rows[1]) + len(rows[2])
    config = yaml.safe_load((run_dir / "files" / "config.yaml").read_text())
    assert (config["git_commit"]["value"], config["seed"]["value"]) == (COMMIT, 0)


def check_mlflow(out: Path, want: dict, rows: dict, commit: str) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(out / "trackers" / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("rlvr-test")
    (run,) = client.search_runs([experiment.experiment_id])
    got = {
        key: {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)}
        for key in run.data.metrics
    }
    assert got == {mlflow_name(k): v for k, v in want.items()}
    assert "eval/pass_at_1" in got
    assert run.data.tags["git_commit"] == commit and run.data.params["seed"] == "0"
    assert run.info.run_name == "run"
    for step in (1, 2):
        path = client.download_artifacts(run.info.run_id, f"completions/step_{step:06d}.json")
        table = json.loads(Path(path).read_text())
        assert table["columns"] == list(TABLE_COLUMNS)
        assert table["data"] == table_data(rows[step])


@needs("swanlab")
def test_swanlab_warns_that_the_critic_pretraining_steps_are_not_in_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SWANLAB_MODE", "offline")
    (swanlab,) = trackers.open_trackers(["swanlab"], RunInfo(tmp_path, "p", "n"), {"seed": 0})
    logger = MetricsLogger(tmp_path, trackers=[swanlab])
    with pytest.warns(UserWarning, match="swanlab takes no negative steps"):
        logger.log(-2, {"pretrain/loss/value": 0.5})
        logger.log(-1, {"pretrain/loss/value": 0.25})
    logger.log(0, {"eval/accuracy": 0.5})
    assert logger.trackers == [swanlab]  # still open: nothing failed
    logger.close()
