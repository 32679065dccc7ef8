"""jobs/worker_zygote.py with real processes, as Spark uses it: ``worker_python.sh -m <module>`` through the zygote
(the worker is the zygote's forked child, with the client's streams, arguments, directory and environment; the client
forwards signals and exits as the child did), and every case it must leave to a new interpreter."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobs import worker_zygote
from jobs.worker_python import DROP_ENV, PYTHON_ENV, WRAPPER
from jobs.worker_zygote_client import SOCKET_ENV, socket_address
from tests.support.waiting import eventually

PROJECT = Path(__file__).resolve().parents[2]
PROBE = "tests.support.zygote_probe"


@pytest.fixture(scope="module")
def zygote() -> Iterator[tuple[str, int]]:
    """A zygote of this test process (its socket name, its pid)."""
    env = worker_zygote.environment()
    assert env, "no zygote started"
    name = env[SOCKET_ENV]
    eventually(lambda: _listening(name), 30, "the zygote's socket")
    yield name, worker_zygote._started[0][0].pid


def _listening(name: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        return probe.connect_ex(socket_address(name)) == 0


def _worker_env(name: str, **extra: str) -> dict[str, str]:
    """The environment Spark gives a local job's Python worker (jobs/worker_python.py's wrapper and the two settings
    Spark and pyspark add), with the zygote's socket."""
    return {**os.environ, PYTHON_ENV: sys.executable, DROP_ENV: "/nowhere/pyspark.zip", "PYTHONPATH": str(PROJECT),
            "PYTHONUNBUFFERED": "YES", "PYTHONHASHSEED": "0", SOCKET_ENV: name,
            "ZYGOTE_PROBE": "passed", **extra}


def _start(name: str, action: str, cwd: Path, **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([str(WRAPPER), "-m", PROBE, action], cwd=cwd, env=_worker_env(name, **extra), umask=0o027,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _report(process: subprocess.Popen[str]) -> dict[str, Any]:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, process.stderr.read() if process.stderr else "no report"
    report: dict[str, Any] = json.loads(line)
    return report


def _gone(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return status.split(") ", 1)[1].startswith("Z")


def test_a_module_runs_in_a_forked_child_with_the_clients_streams_directory_and_environment(
        zygote: tuple[str, int], tmp_path: Path) -> None:
    name, zygote_pid = zygote
    process = _start(name, "exit3", tmp_path)
    out, err = process.communicate(timeout=30)
    report = json.loads(out)
    assert process.returncode == 3, err
    assert report["ppid"] == zygote_pid and report["pid"] != process.pid
    assert report["preloaded"], "the child did not inherit the zygote's imports"
    assert report["name"] == "__main__"
    assert report["argv"][0].endswith("zygote_probe.py") and report["argv"][1:] == ["exit3"]
    assert report["cwd"] == str(tmp_path) and report["path"][:2] == [str(tmp_path), str(PROJECT)]
    assert report["probe_env"] == "passed"
    assert report["umask"] == 0o027
    # `ps` shows the worker it stands for; /proc/<pid>/environ stays the zygote's (tests find their processes there)
    assert report["cmdline"] == f"{sys.executable} -m {PROBE} exit3"
    assert "SPT_NOENV=1" in report["environ"] and f"PATH={os.environ['PATH']}" in report["environ"]


def test_its_standard_input_is_the_clients(zygote: tuple[str, int], tmp_path: Path) -> None:
    process = _start(zygote[0], "stdin", tmp_path)
    out, _ = process.communicate("from the JVM", timeout=30)
    assert json.loads(out)["stdin"] == "from the JVM"
    assert process.returncode == 0


def test_an_uncaught_error_is_printed_on_the_clients_stderr_and_exits_1(zygote: tuple[str, int],
                                                                        tmp_path: Path) -> None:
    process = _start(zygote[0], "raise", tmp_path)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 1
    assert "RuntimeError: the probe's own error" in err


def test_a_signal_to_the_client_reaches_the_worker_and_the_client_ends_as_it_did(zygote: tuple[str, int],
                                                                                 tmp_path: Path) -> None:
    process = _start(zygote[0], "sleep", tmp_path)
    child = _report(process)["pid"]
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == -signal.SIGTERM
    eventually(lambda: _gone(child), 10, "the worker's end")


def test_a_client_killed_outright_takes_its_worker_with_it(zygote: tuple[str, int], tmp_path: Path) -> None:
    process = _start(zygote[0], "sleep", tmp_path)
    child = _report(process)["pid"]
    process.kill()
    process.wait(timeout=30)
    eventually(lambda: _gone(child), 10, "the worker's end after its client's SIGKILL")


@pytest.mark.parametrize("extra", [{"PYTHONHASHSEED": "7"}, {SOCKET_ENV: "@no-such-zygote"}],
                         ids=["another-hash-seed", "no-zygote"])
def test_what_the_zygote_cannot_serve_exactly_runs_in_a_new_interpreter(zygote: tuple[str, int], tmp_path: Path,
                                                                        extra: dict[str, str]) -> None:
    process = _start(zygote[0], "exit0", tmp_path, **extra)
    out, err = process.communicate(timeout=60)
    report = json.loads(out)
    assert process.returncode == 0, err
    assert report["pid"] == process.pid and not report["preloaded"]
    assert report["cwd"] == str(tmp_path) and report["probe_env"] == "passed"


def test_the_zygote_ends_when_the_process_that_started_it_does(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    process = subprocess.Popen([sys.executable, "-m", "jobs.worker_zygote", "@rmq-zygote-test-end", str(read_end)],
                               pass_fds=[read_end], cwd=PROJECT, stdin=subprocess.DEVNULL)
    os.close(read_end)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=0.5)
        os.close(write_end)
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
