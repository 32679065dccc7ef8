"""RoleTransition: a role change as explicit, awaited steps between fencing and unfencing.

Owned by ``BrokerServer`` (``BrokerServer.change_role``, the one entry point: tests and operators today,
the controller's NOTIFY_BROKER_ROLE_CHANGED later). It drives ``role.RoleState`` and awaits each step's
I/O in RocketMQ 5's changeToMaster order, so a promoted broker takes no send before its log is settled::

    promote(epoch):  fence (PROMOTING: sends refused SERVICE_NOT_AVAILABLE, pulls up to the confirm offset)
                     -> stop following the old primary (no byte arrives after this)
                     -> truncate the invalid tail           (PromotionSteps.truncate_invalid_tail)
                     -> append the epoch entry               (PromotionSteps.append_epoch_entry)
                     -> rebuild the ConsumeQueues            (PromotionSteps.rebuild_consume_queues)
                     -> adopt orphan topics                  (``adopt_orphans``: broker.orphan_topics)
                     -> start the primary side (HA port, replica-ack step) -> unfence (PRIMARY)
    demote(epoch):   fence (DEMOTING) -> stop the primary side (waiting puts answered FLUSH_SLAVE_TIMEOUT)
                     -> start following -> unfence (REPLICA)

A step that raises aborts the change: the broker ends in REPLICA (takes no writes) and the error reaches
the caller. Changes are serialised: one at a time, in call order. Everything runs on the broker's loop.

The store steps are a narrow Protocol so controller mode can bring its own. ``StorePromotionSteps`` is
what the store supports today: the invalid tail is the undispatched one (a record a replica received only
in part: the primary's next put would land behind it), the ConsumeQueues are rebuilt by dispatching up to
the max offset, and the epoch entry is an injected writer whose default does nothing: static groups have
no epoch file. ``ControllerPromotionSteps`` is controller mode's: the confirm offset is raised to the max
offset before the tail is cut (pending records kept), and the epoch file gets the new epoch's entry. A
rejoining replica's truncation to the consistent point is not a transition step: its HA client does it
in the epoch handshake (``ha.epoch_replica_client``), each time it connects to a primary.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from broker_store.broker.role import BrokerRole, RoleState
from broker_store.protocol.errors import RocketMQError, StoreError
from broker_store.store.commit_log import describe_cut

if TYPE_CHECKING:
    from broker_store.store import MessageStore
    from broker_store.store.epoch_store import EpochStore

log = logging.getLogger(__name__)


class PromotionSteps(Protocol):
    """The store I/O a promotion awaits while fenced, called once each, in this order."""

    async def truncate_invalid_tail(self) -> int:
        """Cut the CommitLog (and its ConsumeQueue entries) past the last valid record; return the max
        offset after the cut: the new epoch's start offset."""
        ...

    async def append_epoch_entry(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (the epoch file), durably, before any put."""
        ...

    async def rebuild_consume_queues(self) -> None:
        """Return once every record below the max offset is dispatched into its ConsumeQueue."""
        ...


class ReplicationSide(Protocol):
    """The replication side a transition switches (``broker.replication.BrokerReplication``)."""

    async def stop_following(self) -> None:
        """Stop the replica's HA client, if any, and return once it wrote its last byte."""
        ...

    async def become(self, role: BrokerRole) -> None:
        """Run the side of ``role`` (primary: HA port and replica-ack step; replica: the HA client)."""
        ...


EpochEntryWriter = Callable[[int, int], Awaitable[None]]
"""``writer(epoch, start_offset)``: appends one epoch entry durably."""


async def no_epoch_file(_epoch: int, _start_offset: int) -> None:
    """Static groups keep no epoch file: their epoch stays 0 and nothing is recorded."""


class StorePromotionSteps:
    """``PromotionSteps`` over today's ``MessageStore`` (see the module docstring); store calls run on a
    worker thread (they fsync and take the store lock)."""

    def __init__(self, store: MessageStore, *, epoch_entry: EpochEntryWriter = no_epoch_file) -> None:
        self._store = store
        self._epoch_entry = epoch_entry

    async def truncate_invalid_tail(self) -> int:
        return await asyncio.to_thread(self._truncate_undispatched_tail)

    def _truncate_undispatched_tail(self) -> int:
        store = self._store
        store.index_commit_log()  # every complete record received is kept
        dispatched, max_offset = store.dispatched_physical_offset, store.max_physical_offset
        if dispatched < max_offset:
            log.warning("promotion: %s", describe_cut(dispatched, max_offset, "of an incomplete record"))
            store.truncate_commit_log(dispatched)
        return store.max_physical_offset

    async def append_epoch_entry(self, epoch: int, start_offset: int) -> None:
        await self._epoch_entry(epoch, start_offset)

    async def rebuild_consume_queues(self) -> None:
        await asyncio.to_thread(self._store.index_commit_log)
        store = self._store
        if store.dispatched_physical_offset < store.max_physical_offset:
            raise StoreError(f"ConsumeQueues dispatched to {store.dispatched_physical_offset}, below the max "
                             f"offset {store.max_physical_offset}, after the rebuild")


class ControllerPromotionSteps(StorePromotionSteps):
    """Controller mode's ``PromotionSteps`` over an ``EpochStore`` (docs/architecture.md, "Controller and name server":
    changeToMaster): the confirm offset is raised to the max offset first (the old primary's pending records are kept,
    never dropped), so only a record received in part stays undispatched and is cut; the epoch entry is (new epoch, max
    offset) after cutting entries at or past it, in the epoch file; the rebuild dispatches to the max offset."""

    def __init__(self, epoch_store: EpochStore) -> None:
        super().__init__(epoch_store.store, epoch_entry=self._begin_epoch)
        self._epoch_store = epoch_store

    def _truncate_undispatched_tail(self) -> int:
        store = self._store
        store.set_confirm_offset(store.max_physical_offset)  # indexes every complete record received
        dispatched, max_offset = store.dispatched_physical_offset, store.max_physical_offset
        if dispatched < max_offset:
            log.warning("promotion: %s", describe_cut(dispatched, max_offset, "of an incomplete record"))
            self._epoch_store.truncate_to(dispatched)
        return store.max_physical_offset

    async def _begin_epoch(self, epoch: int, start_offset: int) -> None:
        await asyncio.to_thread(self._epoch_store.begin_epoch, epoch, start_offset)


class RoleTransition:
    """Runs role changes (see the module docstring)."""

    def __init__(self, role: RoleState, replication: ReplicationSide, steps: PromotionSteps, *,
                 adopt_orphans: Callable[[], object] = lambda: None) -> None:
        """``adopt_orphans`` runs on the loop once the ConsumeQueues are rebuilt: topics with messages but no
        config get one (``broker.orphan_topics``), before any pull or send is served as PRIMARY."""
        self._role = role
        self._replication = replication
        self._steps = steps
        self._adopt_orphans = adopt_orphans
        self._lock = asyncio.Lock()

    async def change_role(self, role: BrokerRole, *, epoch: int | None = None) -> None:
        """Promote or demote (``epoch`` None: the one in force). Raises ``role.StaleEpochError`` for an older
        epoch (nothing changed) and the failing step's error after an abort."""
        if role is BrokerRole.PRIMARY:
            await self.promote(epoch)
        else:
            await self.demote(epoch)

    async def promote(self, epoch: int | None = None) -> None:
        async with self._lock:
            if not self._role.begin_promotion(epoch):
                return
            await self._fenced(self._promotion_steps)

    async def demote(self, epoch: int | None = None) -> None:
        async with self._lock:
            if not self._role.begin_demotion(epoch):
                return
            await self._fenced(lambda: self._replication.become(BrokerRole.REPLICA))

    async def _promotion_steps(self) -> None:
        await self._replication.stop_following()
        start_offset = await self._steps.truncate_invalid_tail()
        await self._steps.append_epoch_entry(self._role.epoch, start_offset)
        await self._steps.rebuild_consume_queues()
        self._adopt_orphans()
        await self._replication.become(BrokerRole.PRIMARY)

    async def _fenced(self, steps: Callable[[], Awaitable[None]]) -> None:
        """Run ``steps`` while fenced; unfence after, or abort to REPLICA (replication side included)."""
        try:
            await steps()
        except BaseException as exc:
            stage = self._role.stage
            self._role.abort()
            if isinstance(exc, asyncio.CancelledError):  # the broker is stopping: nothing to restore
                raise
            log.exception("role change aborted while %s: the broker stays REPLICA and takes no writes", stage.value)
            try:
                await self._replication.become(BrokerRole.REPLICA)
            except (RocketMQError, OSError):
                log.exception("after the aborted role change, the replica side did not start either")
            raise
        self._role.finish()
