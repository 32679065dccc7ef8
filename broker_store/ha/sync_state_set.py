"""The SyncStateSet on a controller-mode primary: who joins, who leaves, and the confirm offset it implies.

Pure state on the injected ``Clock``: no sockets, no sleeping. ``epoch_primary_service`` feeds it link events
(``connected`` / ``acked`` / ``disconnected``, keyed by the replica's broker id from its handshake), calls
``tick`` at ``next_wakeup``, asks ``proposal`` for a change to send to the controller (CONTROLLER_ALTER_SYNC_
STATE_SET through an injected alterer), reports the answer with ``alter_done``, and reads ``confirm_offset``
to advance the store's. The broker's role change sets the set the controller elected with
``set_sync_state_set``. RocketMQ 5's AutoSwitchHAService rules (docs/architecture.md, "Controller and name
server"), with its fixes::

    join    a connected replica (not an async learner) whose ack >= the confirm offset and >= the start offset
            of the primary's current epoch (it holds everything confirmed, and something of this epoch), and
            which does not meet the leave rule below (so a member removed for lagging does not rejoin at once)
    leave   a member (not the primary) that is disconnected, or whose ack has not caught up with the primary
            for ``max_not_catchup`` seconds (ha_max_time_slave_not_catchup_ms): caught up at time t means an
            ack >= the primary's max offset as of t (a member one round trip behind under steady load keeps
            catching up with the max offset of its previous ack)
    counted while an alter is in flight, the union of the current and the proposed sets counts, for the confirm
            offset and for quorum acks (apache/rocketmq#5663: a member being added may already be relied on by
            the controller's next election, one being removed still is until the controller agrees)
    confirm min(primary max offset, acks of the counted members), never lowered; frozen (kept as it is) while
            a counted member is disconnected or has not acked on its link yet (apache/rocketmq#6662: a member
            that lost its link may hold less than the others; it is removed first, then the offset moves)

Not RocketMQ's: the confirm offset is held this way whether or not ``all_ack_in_sync_state_set`` is on (RocketMQ
shows consumers the primary's max offset unless it is): records become visible once every counted member
holds them, so no consumer reads a record a failover may cut. ``all_ack_in_sync_state_set`` changes only how many
acks a put waits for (``quorum``: every counted member).

Contract: not thread-safe; call from the one event-loop thread that runs the HA links.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from broker_store.clock import Clock
from broker_store.protocol.controller import SyncStateSet


@dataclass
class _Replica:
    link: Hashable
    """The connection now carrying this broker id's acks (a reconnect replaces it)."""
    async_learner: bool
    ack: int = -1
    """Last acked max offset on ``link`` (-1 until the first ack)."""
    mark_time: float | None = None
    mark_offset: int = 0
    """(mark_time, mark_offset): the primary's max offset when the replica was last seen behind; an ack reaching
    it proves the replica had caught up with the primary as of mark_time."""


class SyncStateSetTracker:
    """One primary's SyncStateSet bookkeeping (see the module docstring)."""

    def __init__(self, clock: Clock, *, self_id: int, sync_state_set: SyncStateSet, max_not_catchup: float,
                 confirm_offset: int, epoch_start_offset: int) -> None:
        if max_not_catchup <= 0:
            raise ValueError(f"max_not_catchup must be > 0 seconds, got {max_not_catchup}")
        self._clock = clock
        self.self_id = self_id
        self._max_not_catchup = max_not_catchup
        self._replicas: dict[int, _Replica] = {}
        self._caught_up: dict[int, float] = {}
        """Broker id -> clock time it was last known caught up (kept across reconnects)."""
        self._set = SyncStateSet(frozenset(), 0)
        self._in_flight: frozenset[int] | None = None
        self._confirm = confirm_offset
        self.epoch_start_offset = epoch_start_offset
        """Start offset of the primary's current epoch (a joiner's ack must reach it)."""
        self.version = 0
        """Bumped when the counted members or their links change, so the quorum can re-read them."""
        self.set_sync_state_set(sync_state_set)

    # -- the controller's view ----------------------------------------------------------------------------

    @property
    def sync_state_set(self) -> SyncStateSet:
        return self._set

    @property
    def in_flight(self) -> frozenset[int] | None:
        """The set an alter in flight proposes (None: none in flight)."""
        return self._in_flight

    def set_sync_state_set(self, sync_state_set: SyncStateSet) -> None:
        """The controller's set (an election's answer, a notification, or an alter's result); the primary is
        always counted. Members new to the tracker start their not-caught-up time now."""
        now = self._clock.monotonic()
        for member in sync_state_set.members:
            self._caught_up.setdefault(member, now)
        self._set = SyncStateSet(sync_state_set.members | {self.self_id}, sync_state_set.epoch)
        self._bump()

    def counted(self) -> frozenset[int]:
        """Members whose acks count: the set, united with the proposed one while an alter is in flight."""
        if self._in_flight is None:
            return self._set.members
        return self._set.members | self._in_flight

    def proposal(self) -> frozenset[int] | None:
        """The set to ask the controller for now (joins and leaves applied), or None: no change, or an alter is
        already in flight (one at a time, each naming the set epoch it saw)."""
        if self._in_flight is not None:
            return None
        members = set(self._set.members)
        for broker_id in list(members):
            if broker_id != self.self_id and (broker_id not in self._replicas or self._lagging(broker_id)):
                members.discard(broker_id)
        for broker_id, replica in self._replicas.items():
            # A joiner must also pass the stay rule: the confirm offset it reached may be one it held back
            # itself (it counts while it is a member), so "ack >= confirm" alone would re-admit a laggard.
            if (broker_id not in self._set.members and not replica.async_learner and replica.ack >= 0
                    and replica.ack >= self._confirm and replica.ack >= self.epoch_start_offset
                    and not self._lagging(broker_id)):
                members.add(broker_id)
        proposed = frozenset(members)
        return None if proposed == self._set.members else proposed

    def _lagging(self, broker_id: int) -> bool:
        """Not known to have caught up within ``max_not_catchup`` (never caught up counts as lagging)."""
        caught_up = self._caught_up.get(broker_id)
        return caught_up is None or self._clock.monotonic() - caught_up >= self._max_not_catchup

    def alter_started(self, proposed: frozenset[int]) -> None:
        self._in_flight = proposed | {self.self_id}
        self._bump()

    def alter_done(self, result: SyncStateSet | None) -> None:
        """The alter's answer: the controller's new set, or None (refused, failed, unreachable: the old set
        stands and the next ``proposal`` asks again)."""
        self._in_flight = None
        if result is not None:
            self.set_sync_state_set(result)
        else:
            self._bump()

    # -- link events -----------------------------------------------------------------------------------------

    def connected(self, broker_id: int, link: Hashable, *, async_learner: bool = False) -> None:
        """A replica finished its handshake on ``link`` (replacing an older link of the same broker id)."""
        self._replicas[broker_id] = _Replica(link, async_learner)
        self._bump()

    def acked(self, broker_id: int, link: Hashable, offset: int, primary_max: int) -> None:
        """The replica on ``link`` holds every byte below ``offset``; ``primary_max`` is the primary's max offset
        now. Acks of a replaced link are ignored."""
        replica = self._replicas.get(broker_id)
        if replica is None or replica.link != link:
            return
        now = self._clock.monotonic()
        replica.ack = offset
        if offset >= primary_max:
            self._caught_up[broker_id] = now
            replica.mark_time = None
            return
        if replica.mark_time is not None and offset >= replica.mark_offset:
            self._caught_up[broker_id] = max(self._caught_up.get(broker_id, replica.mark_time), replica.mark_time)
            replica.mark_time = None
        if replica.mark_time is None:
            replica.mark_time, replica.mark_offset = now, primary_max

    def disconnected(self, broker_id: int, link: Hashable) -> None:
        """``link`` closed; a replaced link's close is ignored."""
        replica = self._replicas.get(broker_id)
        if replica is not None and replica.link == link:
            del self._replicas[broker_id]
            self._bump()

    def ack_of(self, broker_id: int) -> int | None:
        """The connected replica's last ack (-1 before one), None when not connected."""
        replica = self._replicas.get(broker_id)
        return None if replica is None else replica.ack

    def link_of(self, broker_id: int) -> Hashable | None:
        replica = self._replicas.get(broker_id)
        return None if replica is None else replica.link

    # -- the confirm offset ------------------------------------------------------------------------------------

    def confirm_offset(self, primary_max: int) -> int:
        """The confirm offset for a primary at ``primary_max`` (see the module docstring); also recorded as the
        one joiners must reach."""
        acks = [primary_max]
        for broker_id in self.counted():
            if broker_id == self.self_id:
                continue
            replica = self._replicas.get(broker_id)
            if replica is None or replica.ack < 0:
                return self._confirm  # frozen: this member may hold less than the others
            acks.append(replica.ack)
        self._confirm = max(self._confirm, min(acks))
        return self._confirm

    @property
    def frozen_by(self) -> list[int]:
        """Counted members that freeze the confirm offset now (admin views)."""
        return sorted(m for m in self.counted() if m != self.self_id
                      and (m not in self._replicas or self._replicas[m].ack < 0))

    # -- time ---------------------------------------------------------------------------------------------------

    def next_wakeup(self) -> float | None:
        """Clock time at which a member would have gone too long without catching up (None: no such member)."""
        times = [self._caught_up.get(m, 0.0) + self._max_not_catchup for m in self._set.members
                 if m != self.self_id and m in self._replicas]
        return min(times) if times else None

    def _bump(self) -> None:
        self.version += 1
