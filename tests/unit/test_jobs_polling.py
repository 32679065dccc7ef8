"""The polling connectors' jobs (``jobs/checkpoint.py``, ``jobs/config_sync.py``) start as every job does:
``jobs.checkpoint.run_queries`` hands logging, the config, the links and exit code 2 to
``jobs.query_supervisor.prepare_job`` (the one owner), binds no metrics endpoint of its own (the replication
and heartbeat jobs serve the links' metrics, and run beside it on the same port), exports the stop marker
while its queries run and removes it at the end. Spark is a stand-in here; the Spark tier runs the jobs."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from connectors.core import job_stop
from jobs import checkpoint, config_sync, job_logging, query_supervisor

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _config(tmp_path: Path, *, metrics_port: int = 0, checkpoints: bool = True) -> Path:
    path = tmp_path / "replicator.yaml"
    path.write_text(yaml.safe_dump({
        "clusters": [{"name": "a", "namesrv": ["127.0.0.1:1"]}, {"name": "b", "namesrv": ["127.0.0.1:2"]}],
        "links": [{"name": "l1", "source": "a", "target": "b", "topics": {"explicit": [{"source": "T"}]},
                   "checkpoint_location": str(tmp_path / "cp" / "l1"), "delta_location": str(tmp_path / "delta"),
                   "checkpoints": {"enabled": checkpoints}}],
        "metrics": {"port": metrics_port}}))
    return path


def _job(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(PROJECT_ROOT / "jobs" / script), *args, "--log-dir", str(cwd / "logs")],
                          cwd=cwd, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)})


@pytest.mark.parametrize("script", ["checkpoint.py", "config_sync.py"])
def test_a_bad_config_or_link_is_one_error_line_and_exit_2(script: str, tmp_path: Path) -> None:
    config = _config(tmp_path)
    for args, expected in ((["--config", str(tmp_path / "missing.yaml")], "cannot read"),
                           (["--config", str(config), "--link", "nope"], "nope"),
                           (["--config", str(config), "--log-level", "LOUD"], "LOUD")):
        done = _job(script, *args, cwd=tmp_path)
        assert done.returncode == 2, done
        lines = done.stderr.strip().splitlines()
        # printed before logging is set up ("error: ..."), else logged ("HH:MM:SS ERROR ..."), never both words
        assert len(lines) == 1 and expected in lines[0], done.stderr
        assert lines[0].startswith("error: ") or " ERROR " in lines[0], done.stderr
        assert "ERROR error" not in lines[0], done.stderr
        assert "Traceback" not in done.stderr + done.stdout


def test_checkpoints_disabled_for_every_link_is_exit_2(tmp_path: Path) -> None:
    done = _job("checkpoint.py", "--config", str(_config(tmp_path, checkpoints=False)), cwd=tmp_path)
    assert done.returncode == 2 and " ERROR checkpoint is disabled for every link selected" in done.stderr, done
    assert len(done.stderr.strip().splitlines()) == 1


@dataclass
class _Query:
    name: str


class _Spark:
    """What ``run_queries`` uses of a SparkSession; records what the job looked like while it ran."""

    def __init__(self) -> None:
        self.registered: list[Any] = []
        self.dataSource = self
        self.sparkContext = object()
        self.stopped = False

    def register(self, source: Any) -> None:
        self.registered.append(source)

    def stop(self) -> None:
        self.stopped = True


@pytest.mark.parametrize("module", [checkpoint, config_sync])
def test_the_job_binds_no_metrics_port_and_keeps_a_stop_marker_while_it_runs(
        module: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(job_stop.STOP_MARKER_ENV, raising=False)
    spark = _Spark()
    seen: dict[str, Any] = {}

    def build_spark(app: str, *, log_dir: Path, checkpoint_locations: list[str], register: bool = True) -> _Spark:
        seen.update(app=app, log_dir=log_dir, locations=checkpoint_locations, register=register)
        return spark

    def supervise(_spark: Any, queries: list[Any], stop: threading.Event, log_dir: Path,
                  _storage: Sequence[str] = (), restarts: Any = None) -> dict[str, str]:
        seen.update(queries=queries, marker=os.environ.get(job_stop.STOP_MARKER_ENV))
        return {}

    monkeypatch.setattr(query_supervisor, "build_spark", build_spark)
    monkeypatch.setattr(query_supervisor, "supervise", supervise)
    monkeypatch.setattr(query_supervisor, "stop_on_signals", threading.Event)  # no handlers in pytest's process
    monkeypatch.setattr(job_logging, "setup", lambda log_dir, level, rotation=None: Path(log_dir))
    monkeypatch.setattr(module, {checkpoint: "start_checkpoints", config_sync: "start_config_sync"}[module],
                        lambda _spark, path, config, name: _Query(f"{name} query"))
    with socket.socket() as held:  # the config's port is taken (by the replication job, say): not ours to bind
        held.bind(("127.0.0.1", 0))
        held.listen()
        config = _config(tmp_path, metrics_port=held.getsockname()[1])
        assert module.run(["--config", str(config), "--log-dir", str(tmp_path / "logs")]) == 0
    assert seen["app"] == f"rocketmq-replicator-{module.__name__.rsplit('.', 1)[-1]}"
    assert seen["log_dir"] == tmp_path / "logs" and seen["queries"] == [_Query("l1 query")]
    assert len(seen["locations"]) == 1 and seen["locations"][0].startswith(str(tmp_path / "cp" / "l1") + "-")
    # the job registers the data sources itself, after the session is up (``register_data_sources``)
    assert seen["register"] is False and [d.__name__ for d in spark.registered] == [
        "RocketMQDataSource", {checkpoint: "CheckpointDataSource", config_sync: "ConfigDataSource"}[module]]
    assert seen["marker"] is not None and spark.stopped
    assert job_stop.STOP_MARKER_ENV not in os.environ and not Path(seen["marker"]).parent.exists()
