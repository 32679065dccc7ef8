"""Client-side unique message ids (the UNIQ_KEY property), laid out like Java's MessageClientIDSetter.

Called by the producer for every message without a UNIQ_KEY. Layout, 16 bytes as 32 upper-case hex::

    +--------+--------+-----------+------------------------+---------+
    | ip 4   | pid 2  | random 4  | ms since month start 4 | count 2 |
    +--------+--------+-----------+------------------------+---------+
    ip: this host's IPv4; pid: low 16 bits; random: per process (Java: class-loader hash);
    month start in local time, as Java's Calendar; count wraps at 2**16.
"""

from __future__ import annotations

import datetime
import itertools
import os
import socket
import struct
import threading

from broker_store.clock import SYSTEM_CLOCK, Clock, ThreadClock, wall_ms


def local_ipv4() -> bytes:
    """Best-effort IPv4 of this host (the interface that routes outwards), 127.0.0.1 if none."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        # connect() on UDP only picks a route; nothing is sent.
        sock.connect(("10.255.255.255", 1))
        return socket.inet_aton(sock.getsockname()[0])
    except OSError:
        return socket.inet_aton("127.0.0.1")
    finally:
        sock.close()


def _month_bounds_ms(now_ms: int) -> tuple[int, int]:
    now = datetime.datetime.fromtimestamp(now_ms / 1000).astimezone()
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    if start.month == 12:
        nxt = start.replace(year=start.year + 1, month=1)
    else:
        nxt = start.replace(month=start.month + 1)
    return int(start.timestamp() * 1000), int(nxt.timestamp() * 1000)


class UniqueIdGenerator:
    """Thread-safe generator of UNIQ_KEY values. ``clock``: whose wall time the ids carry (either side's: only
    ``time`` is read)."""

    def __init__(self, *, ip: bytes | None = None, pid: int | None = None,
                 clock: Clock | ThreadClock = SYSTEM_CLOCK) -> None:
        self._ip = ip
        self._pid = pid
        self._clock = clock
        self._lock = threading.Lock()
        self._prefix_pid = -1
        self._prefix = ""
        self._counter = itertools.count()
        self._month_start = 0
        self._next_month_start = 0

    def _refresh_prefix(self) -> None:
        pid = os.getpid() if self._pid is None else self._pid
        ip = self._ip if self._ip is not None else local_ipv4()
        self._prefix = (ip[:4] + struct.pack(">H", pid & 0xFFFF) + os.urandom(4)).hex().upper()
        self._prefix_pid = os.getpid()

    def create(self) -> str:
        now = wall_ms(self._clock)
        with self._lock:
            # A forked child (Spark python workers) must not reuse its parent's random part.
            if self._prefix_pid != os.getpid():
                self._refresh_prefix()
            if now >= self._next_month_start or now < self._month_start:
                self._month_start, self._next_month_start = _month_bounds_ms(now)
            span = (now - self._month_start) & 0xFFFFFFFF
            count = next(self._counter) & 0xFFFF
            prefix = self._prefix
        return prefix + struct.pack(">IH", span, count).hex().upper()


_default = UniqueIdGenerator()


def create_unique_id() -> str:
    """A fresh UNIQ_KEY from the process-wide generator."""
    return _default.create()
