"""``jobs.spark_session`` without Spark: its choice of the idle Python worker pool size, and the quieted accumulator
server of every session it builds."""

from __future__ import annotations

import io
import os

import pytest

from jobs import spark_session
from jobs.spark_session import idle_worker_pool


@pytest.mark.parametrize(("master", "executor_cores", "expected"), [
    ("local[2]", None, "4"),     # two workers per task: its data source read's and its write's
    ("local[8]", None, "16"),
    ("local[3, 2]", None, "6"),  # local[N, maxFailures]
    ("local", None, "2"),        # one slot
    ("local[*]", None, str(2 * (os.cpu_count() or 1))),
    ("spark://10.0.0.5:7077", "6", "12"),
    ("yarn", None, None),        # unknown: Spark's unbounded default stays
    ("yarn", "not-a-number", None),
])
def test_the_pool_holds_two_workers_per_task_slot_of_an_executor(master: str, executor_cores: str | None,
                                                   expected: str | None) -> None:
    assert idle_worker_pool(master, executor_cores) == expected


def test_the_accumulator_servers_end_of_connection_is_no_traceback(caplog: pytest.LogCaptureFixture,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """At a clean stop the JVM closes its connection to pyspark's accumulator server, whose handler reads EOF;
    socketserver would print an EOFError traceback on the console. ``build_spark`` quiets it for every session
    (the jobs' and the benchmarks'): EOF at DEBUG, any other error one WARNING line."""
    import socketserver
    from types import SimpleNamespace

    from jobs.spark_session import quiet_accumulator_server

    server = socketserver.TCPServer(("127.0.0.1", 0), socketserver.BaseRequestHandler, bind_and_activate=False)
    quiet_accumulator_server(SimpleNamespace(sparkContext=SimpleNamespace(_accumulatorServer=server)))
    caplog.set_level("DEBUG", logger="jobs.spark_session")
    for error in (EOFError(), OSError("reset")):
        try:
            raise error
        except Exception:  # noqa: BLE001 - socketserver calls handle_error inside its except clause
            server.handle_error(None, ("127.0.0.1", 1))  # type: ignore[arg-type]
    assert "Traceback" not in capsys.readouterr().err
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("DEBUG", "accumulator connection from ('127.0.0.1', 1) closed"),
        ("WARNING", "pyspark's accumulator server failed on a connection from ('127.0.0.1', 1)")]
    quiet_accumulator_server(SimpleNamespace(sparkContext=SimpleNamespace()))  # no server: nothing to do
    server.server_close()


def test_the_jvm_console_relay_keeps_workers_lines_and_sets_the_notices_aside() -> None:
    # the JVM's stdout/stderr carry its start-up notices and, from the Python workers it forks, the sink's batch
    # lines and tracebacks: only the notices leave the console
    source = io.BytesIO(b"WARNING: Using incubator modules: jdk.incubator.vector\n"
                        b"Setting default log level to \"WARN\".\n"
                        b"00:34:10 INFO link l1 batch 0: 50 delivered, 240 bytes\n"
                        b"Traceback (most recent call last):\n")
    notices, console = io.BytesIO(), io.BytesIO()
    notices.close = console.close = lambda: None  # type: ignore[method-assign]
    spark_session._relay_jvm_console(source, notices, console)
    assert console.getvalue() == (b"00:34:10 INFO link l1 batch 0: 50 delivered, 240 bytes\n"
                                  b"Traceback (most recent call last):\n")
    assert notices.getvalue().count(b"\n") == 2


def test_the_relay_drains_the_jvm_whatever_the_console_does() -> None:
    class Closed(io.BytesIO):
        def write(self, data: bytes) -> int:  # type: ignore[override]
            raise OSError("closed console")

    source = io.BytesIO(b"line 1\n" * 1000)
    source.close = lambda: None  # type: ignore[method-assign]
    spark_session._relay_jvm_console(source, io.BytesIO(), Closed())
    assert source.read() == b""
