"""Alive-replica accounting on a primary: its replicas' HA links, their acked offsets and last contact.

Pure state with an injected clock, owned by ``Quorum`` and fed by ``primary_service`` (one call per
link event). This is the group's view of its live members that automatic downgrade needs (RocketMQ's
slaveActingMaster-style alive count) and where replica acks come from. Later wiring: the admin
command that lists a group's members reads ``snapshot()``; controller mode feeds the same per-link
acks into SyncStateSet membership.

Contract: not thread-safe; call from the one event-loop thread that runs the HA links.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from broker_store.clock import Clock
from broker_store.ha.errors import HAProtocolError
from broker_store.protocol.ha_status import replica_in_sync

LinkId = Hashable
"""Whatever names one replica connection (the I/O layer uses its peer address and a counter)."""


@dataclass(frozen=True)
class ReplicaLinkState:
    """What the primary knows of one connected replica."""

    link_id: LinkId
    """The connection's name, as passed to ``connected``."""
    ack_offset: int
    """The replica's last reported max offset (-1 before its first report): it holds every byte below."""
    last_heard: float
    """Clock time of the last report or connect (the link is dead once this is too old)."""


class ReplicaLinks:
    """Connected replicas with their acks; a link silent for ``dead_after`` seconds counts as dead.

    ``dead_after`` is the housekeeping interval: replicas report at least every heartbeat interval
    (and after each appended batch), so silence that long means a dead link; ``expire`` drops it.
    """

    def __init__(self, clock: Clock, dead_after: float) -> None:
        if dead_after <= 0:
            raise ValueError(f"dead_after must be > 0 seconds, got {dead_after}")
        self._clock = clock
        self._dead_after = dead_after
        self._links: dict[LinkId, ReplicaLinkState] = {}
        self._counted: frozenset[LinkId] | None = None
        """Controller mode: only these links count (SyncStateSet members); None = every link (classic)."""
        self._ack_offsets: list[int] | None = None
        self.version = 0
        """Bumped by every change of the links or their acks, so callers may cache what they derive."""

    def _changed(self) -> None:
        self._ack_offsets = None
        self.version += 1

    def set_counted(self, links: frozenset[LinkId] | None) -> None:
        """Count only ``links`` in ``alive_count``, ``ack_offsets`` and the in-gap counts (controller mode: the
        links of the SyncStateSet's members, so a put is acknowledged only by replicas an election may pick);
        None counts every link. Links may be named before they connect or after they closed."""
        if links != self._counted:
            self._counted = links
            self._changed()

    def _counting(self) -> list[ReplicaLinkState]:
        if self._counted is None:
            return list(self._links.values())
        return [s for link, s in self._links.items() if link in self._counted]

    def connected(self, link_id: LinkId) -> None:
        """A replica connected; it is alive but acks nothing until its first report."""
        if link_id in self._links:
            raise ValueError(f"replica link {link_id!r} is already connected")
        self._links[link_id] = ReplicaLinkState(link_id, -1, self._clock.monotonic())
        self._changed()

    def reported(self, link_id: LinkId, max_offset: int) -> None:
        """The replica reported its max offset (an ack of every byte below it, and a sign of life).

        Raises ``HAProtocolError`` if the offset went back on the same link: a replica truncates only
        before it reports, so that is a broken peer; the caller closes the link.
        """
        state = self._links.get(link_id)
        if state is None:
            raise KeyError(f"replica link {link_id!r} is not connected")
        if max_offset < state.ack_offset:
            raise HAProtocolError(f"replica link {link_id!r} reported offset {max_offset} after "
                                  f"{state.ack_offset}: offsets of one link never go back")
        self._links[link_id] = ReplicaLinkState(link_id, max_offset, self._clock.monotonic())
        self._changed()

    def disconnected(self, link_id: LinkId) -> None:
        """The link closed (either side); its acks stop counting at once. Unknown ids are ignored."""
        if self._links.pop(link_id, None) is not None:
            self._changed()

    def expire(self) -> list[LinkId]:
        """Drop and return the links silent for ``dead_after`` or longer (the caller closes them).

        Dead from ``next_expiry()`` on, that instant included: a timer armed for it always finds work (with
        a strict limit, a clock standing on that instant, as a ``ManualClock`` does, re-armed it forever)."""
        limit = self._clock.monotonic() - self._dead_after
        dead = [link for link, state in self._links.items() if state.last_heard <= limit]
        for link in dead:
            del self._links[link]
        if dead:
            self._changed()
        return dead

    def next_expiry(self) -> float | None:
        """Clock time at which the quietest link would count as dead (None without links)."""
        if not self._links:
            return None
        return min(s.last_heard for s in self._links.values()) + self._dead_after

    @property
    def alive_count(self) -> int:
        """Counted replicas currently connected and not silent too long (call ``expire`` first for exactness)."""
        return len(self._links) if self._counted is None else len(self._counting())

    def ack_offsets(self) -> list[int]:
        """Acked offsets of the connected replicas, highest first (-1 for a replica yet to report).

        The list is cached until the links change (every synchronous put reads it): do not modify it."""
        if self._ack_offsets is None:
            self._ack_offsets = sorted((s.ack_offset for s in self._counting()), reverse=True)
        return self._ack_offsets

    def within_gap(self, primary_max: int, max_gap: int) -> int:
        """Replicas in sync by ``protocol.ha_status.replica_in_sync``: acked, less than ``max_gap`` bytes behind
        ``primary_max`` (RocketMQ's strict <)."""
        return sum(1 for s in self._counting() if replica_in_sync(s.ack_offset, primary_max, max_gap))

    def within_gap_range(self, primary_max: int, max_gap: int) -> tuple[int, int, int]:
        """``within_gap(primary_max, max_gap)`` and the range [low, high) of primary max offsets that give
        the same count while the links do not change (``replica_in_sync`` solved for the primary's max offset:
        an ack counts for primary_max in [0, ack + max_gap) when it is >= 0)."""
        low, high, count = 0, 2**63, 0
        for s in self._counting():
            if s.ack_offset < 0:
                continue
            edge = s.ack_offset + max_gap
            if primary_max < edge:
                count += 1
                high = min(high, edge)
            else:
                low = max(low, edge)
        return count, low, high

    def snapshot(self) -> list[ReplicaLinkState]:
        """Every connected replica's state (admin views, tests)."""
        return list(self._links.values())
