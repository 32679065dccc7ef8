"""``python -m <module>`` for Spark's Python workers through the job's zygote (``jobs.worker_zygote``), and the
requests' format (the zygote imports it from here: this module needs nothing but the standard library).

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

SOCKET_ENV = "REPLICATOR_WORKER_ZYGOTE"
"""The zygote's socket for ``worker_python.sh`` (an abstract socket name, written with a leading ``@``)."""
PYTHON_ENV = "REPLICATOR_WORKER_PYTHON"  # jobs.worker_python.PYTHON_ENV (not imported: this runs without the project)
HEADER = struct.Struct(">I")
STATUS = struct.Struct(">i")
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def _read_int(conn: socket.socket) -> int | None:
    data = b""
    while len(data) < 4:
        chunk = conn.recv(4 - len(data))
        if not chunk:
            return None
        data += chunk
    value: int = STATUS.unpack(data)[0]
    return value


def _exec_directly(argv: list[str]) -> None:
    python = os.environ.get(PYTHON_ENV, sys.executable)
    os.execv(python, [python, *argv])


def encode_request(argv: list[str], env: dict[str, str], cwd: str, umask: int) -> bytes:
    """A request as the zygote reads it: ``HEADER`` (the body's length), then the JSON body. It travels with the
    client's standard streams (SCM_RIGHTS); the zygote answers ``STATUS``: the child's pid (0: not served), then
    its ``jobs.worker_zygote.exit_status``."""
    body = json.dumps({"argv": argv, "env": env, "cwd": cwd, "umask": umask}).encode()
    return HEADER.pack(len(body)) + body


def socket_address(value: str) -> str:
    """The address to bind or connect for ``SOCKET_ENV``'s value (``@name``: the abstract socket ``name``)."""
    return "\0" + value[1:] if value.startswith("@") else value


def main(argv: list[str]) -> None:
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(socket_address(os.environ.get(SOCKET_ENV, "")))
        umask = os.umask(0)
        os.umask(umask)
        request = encode_request(argv, dict(os.environ), os.getcwd(), umask)
        sent = socket.send_fds(conn, [request], [0, 1, 2])
        conn.sendall(request[sent:])
        pid = _read_int(conn)
    except OSError:
        pid = None
    if not pid:  # no zygote, or it cannot serve this request exactly: the usual way
        _exec_directly(argv)
        return
    def forward(received: int, _frame: object) -> None:
        try:
            os.kill(pid, received)
        except OSError:  # it has just ended: its status follows
            pass

    for number in FORWARDED:
        signal.signal(number, forward)
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
