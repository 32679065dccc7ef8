"""A fork server for the Python worker processes Spark starts for a local job: the modules they import, imported once.

A streaming query's first batch waits on several Python processes that Spark starts one after another (the source's
driver-side runner, a daemon per planner module: data source creation, read and write planning, commit; the task
daemon), each a new interpreter importing pyspark, pyarrow and this project's connector modules: ~0.3-1 s of one
core each on the machines these jobs are measured on, most of the time from "Spark session up" to the first
replicated message (``benchmarks/replicator.py`` (d); figures in ``benchmarks/MEASUREMENTS.md``).

``environment`` (called by ``jobs.spark_session.build_spark`` where the wrapper of ``jobs.worker_python`` applies:
before it launches the driver JVM, or under spark-submit before the SparkContext is created) runs ``python -m
jobs.worker_zygote``: it listens on an abstract Unix socket, imports ``PRELOAD`` (while the JVM starts), and serves.
``worker_python.sh`` then runs every ``python -m <module>`` Spark asks for through ``jobs/worker_zygote_client.py``:
the client passes its standard streams, arguments, environment, directory and umask; the zygote forks a child that
takes them over and runs the module as ``python -m`` would, already holding the imports. The client stays as the
process Spark started: it forwards the signals Spark sends and exits with the child's status. Whatever the zygote
cannot serve exactly as a new interpreter would (``refusal``: another interpreter setting such as PYTHONHASHSEED,
not ``-m``) the client runs the usual way, and so it does when no zygote answers: the zygote is a shortcut, never a
dependency.

The zygote starts no threads (a forked child keeps only the forking thread); pyarrow's import starts jemalloc's
purge threads, which jemalloc's own fork handlers make safe (as in ``connectors.replication.worker_daemon``). It exits
when the process that started it does (the pipe it holds reaches end of file); its children live on: each is tied to
Spark by the streams it took over. A child whose client disappears (SIGKILL) gets SIGTERM.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import runpy
import secrets
import select
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jobs.worker_zygote_client import HEADER, SOCKET_ENV, STATUS, socket_address

SWITCH_ENV = "RMQ_WORKER_ZYGOTE"
"""``off``: no zygote (every worker starts a new interpreter, as Spark does)."""
PRELOAD = (
    "pyspark.daemon", "pyspark.worker", "pyspark.sql.worker.lookup_data_sources",
    "pyspark.sql.worker.create_data_source", "pyspark.sql.worker.plan_data_source_read",
    "pyspark.sql.worker.write_into_data_source", "pyspark.sql.worker.python_streaming_sink_runner",
    "pyspark.sql.streaming.python_streaming_source_runner",
    "connectors.replication.data_source", "connectors.replication.reader", "connectors.replication.writer",
    "connectors.replication.partition_writer",
)
"""What Spark's Python workers of a replicator job import (those that fail to import are skipped)."""
STARTUP_SETTINGS = ("PYTHONHASHSEED", "PYTHONOPTIMIZE", "PYTHONUNBUFFERED", "PYTHONIOENCODING", "PYTHONUTF8",
                    "PYTHONWARNINGS", "PYTHONFAULTHANDLER", "PYTHONDEVMODE", "PYTHONMALLOC", "PYTHONDONTWRITEBYTECODE",
                    "PYTHONSAFEPATH", "PYTHONINTMAXSTRDIGITS", "PYTHONNOUSERSITE", "PYTHONHOME", "PYTHONPLATLIBDIR",
                    "SPARK_TESTING", "PYSPARK_ENABLE_NAMEDTUPLE_PATCH")
"""Variables read once, at the interpreter's start or by a preloaded module's import (the last two, pyspark's):
a request must agree with the zygote on each."""
def worker_settings(env: Mapping[str, str]) -> dict[str, str]:
    """What Spark (unbuffered output) and pyspark (the hash seed: the driver's, else 0) set for every Python worker
    of a driver with environment ``env``; the zygote starts with them so that its children match."""
    return {"PYTHONUNBUFFERED": "YES", "PYTHONHASHSEED": env.get("PYTHONHASHSEED", "0")}


TITLE_ROOM = " " * 160
"""The zygote's last argument (blank): room in its command line for its children's titles (``setproctitle`` is told
to leave /proc/<pid>/environ alone, where the tests look for their process tags)."""
MAX_REQUEST = 1 << 22

PROJECT = Path(__file__).resolve().parents[1]
_started: list[tuple[subprocess.Popen[bytes], str, int]] = []
"""This process's zygote, its name, and the pipe end whose closing (this process's exit) ends it."""


def refusal(argv: Sequence[str], env: Mapping[str, str], own_env: Mapping[str, str]) -> str | None:
    """Why a request (the interpreter's arguments after ``python``) cannot be served by a fork, or None."""
    if len(argv) < 2 or argv[0] != "-m" or not argv[1]:
        return "not python -m <module>"
    for name in STARTUP_SETTINGS:
        if env.get(name) != own_env.get(name):
            return f"{name} differs"
    return None


def child_path(cwd: str, pythonpath: str, base: Sequence[str]) -> list[str]:
    """``sys.path`` as ``python -m`` started in ``cwd`` with ``PYTHONPATH=pythonpath`` has it: the directory, the
    PYTHONPATH entries, then the interpreter's own entries (``base``, the zygote's without its own two parts)."""
    entries = [cwd, *(entry for entry in pythonpath.split(os.pathsep) if entry)]
    return entries + [entry for entry in base if entry not in entries]


def exit_status(wait_status: int) -> int:
    """A child's ``waitpid`` status as sent to the client: its exit code, or minus the signal that ended it."""
    return os.waitstatus_to_exitcode(wait_status)


def environment(python: str = sys.executable) -> dict[str, str]:
    """The environment that makes ``worker_python.sh`` use this process's zygote, started on the first call (or
    again when it has ended); {} when ``SWITCH_ENV`` is ``off`` or it cannot be started."""
    if os.environ.get(SWITCH_ENV) == "off":
        return {}
    if _started and _started[0][0].poll() is None:
        return {SOCKET_ENV: _started[0][1]}
    if _started:  # it ended: the pipe that would have ended it goes too
        os.close(_started.pop()[2])
    name = f"@rmq-worker-zygote-{os.getpid()}-{secrets.token_hex(8)}"
    read_end, write_end = os.pipe()
    env = {**os.environ, **worker_settings(os.environ),
           "SPT_NOENV": "1"}  # setproctitle: titles in the arguments' room only, the environment left as it is
    try:
        # its own session, as the driver JVM's: a Ctrl-C at the job's terminal reaches neither it nor its children
        process = subprocess.Popen([python, "-m", "jobs.worker_zygote", name, str(read_end), TITLE_ROOM],
                                   pass_fds=[read_end], stdin=subprocess.DEVNULL, env=env, cwd=PROJECT,
                                   start_new_session=True)
    except OSError:
        os.close(write_end)
        return {}
    finally:
        os.close(read_end)
    _started[:] = [(process, name, write_end)]
    return {SOCKET_ENV: name}


class _Zygote:
    def __init__(self, listener: socket.socket, parent_fd: int) -> None:
        self.listener = listener
        self.parent_fd = parent_fd
        self.wake_r, self.wake_w = os.pipe()
        self.children: dict[int, socket.socket] = {}  # pid -> its client's connection, while both live
        self.own_env = dict(os.environ)
        self.base_path = [entry for entry in sys.path[1:]
                          if entry not in os.environ.get("PYTHONPATH", "").split(os.pathsep)]

    def serve(self) -> None:
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        while True:
            by_fd = {conn.fileno(): pid for pid, conn in self.children.items()}
            waiting: list[Any] = [self.listener, self.parent_fd, self.wake_r, *by_fd]
            ready, _, _ = select.select(waiting, [], [])
            if self.parent_fd in ready:
                return
            if self.wake_r in ready:
                os.read(self.wake_r, 4096)
            self._reap()
            for fd in ready:
                if fd in by_fd and by_fd[fd] in self.children:  # the client went away before its child
                    with contextlib.suppress(OSError):
                        os.kill(by_fd[fd], signal.SIGTERM)
                    self.children.pop(by_fd[fd]).close()
            if self.listener in ready:
                self._accept()

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(STATUS.pack(exit_status(status)))
                conn.close()

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        fds: list[int] = []
        try:
            conn.settimeout(5)
            uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
            data, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 3)
            if uid != os.getuid() or len(fds) != 3 or len(data) < HEADER.size:
                raise ValueError("a request without its streams")
            size = HEADER.unpack_from(data)[0]
            while len(data) < HEADER.size + size:
                chunk = conn.recv(MAX_REQUEST)
                if not chunk:
                    raise ValueError("a request cut short")
                data += chunk
            request = json.loads(data[HEADER.size:])
            why = refusal(request["argv"], request["env"], self.own_env)
            if why is not None:
                conn.sendall(STATUS.pack(0))
                conn.close()
                return
            pid = os.fork()
            if pid == 0:
                self._become(request, fds, conn)
            try:
                conn.sendall(STATUS.pack(pid))
            except OSError:  # its client is gone: so must the child be
                os.kill(pid, signal.SIGTERM)
                raise
            conn.settimeout(None)
            self.children[pid] = conn
        except (OSError, ValueError, KeyError, TypeError):
            conn.close()
        finally:
            for fd in fds:
                os.close(fd)

    def _become(self, request: dict[str, object], fds: list[int], conn: socket.socket) -> None:
        """In the forked child: take over the client's streams and settings, run its module, exit."""
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            for own in (self.listener, conn, *self.children.values()):
                own.close()
            for fd in (self.parent_fd, self.wake_r, self.wake_w):
                os.close(fd)
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            argv = [str(arg) for arg in request["argv"]]  # type: ignore[attr-defined]
            env = {str(k): str(v) for k, v in request["env"].items()}  # type: ignore[attr-defined]
            os.chdir(str(request["cwd"]))
            os.umask(int(request["umask"]))  # type: ignore[call-overload]
            os.environ.clear()
            os.environ.update(env)
            sys.path[:] = child_path(os.getcwd(), env.get("PYTHONPATH", ""), self.base_path)
            sys.argv[:] = [argv[1], *argv[2:]]
            _title(" ".join([sys.executable, *argv]))  # `ps` shows the worker it is, not the zygote
            code = _run_module(argv[1])
        finally:
            with contextlib.suppress(OSError):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)


def _title(title: str) -> None:
    try:
        import setproctitle
    except ImportError:  # not installed: the children keep the zygote's command line
        return
    setproctitle.setproctitle(title)


def _run_module(module: str) -> int:
    """Run ``module`` as ``python -m`` does, with the exit handlers an interpreter's exit runs; its exit code."""
    sys.modules.pop(module, None)  # preloaded: run afresh as __main__ as `python -m` does (without runpy's warning)
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            code = exit_.code or 0
        else:
            print(exit_.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - as the interpreter would: print it, exit 1
        import traceback

        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    return code



def main(argv: Sequence[str]) -> None:
    name, parent_fd = argv[0], int(argv[1])
    _title(" ".join(sys.orig_argv[:5]))  # set up once here (the argument area claimed), then by each child
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_address(name))  # bound first: a client that comes during the imports waits for them
    listener.listen(64)
    for module in PRELOAD:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - not installed here: its workers import it themselves
            continue
    _Zygote(listener, parent_fd).serve()


if __name__ == "__main__":
    main(sys.argv[1:])
