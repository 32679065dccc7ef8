"""Quorum writes on a primary: how many copies a put needs (needAck), and waiting for them.

Pure state with an injected clock: no sockets, no sleeping. ``Quorum`` is the thin front over the
needAck rules (``decide_need_acks``), the alive-replica accounting (``replica_links``) and the ack
tracker (``ack_tracker``). Callers:

- ``primary_service`` reports link events: ``replica_connected`` / ``replica_reported`` /
  ``replica_disconnected``, and calls ``tick()`` at ``next_wakeup()`` (dead links, slave timeouts).
- the store's put path, through ``replica_ack_step()`` added to its ``DurabilityPolicy`` by the broker:
  before the append, ``admit(max_offset)`` -> IN_SYNC_REPLICAS_NOT_ENOUGH refuses the put (RocketMQ 5
  refuses before appending, so a refused message is not stored); after it, ``wait(end_offset,
  decision)`` -> a future of PUT_OK / FLUSH_SLAVE_TIMEOUT.
- later, role changes: ``fail_pending`` when this broker stops being primary; controller mode adds
  the SyncStateSet (all_ack_in_sync_state_set) beside ``ReplicaLinks`` without changing these rules.

needAck rules (RocketMQ 5 CommitLog, slaveActingMaster flavour; docs/architecture.md,
"Replication and quorum writes"):

    only a SYNC_MASTER put with WAIT=true waits; any other needs 1 copy (the primary's)
    currentInSync = min(alive copies, 1 + replicas acked within ha_max_gap_not_in_sync)
    needAck       = in_sync_replicas
                    with enable_auto_in_sync_replicas: clamp(in_sync_replicas, min_in_sync_replicas,
                    currentInSync) = max(min(in_sync_replicas, currentInSync), min_in_sync_replicas)
    needAck > currentInSync  -> IN_SYNC_REPLICAS_NOT_ENOUGH
    needAck <= 1             -> PUT_OK at once (so the 1/1 default is asynchronous replication)
    else wait up to slave_timeout for needAck-1 replica acks at or past the put's end offset
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from broker_store.clock import Clock
from broker_store.ha.ack_tracker import AckFuture, AckTracker
from broker_store.ha.replica_links import LinkId, ReplicaLinks
from broker_store.ha.settings import HARole, HASettings
from broker_store.store import PutStatus


@dataclass(frozen=True)
class QuorumRules:
    """The settings the needAck decision reads (a slice of ``HASettings``)."""

    role: HARole
    """Only SYNC_MASTER waits for replicas."""
    in_sync_replicas: int
    """Copies a put needs, primary included."""
    min_in_sync_replicas: int
    """Floor of the automatic downgrade."""
    enable_auto_in_sync_replicas: bool
    """Downgrade needAck to the copies currently in sync (not below the floor)."""
    ha_max_gap_not_in_sync: int
    """Bytes a replica may lag the primary's max offset and still count as in sync."""

    @classmethod
    def from_settings(cls, settings: HASettings) -> QuorumRules:
        return cls(settings.role, settings.in_sync_replicas, settings.min_in_sync_replicas,
                   settings.enable_auto_in_sync_replicas, settings.ha_max_gap_not_in_sync)


@dataclass(frozen=True)
class AckDecision:
    """How many copies one put needs, decided before it is appended."""

    need_acks: int
    """Copies, primary included; <= 1 means nothing to wait for."""
    current_in_sync: int
    """min(alive copies, copies within the gap) when decided (for remarks and admin views)."""
    refused: bool = False
    """True: answer IN_SYNC_REPLICAS_NOT_ENOUGH and do not append."""

    @property
    def status(self) -> PutStatus | None:
        """IN_SYNC_REPLICAS_NOT_ENOUGH when refused, else None (append, then wait)."""
        return PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH if self.refused else None

    @property
    def remark(self) -> str:
        if not self.refused:
            return ""
        return (f"{PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH.name}: the put needs {self.need_acks} copies, "
                f"{self.current_in_sync} in sync")


NO_WAIT = AckDecision(need_acks=1, current_in_sync=1)


def decide_need_acks(rules: QuorumRules, *, alive_copies: int, in_sync_copies: int,
                     wait_store_msg_ok: bool = True) -> AckDecision:
    """needAck for one put, from the group's current view (both counts include the primary)."""
    if rules.role is not HARole.SYNC_MASTER or not wait_store_msg_ok:
        return NO_WAIT
    current = max(min(alive_copies, in_sync_copies), 1)
    need = rules.in_sync_replicas
    if rules.enable_auto_in_sync_replicas:
        need = max(min(need, current), rules.min_in_sync_replicas)
    return _decision(need, current, need > current)


@functools.lru_cache(maxsize=256)
def _decision(need_acks: int, current_in_sync: int, refused: bool) -> AckDecision:
    # Decided twice per synchronous put from a handful of distinct counts: build each (frozen) once.
    return AckDecision(need_acks, current_in_sync, refused)


class Quorum:
    """One primary's quorum state: its replica links, the needAck rules, the puts waiting for acks."""

    def __init__(self, settings: HASettings, clock: Clock) -> None:
        self.rules = QuorumRules.from_settings(settings)
        self.links = ReplicaLinks(clock, settings.ha_housekeeping_interval_ms / 1000)
        self.acks = AckTracker(clock, settings.slave_timeout_ms / 1000)
        self._admit_cache: tuple[int, int, int, AckDecision, QuorumRules] | None = None
        """(links version, low, high, decision, rules): a waiting put's decision for primary max offsets
        in [low, high) while the links and rules are unchanged; every synchronous put is admitted, most
        from here (the same decision, built from the same counts)."""
        self.need_all: int | None = None
        """Controller mode with all_ack_in_sync_state_set: every counted SyncStateSet member (this many copies,
        primary included) must ack a waiting put; None = the needAck rules alone."""
        self.on_wakeup_changed: Callable[[], None] | None = None
        """Called when ``next_wakeup()`` may have moved earlier (a new waiter or link), so the I/O layer
        can re-arm its one timer; pure code never sleeps itself."""

    # -- send path ---------------------------------------------------------------------------------

    def admit(self, primary_max_offset: int, *, wait_store_msg_ok: bool = True) -> AckDecision:
        """Before appending: how many copies the put needs, or a refusal (IN_SYNC_REPLICAS_NOT_ENOUGH)."""
        if not wait_store_msg_ok:
            return NO_WAIT
        links = self.links
        cached = self._admit_cache
        if (cached is not None and cached[0] == links.version and cached[1] <= primary_max_offset < cached[2]
                and cached[4] is self.rules):
            return cached[3]
        in_gap, low, high = links.within_gap_range(primary_max_offset, self.rules.ha_max_gap_not_in_sync)
        decision = decide_need_acks(self.rules, alive_copies=1 + links.alive_count, in_sync_copies=1 + in_gap)
        need_all = self.need_all
        if need_all is not None and need_all > decision.need_acks and self.rules.role is HARole.SYNC_MASTER:
            decision = _decision(need_all, decision.current_in_sync, need_all > decision.current_in_sync)
        self._admit_cache = (links.version, low, high, decision, self.rules)
        return decision

    def wait(self, end_offset: int, decision: AckDecision) -> AckFuture:
        """After appending: resolves PUT_OK once needAck-1 replicas acked ``end_offset``, or
        FLUSH_SLAVE_TIMEOUT after the slave timeout. A refused decision resolves to its status."""
        if decision.refused:
            return _resolved(PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH)
        future = self.acks.wait(end_offset, decision.need_acks, self.links.ack_offsets())
        if not future.done() and self.acks.pending == 1:
            # Deadlines only grow (monotonic clock + one timeout), so a waiter can only be the earliest
            # when it is the only one; later ones need no re-arm (one per put would cost a timer check).
            self._wakeup_changed()
        return future

    def share_waiters(self) -> None:
        """From now on, puts between two ``seal_waiters()`` calls share one waiter and future (the HA
        service seals once per loop turn; ``ack_tracker`` explains the trade)."""
        self.acks.share_until_sealed = True

    def seal_waiters(self) -> None:
        self.acks.seal()

    def replica_ack_step(self) -> ReplicaAckStep:
        return ReplicaAckStep(self)

    def fail_pending(self, status: PutStatus = PutStatus.FLUSH_SLAVE_TIMEOUT) -> int:
        """Answer every waiting put now (shutdown, or this broker stops being primary)."""
        return self.acks.fail_all(status)

    # -- link events (primary_service) --------------------------------------------------------------

    def replica_connected(self, link: LinkId) -> None:
        self.links.connected(link)
        self._wakeup_changed()

    def replica_reported(self, link: LinkId, max_offset: int) -> int:
        """A replica's offset report (ack); returns how many waiting puts it completed."""
        self.links.reported(link, max_offset)
        return self.acks.on_acks(self.links.ack_offsets())

    def count_only(self, links: frozenset[LinkId] | None, *, need_all: int | None = None) -> int:
        """Controller mode: count only ``links`` (the SyncStateSet members' links, ``ReplicaLinks.set_counted``)
        and, with all_ack_in_sync_state_set, make waiting puts need ``need_all`` copies. Returns how many waiting
        puts the new count completed."""
        self.need_all = need_all
        self._admit_cache = None
        self.links.set_counted(links)
        return self.acks.on_acks(self.links.ack_offsets())

    def replica_disconnected(self, link: LinkId) -> None:
        """Its acks stop counting; puts it would have covered wait on (and may time out)."""
        self.links.disconnected(link)

    def tick(self) -> list[LinkId]:
        """Time-driven work: drop links silent too long (returned, for the caller to close) and time
        out late puts. Call at ``next_wakeup()`` and whenever convenient; it is idempotent."""
        dead = self.links.expire()
        self.acks.expire()
        return dead

    def _wakeup_changed(self) -> None:
        if self.on_wakeup_changed is not None:
            self.on_wakeup_changed()

    def next_wakeup(self) -> float | None:
        """Clock time at which ``tick`` next has something to do (None: nothing pending)."""
        times = [t for t in (self.links.next_expiry(), self.acks.next_deadline()) if t is not None]
        return min(times) if times else None


class ReplicaAckStep:
    """The replica-ack step of the store's durability policy (``store.durability.AdmissionStep`` shape).

    ``admit`` runs before the append: IN_SYNC_REPLICAS_NOT_ENOUGH refuses the put, nothing is written
    (RocketMQ 5 decides before appending). ``wait`` runs after it and reuses that decision (the store
    calls both for one put in the same loop turn, nothing moves between; decided once, as RocketMQ does);
    without a preceding ``admit`` it decides from the current view. It returns None when the put needs no
    replica (ASYNC_MASTER, 1/1). A put with WAIT=false reaches neither (the policy skips its steps).
    """

    name = "replica-ack"

    def __init__(self, quorum: Quorum) -> None:
        self._quorum = quorum
        self._admitted: AckDecision | None = None

    def admit(self, max_offset: int) -> tuple[PutStatus, str] | None:
        decision = self._admitted = self._quorum.admit(max_offset)
        if not decision.refused:
            return None
        return (PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH,
                f"the put needs {decision.need_acks} copies, {decision.current_in_sync} in sync")

    def wait(self, end_offset: int, wait_store_msg_ok: bool = True) -> AckFuture | None:
        decision, self._admitted = self._admitted, None
        if decision is None or not wait_store_msg_ok:
            decision = self._quorum.admit(end_offset, wait_store_msg_ok=wait_store_msg_ok)
        if decision.need_acks <= 1 and not decision.refused:
            return None
        return self._quorum.wait(end_offset, decision)


def _resolved(status: PutStatus) -> AckFuture:
    future: AckFuture = AckFuture()
    future.set_result(status)
    return future
