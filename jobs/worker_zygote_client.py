"""``python -m <module>`` for Spark's Python workers through the job's zygote (``jobs.worker_zygote``).

Run by ``worker_python.sh`` as ``<python> -I -S worker_zygote_client.py -m <module> ...`` when the job started a zygote:
an interpreter with nothing imported but the standard library modules below (~10 ms). It hands its standard streams
and settings to the zygote, which forks the worker; this process stays what Spark started and waits: signals Spark
sends it are forwarded to the worker, and it exits with the worker's status (killed by a signal: by the same signal).
When no zygote answers, or it refuses the request, it execs the interpreter as ``worker_python.sh`` would have.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import sys

SOCKET_ENV = "REPLICATOR_WORKER_ZYGOTE"  # jobs.worker_zygote.SOCKET_ENV (not imported: this runs without site)
PYTHON_ENV = "REPLICATOR_WORKER_PYTHON"  # jobs.worker_python.PYTHON_ENV
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def _read_int(conn: socket.socket) -> int | None:
    data = b""
    while len(data) < 4:
        chunk = conn.recv(4 - len(data))
        if not chunk:
            return None
        data += chunk
    value: int = struct.unpack(">i", data)[0]
    return value


def _exec_directly(argv: list[str]) -> None:
    python = os.environ.get(PYTHON_ENV, sys.executable)
    os.execv(python, [python, *argv])


def main(argv: list[str]) -> None:
    name = os.environ.get(SOCKET_ENV, "")
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect("\0" + name[1:] if name.startswith("@") else name)
        umask = os.umask(0)
        os.umask(umask)
        body = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd(), "umask": umask}).encode()
        socket.send_fds(conn, [struct.pack(">I", len(body)) + body], [0, 1, 2])
        pid = _read_int(conn)
    except OSError:
        pid = None
    if not pid:  # no zygote, or it cannot serve this request exactly: the usual way
        _exec_directly(argv)
        return
    for number in FORWARDED:
        signal.signal(number, lambda received, _frame: os.kill(pid, received))
    try:
        status = _read_int(conn)
    except OSError:
        status = None
    if status is None:  # the zygote ended before its child did: wait for the child itself
        try:
            select.select([os.pidfd_open(pid)], [], [])
        except OSError:
            pass
        os._exit(1)
    if status < 0:
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    os._exit(status)


if __name__ == "__main__":
    main(sys.argv[1:])
