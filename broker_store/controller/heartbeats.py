"""Which brokers are alive, as the controller sees them: the latest BROKER_HEARTBEAT (904) of each, dropped
after its timeout without one, or at once when its connection to the controller closes (a killed process's
sockets close with it, so a kill -9 is noticed without waiting for the timeout; a frozen one is noticed by
the timeout). Pure state over the injected ``Clock``: tests advance a ``ManualClock``.

Called by ``controller.service.Controller`` (heartbeats, the scan, connection closes).
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_store.clock import Clock
from broker_store.controller.replicas import BrokerLiveInfo


@dataclass(frozen=True)
class _Live:
    info: BrokerLiveInfo
    cluster: str
    last_seen: float
    """``Clock.monotonic`` of the newest heartbeat."""
    timeout: float | None
    """Seconds without a heartbeat after which the broker is inactive, as the broker sent it; None: the table's
    default, read at each ``expire`` (so a changed default applies to brokers already in the table)."""


class BrokerLiveTable:
    """(broker name, broker id) -> the newest heartbeat. Not thread-safe: the controller's event loop only."""

    def __init__(self, clock: Clock, default_timeout: float) -> None:
        self._clock = clock
        self.default_timeout = default_timeout
        """Seconds: the timeout of brokers that send none (the controller's ``heartbeat_timeout_ms``); may be
        changed at any time, the next ``expire`` uses it."""
        self._table: dict[tuple[str, int], _Live] = {}

    def heartbeat(self, cluster: str, broker_name: str, info: BrokerLiveInfo, timeout: float | None = None) -> bool:
        """Record a heartbeat; True when the broker was not alive before (it joined or came back)."""
        key = (broker_name, info.broker_id)
        new = key not in self._table
        self._table[key] = _Live(info, cluster, self._clock.monotonic(),
                                 None if timeout is None or timeout <= 0 else timeout)
        return new

    def alive(self, broker_name: str) -> dict[int, BrokerLiveInfo]:
        """The live brokers of a group by id (as of the last ``expire``: call it first for an exact view)."""
        return {bid: live.info for (name, bid), live in self._table.items() if name == broker_name}

    def expire(self) -> list[tuple[str, int]]:
        """Drop every broker whose heartbeat is older than its timeout; their (broker name, id)."""
        now = self._clock.monotonic()
        gone = [key for key, live in self._table.items()
                if now - live.last_seen > (self.default_timeout if live.timeout is None else live.timeout)]
        for key in gone:
            del self._table[key]
        return gone

    def drop_address(self, address: str) -> list[tuple[str, int]]:
        """A connection from ``address`` closed: the brokers heartbeating from it are inactive now."""
        gone = [key for key, live in self._table.items() if live.info.address == address]
        for key in gone:
            del self._table[key]
        return gone

    def groups(self) -> set[str]:
        return {name for name, _ in self._table}
