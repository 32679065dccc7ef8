"""The ``host:port`` address format of every setting that names a socket (listen, name servers, HA links).

Owned here so that each settings module (``broker_store.config``, ``broker_store.ha.settings``) can import
it without importing the other.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator


def _check_host_port(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{value!r} is not host:port")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"port of {value!r} must be an integer in 0..65535")
    return value


HostPort = Annotated[str, AfterValidator(_check_host_port)]
"""``host:port``; port 0 asks the OS for a free port (tests)."""


def split_host_port(addr: str) -> tuple[str, int]:
    """``("host", port)`` of a ``host:port`` already validated as ``HostPort``."""
    host, _, port = addr.rpartition(":")
    return host, int(port)
