"""This network namespace's TCP sockets from /proc/net/tcp and /proc/net/tcp6: the one reader of those tables
(the Spark tests look for what a job listens on, the soak counts each process's established connections)."""

from __future__ import annotations

import socket
from pathlib import Path

LISTEN = "0A"
ESTABLISHED = "01"
"""The state column's values (``st``) for a listening socket and an established connection."""


def tcp_sockets(state: str) -> dict[int, str]:
    """Socket inode -> local address ``ip:port`` of every IPv4 and IPv6 TCP socket in ``state``; a table that
    cannot be read (no IPv6) is skipped."""
    found: dict[int, str] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 9 and fields[3] == state:
                found[int(fields[9])] = decode_address(fields[1])
    return found


def decode_address(hex_addr: str) -> str:
    """``ip:port`` of a table's ``0100007F:1F90`` (IPv4) or 32-hex-digit (IPv6) address."""
    host, port = hex_addr.split(":")
    if len(host) == 8:
        ip = socket.inet_ntop(socket.AF_INET, bytes.fromhex(host)[::-1])
    else:  # /proc/net/tcp6: four little-endian 32-bit words
        words = bytes.fromhex(host)
        ip = socket.inet_ntop(socket.AF_INET6, b"".join(words[i:i + 4][::-1] for i in range(0, 16, 4)))
    return f"{ip}:{int(port, 16)}"
