"""jobs.job_logging: one readable console line per failure, tracebacks only in the log file."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from connectors.core import driver_log, job_stop
from jobs import job_logging

# Shaped like the text of a StreamingQueryException for an unreachable source name server (trimmed).
SPARK_FAILURE = """\
org.apache.spark.SparkException: [PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming \
data source perform prepareForTriggerAvailableNow: Traceback (most recent call last):
  File "/x/broker_store/net/client.py", line 133, in _connection
ConnectionRefusedError: [Errno 111] Connection refused

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/x/broker_store/net/client.py", line 139, in _connection
    raise TransportError(f"cannot connect to {addr}: {exc.strerror or exc}") from exc
broker_store.protocol.errors.TransportError: cannot connect to 127.0.0.1:9876: Connection refused

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/x/connectors/replication/reader.py", line 10, in latestOffset
connectors.core.errors.SourceUnavailableError: link l1: source cluster source (namesrv 127.0.0.1:9876) \
unavailable for 30.0s: cannot connect to 127.0.0.1:9876: Connection refused
 SQLSTATE: 38000
\tat org.apache.spark.sql.execution.python.streaming.PythonStreamingSourceRunner.x(Foo.scala:1)
"""


def test_reason_prefers_the_replicators_own_error() -> None:
    assert job_logging.failure_reason(SPARK_FAILURE) == (
        "link l1: source cluster source (namesrv 127.0.0.1:9876) unavailable for 30.0s: cannot connect to "
        "127.0.0.1:9876: Connection refused (SourceUnavailableError)")


def test_reason_falls_back_to_client_then_python_then_first_line() -> None:
    client_only = SPARK_FAILURE.split("The above exception was the direct cause")[0:2]
    text = "The above exception was the direct cause".join(client_only)
    assert job_logging.failure_reason(text) == "cannot connect to 127.0.0.1:9876: Connection refused (TransportError)"
    assert job_logging.failure_reason("boom\nValueError: bad value\n") == "bad value (ValueError)"
    assert job_logging.failure_reason("org.apache.spark.SparkException: stage 3 failed SQLSTATE: 38000\n at x") == (
        "org.apache.spark.SparkException: stage 3 failed")
    assert job_logging.failure_reason("") == "unknown error"


def test_failure_line_names_the_link_and_the_log_files(tmp_path: Path) -> None:
    line = job_logging.failure_line("l1", RuntimeError(SPARK_FAILURE), tmp_path)
    assert line.startswith("link l1 failed: source cluster source (namesrv 127.0.0.1:9876)")
    assert "\n" not in line and str(tmp_path / "replicator.log") in line


def test_console_has_no_traceback_the_file_has_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(driver_log.LOG_DIR_ENV, raising=False)  # restored after the test
    monkeypatch.delenv(driver_log.LOG_LEVEL_ENV, raising=False)
    console = io.StringIO()
    root = logging.getLogger()
    before = list(root.handlers), root.level
    try:
        directory = job_logging.setup(tmp_path / "logs", "INFO", console=console)
        log = logging.getLogger("jobs.test")
        try:
            raise RuntimeError("deep cause")
        except RuntimeError:
            log.exception("link l1 failed: it broke")
        log.info("a whole JVM exception text", extra=driver_log.FILE_ONLY)
        for handler in root.handlers:
            handler.flush()
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
            handler.close()
        for handler in before[0]:
            root.addHandler(handler)
        root.setLevel(before[1])
    assert console.getvalue().count("\n") == 1 and "link l1 failed: it broke" in console.getvalue()
    assert "Traceback" not in console.getvalue()
    logged = (directory / job_logging.PYTHON_LOG).read_text()
    assert "Traceback" in logged and "deep cause" in logged and "a whole JVM exception text" in logged
    assert "${sys:replicator.log.dir}/spark.log" in job_logging.LOG4J_PROPERTIES.read_text()
    options = job_logging.spark_java_options(directory)
    assert f"-Dreplicator.log.dir={directory}" in options
    assert f"-Dlog4j2.configurationFile=file:{job_logging.LOG4J_PROPERTIES}" in options
    assert os.environ[driver_log.LOG_DIR_ENV] == str(directory)  # what Spark's Python workers inherit


def test_a_worker_process_logs_like_the_job(tmp_path: Path) -> None:
    """A Python worker (a fresh process with the job's environment) gets the same console and file."""
    code = (
        "import logging\n"
        "from connectors.core.driver_log import driver_logging\n"
        "driver_logging()\n"
        "try:\n    raise KeyError('inner')\n"
        "except KeyError:\n    logging.getLogger('connectors.x').exception('link l1 failed: no route')\n"
    )
    env = {**os.environ, driver_log.LOG_DIR_ENV: str(tmp_path), driver_log.LOG_LEVEL_ENV: "INFO"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert "link l1 failed: no route" in done.stderr and "Traceback" not in done.stderr
    assert "Traceback" in (tmp_path / driver_log.PYTHON_LOG).read_text()


@pytest.mark.parametrize("stopping", [True, False])
def test_a_workers_socket_error_at_the_jobs_stop_stays_off_the_console(tmp_path: Path, stopping: bool) -> None:
    """A runner whose socket Spark closed at the job's stop ends without a traceback on the shared stderr
    (the log file has it at DEBUG); the same error while the job runs is printed as Python does."""
    marker = tmp_path / "job" / "stopping"
    marker.parent.mkdir()
    if stopping:
        marker.touch()
    code = ("from connectors.core.driver_log import driver_logging\n"
            "driver_logging()\n"
            "raise BrokenPipeError(32, 'Broken pipe')\n")
    env = {**os.environ, driver_log.LOG_DIR_ENV: str(tmp_path), driver_log.LOG_LEVEL_ENV: "DEBUG",
           job_stop.STOP_MARKER_ENV: str(marker), driver_log.SPARK_WORKER_ENV: "secret"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 1
    assert ("Traceback" in done.stderr) is not stopping, done.stderr
    if stopping:
        assert "Python worker ended by the job's stop" in (tmp_path / driver_log.PYTHON_LOG).read_text()


def test_log_rotation_is_validated_and_travels_in_the_environment() -> None:
    rotation = driver_log.LogRotation(2 * 1024 * 1024, 3)
    assert driver_log.LogRotation.from_env(rotation.to_env()) == rotation
    assert driver_log.LogRotation.from_env(None) == driver_log.LogRotation.from_env("junk") == driver_log.LogRotation()
    with pytest.raises(ValueError, match="older_files 0"):
        driver_log.LogRotation(1024 * 1024, 0)
    import argparse
    parser = argparse.ArgumentParser()
    job_logging.add_rotation_arguments(parser)
    assert job_logging.rotation_of(parser.parse_args(["--log-file-mb", "2", "--log-files", "3"])) == rotation
    with pytest.raises(ValueError, match=r"^--log-file-mb 0 / --log-files 5: log rotation: max_bytes 0"):
        job_logging.rotation_of(parser.parse_args(["--log-file-mb", "0"]))
    options = job_logging.spark_java_options(Path("/x"), rotation)
    assert "-Dreplicator.log.maxBytes=2097152 -Dreplicator.log.files=3" in options
    properties = job_logging.LOG4J_PROPERTIES.read_text()
    for line in ("appender.file.type = RollingFile", "${sys:replicator.log.maxBytes:-104857600}",
                 "appender.file.strategy.max = ${sys:replicator.log.files:-5}"):
        assert line in properties


def test_processes_sharing_replicator_log_roll_it_once_and_lose_nothing(tmp_path: Path) -> None:
    """Two handlers on one file stand for the job and a Python worker (separate open files, one lock file): a
    roll by either is seen by the other before its next record, so the kept files hold the newest records in
    order, none twice, none written into a file already rolled away, and none over the size limit."""
    rotation = driver_log.LogRotation(max_bytes=1024, older_files=3)
    path = tmp_path / driver_log.PYTHON_LOG
    handlers = [driver_log.SharedRotatingFileHandler(path, rotation) for _ in range(2)]
    for handler in handlers:
        handler.setFormatter(logging.Formatter("%(message)s"))
    try:
        for i in range(400):
            handlers[i % 3 % 2].handle(logging.makeLogRecord({"msg": f"record {i:05d} " + "x" * 30}))
    finally:
        for handler in handlers:
            handler.close()
    files = [path.with_name(f"{path.name}.{n}") for n in (3, 2, 1)] + [path]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != path.name + ".lock") == sorted(
        p.name for p in files)
    assert all(p.stat().st_size <= rotation.max_bytes for p in files)
    numbers = [int(line.split()[1]) for p in files for line in p.read_text().splitlines()]
    assert numbers == list(range(numbers[0], 400)) and len(numbers) > 60
