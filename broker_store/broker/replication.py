"""BrokerReplication: a broker's side of its group's replication, switched with its runtime role.

Owned by ``BrokerServer``, which starts it after the store and stops it before the store. While the
broker is PRIMARY it runs the quorum (``ha.quorum.Quorum``), the HA port (``ha.primary_service``) and
the replica-ack step of the store's durability policy, so every put's ``PutResult.durable`` covers the
replica acks and a put the quorum cannot satisfy is refused before the append. While REPLICA it runs
``ha.replica_client.ReplicaClient`` into the store (the store indexes what arrives: the replica builds
its own ConsumeQueues). ``broker.role_transition.RoleTransition`` drives the switch while the broker is
fenced, awaiting each call: ``stop_following`` stops the client before a promotion settles the log,
``become(PRIMARY)`` starts the primary side, ``become(REPLICA)`` stops the primary side (waiting puts are
answered FLUSH_SLAVE_TIMEOUT) and starts the client.

Whom a replica follows: ``ha.ha_primary_address`` when configured (it overrides), else the primary's HA
address the name server names in its REGISTER_BROKER answer (``follow_primary``, called by the
registration after each answer, as RocketMQ's slaves take haServerAddr when haMasterAddress is unset).
Until one is known the replica serves reads and ships nothing; a learnt address that changes (the primary
restarted elsewhere) restarts the client against the new one.

Controller mode (``epoch_store`` given: ``enable_controller_mode``): the same switches run the epoch link
instead (``ha.epoch_primary_service`` / ``ha.epoch_replica_client`` over the ``EpochStore``), selected here
for both ends; the classic link is untouched for static groups. Two narrow seams for the controller client:
``set_sync_state_set(members, epoch)`` tells the primary side the set the controller holds (an election's or
a notification's answer; kept across role switches), and ``sync_state_set_alterer`` is how the primary side
asks for a change (CONTROLLER_ALTER_SYNC_STATE_SET); unset, the primary applies its own proposals.

Contract: everything runs on the broker's event loop; switches (role changes, re-following a newly named
primary) are serialised: one at a time, in the order they were asked for.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

from broker_store.broker.role import BrokerRole, RoleStage, RoleState
from broker_store.clock import Clock
from broker_store.ha.epoch_primary_service import EpochPrimaryService, SyncStateSetAlterer
from broker_store.ha.epoch_replica_client import EpochReplicaClient
from broker_store.ha.primary_service import PrimaryService
from broker_store.ha.quorum import Quorum, ReplicaAckStep
from broker_store.ha.replica_client import ReplicaClient
from broker_store.ha.settings import HARole, HASettings
from broker_store.protocol.controller import SyncStateSet
from broker_store.protocol.ha_status import HALinkStatus, HAStatus, replica_in_sync
from broker_store.store import MessageStore
from broker_store.store.epoch_store import EpochStore

log = logging.getLogger(__name__)


class BrokerReplication:
    """The primary or replica side of the broker's group replication (see the module docstring)."""

    def __init__(self, store: MessageStore, role: RoleState, settings: HASettings, *, host: str, ha_port: int,
                 advertised_ip: str, clock: Clock, epoch_store: EpochStore | None = None) -> None:
        self._store = store
        self._epoch_store = epoch_store
        self._sync_state_set: SyncStateSet | None = None
        self.sync_state_set_alterer: SyncStateSetAlterer | None = None
        """Controller mode: ``alterer(new_members, set_epoch) -> SyncStateSet`` sending CONTROLLER_ALTER_SYNC_STATE_SET
        (the controller client sets it); None: the primary side applies its proposals itself."""
        self._role = role
        self._settings = settings
        self._host, self._ha_port = host, ha_port
        self._advertised_ip = advertised_ip
        self._clock = clock
        self._peers = settings.peer_policy()  # reads ha.ha_secret_file: a bad one stops the start (ConfigError)
        self._quorum: Quorum | None = None
        self._service: PrimaryService | None = None
        self._step: ReplicaAckStep | None = None
        self._client: ReplicaClient | None = None
        self._switches: asyncio.Task[None] | None = None
        self._started = False
        self.ha_address = ""
        """``ip:port`` replicas dial while this broker is primary (registered as haServerAddr); ""."""
        self._learnt_primary: str | None = None
        """The primary's HA address from the last registration answer naming one (replica)."""
        store.add_arrival_listener(self._on_arrival)
        store.add_write_listener(self._on_write)

    @property
    def quorum(self) -> Quorum | None:
        """The quorum while primary (None while replica)."""
        return self._quorum

    @property
    def service(self) -> PrimaryService | None:
        """The HA port while primary (an ``EpochPrimaryService`` in controller mode)."""
        return self._service

    @property
    def sync_state_set(self) -> SyncStateSet | None:
        """Controller mode: the SyncStateSet the primary side holds now (or was last told), else None."""
        if isinstance(self._service, EpochPrimaryService):
            return self._service.tracker.sync_state_set
        return self._sync_state_set

    def set_sync_state_set(self, members: frozenset[int], epoch: int) -> None:
        """Controller mode: the controller's SyncStateSet for this group (call on election answers and role-change
        notifications); a running primary side takes it at once, a later one starts with it."""
        self._sync_state_set = SyncStateSet(frozenset(members), epoch)
        if isinstance(self._service, EpochPrimaryService):
            self._service.set_sync_state_set(self._sync_state_set)

    @property
    def client(self) -> ReplicaClient | None:
        """The HA client while replica (None while primary)."""
        return self._client

    @property
    def primary_ha_address(self) -> str | None:
        """The HA address this broker follows while replica: the configured one, else the learnt one."""
        return self._settings.ha_primary_address or self._learnt_primary

    @property
    def awaiting_primary(self) -> bool:
        """True while this broker is a replica that knows no primary HA address to follow yet."""
        return self._role.role is BrokerRole.REPLICA and self.primary_ha_address is None

    def follow_primary(self, ha_address: str) -> None:
        """The name server named the group primary's HA address. Ignored when ``ha.ha_primary_address`` is
        configured; a new address (re)starts the replica client against it while this broker is replica."""
        if self._settings.ha_primary_address is not None or ha_address == self._learnt_primary:
            return
        log.info("HA: the primary's HA address is %s (was %s)", ha_address, self._learnt_primary or "unknown")
        self._learnt_primary = ha_address
        if self._started and self._following():
            self._schedule(self._refollow).add_done_callback(_log_failed_switch)

    def _following(self) -> bool:
        """REPLICA, or DEMOTING (its ``become(REPLICA)`` starts the client): a promotion stops following."""
        return self._role.stage is RoleStage.REPLICA or self._role.stage is RoleStage.DEMOTING

    async def _refollow(self) -> None:
        if self._following():
            await self._stop_replica()
            await self._start_replica()

    async def start(self) -> None:
        self._started = True
        await self._become(self._role.role)

    async def stop(self) -> None:
        self._started = False
        if self._switches is not None:
            await asyncio.wait([self._switches])
        await self._stop_primary()
        await self._stop_replica()

    # -- role switches (``role_transition.ReplicationSide``) -----------------------------------------

    async def stop_following(self) -> None:
        """Stop the HA client (a promotion begins); returns once it stopped writing into the store."""
        await self._schedule(self._stop_replica)

    async def become(self, role: BrokerRole) -> None:
        """Run the side of ``role``; returns once it runs (or raises why it could not start)."""
        if role is BrokerRole.PRIMARY:
            self._learnt_primary = None  # the group's primary changed: whatever was learnt is stale
        await self._schedule(lambda: self._become(role))

    def _schedule(self, step: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        """Run ``step`` after every switch scheduled before it (switches never interleave; one that failed
        does not stop the next: its error went to whoever awaited it)."""
        previous = self._switches

        async def switch() -> None:
            if previous is not None:
                await asyncio.wait([previous])
            if self._started:
                await step()

        task = self._switches = asyncio.get_running_loop().create_task(switch(), name="ha-switch")
        return task

    async def _become(self, role: BrokerRole) -> None:
        if role is BrokerRole.PRIMARY:
            await self._stop_replica()
            await self._start_primary()
        else:
            await self._stop_primary()
            await self._start_replica()

    async def _start_primary(self) -> None:
        if self._service is not None:
            return
        quorum = Quorum(self._settings, self._clock)
        service: PrimaryService
        if self._epoch_store is not None:
            epoch_service = EpochPrimaryService(
                self._epoch_store, quorum, self._settings, host=self._host, port=self._ha_port, clock=self._clock,
                self_id=self._role.replica_id, sync_state_set=self._sync_state_set, alterer=self._alter,
                peers=self._peers)
            epoch_service.on_sync_state_set_changed = self._remember_sync_state_set
            service = epoch_service
        else:
            service = PrimaryService(self._store, quorum, self._settings, host=self._host, port=self._ha_port,
                                     clock=self._clock, peers=self._peers)
        await service.start()
        self._quorum, self._service = quorum, service
        if self._settings.role is HARole.SYNC_MASTER:
            # Only a SYNC_MASTER put ever waits (or is refused); an ASYNC_MASTER's puts keep the store's
            # no-step fast path (the already resolved PUT_OK future).
            self._step = quorum.replica_ack_step()
            self._store.durability.add_step(self._step)
        self.ha_address = f"{self._advertised_ip}:{service.port}"
        log.info("HA: primary (%s) listening for replicas on %s", self._settings.role.value, self.ha_address)

    async def _stop_primary(self) -> None:
        if self._step is not None:
            self._store.durability.remove_step(self._step)
            self._step = None
        if self._service is not None:
            await self._service.stop()
        self._service = self._quorum = None
        self.ha_address = ""

    async def _start_replica(self) -> None:
        if self._client is not None:
            return
        address = self.primary_ha_address
        if address is None:
            # Not configured and not named by a name server yet (the registration retries soon), or a
            # primary turned replica by hand (tests): it serves reads and refuses writes, but ships nothing.
            log.info("HA: replica without a primary HA address yet (ha.ha_primary_address unset, the name "
                     "server has not named one): not following any primary")
            return
        client: ReplicaClient
        if self._epoch_store is not None:
            role = self._role
            client = EpochReplicaClient(self._epoch_store, self._settings, clock=self._clock, primary_address=address,
                                        broker_id=lambda: role.replica_id, peers=self._peers)
        else:
            client = ReplicaClient(self._store, self._settings, clock=self._clock, primary_address=address,
                                   peers=self._peers)
        await client.start()
        self._client = client
        log.info("HA: replica following %s", address)

    async def _stop_replica(self) -> None:
        if self._client is not None:
            await self._client.stop()
            self._client = None

    async def _alter(self, members: frozenset[int], set_epoch: int) -> SyncStateSet:
        alterer = self.sync_state_set_alterer
        if alterer is None:
            return SyncStateSet(members, set_epoch + 1)
        return await alterer(members, set_epoch)

    def _remember_sync_state_set(self, sync_state_set: SyncStateSet) -> None:
        self._sync_state_set = sync_state_set

    def _on_write(self) -> None:
        # A held store's puts (controller mode) run no arrival listener: ship, and move the confirm offset.
        service = self._service
        if service is not None:
            service.notify_appended()

    def _on_arrival(self, _topic: str, _queue_id: int, _max_offset: int) -> None:
        # Puts dispatch on the loop thread; a replica's appends (another thread) never find a service.
        service = self._service
        if service is not None:
            service.notify_appended()

    # -- admin view ---------------------------------------------------------------------------------

    def view(self) -> HAStatus:
        """This broker's replication state (the GET_BROKER_HA_STATUS body, ``protocol.ha_status``)."""
        store, role = self._store, self._role
        gap = self._settings.ha_max_gap_not_in_sync
        top = store.max_physical_offset
        sync_state_set = self.sync_state_set if self._epoch_store is not None else None
        status = HAStatus(
            role=role.role.value, ha_role=self._settings.role.value, ha_address=self.primary_ha_address or "",
            min_offset=store.min_physical_offset, max_offset=top, ha_max_gap_not_in_sync=gap,
            stage=role.stage.value, epoch=role.epoch,
            broker_id=role.replica_id if self._epoch_store is not None else role.broker_id,
            confirm_offset=store.confirm_offset,
            sync_state_set=tuple(sorted(sync_state_set.members)) if sync_state_set is not None else (),
            sync_state_set_epoch=sync_state_set.epoch if sync_state_set is not None else 0)
        if self._quorum is not None:
            links = tuple(HALinkStatus(str(s.link_id), s.ack_offset, top - s.ack_offset if s.ack_offset >= 0 else -1,
                                       replica_in_sync(s.ack_offset, top, gap))
                          for s in sorted(self._quorum.links.snapshot(), key=lambda s: str(s.link_id)))
            return replace(status, ha_address=self.ha_address, links=links)
        client = self._client
        connected = client is not None and client.connected
        return replace(status, connected=connected,
                       last_error=client.last_error if client is not None and not connected else "")


def _log_failed_switch(task: asyncio.Task[None]) -> None:
    """Done callback of a switch nobody awaits (re-following a newly named primary)."""
    if not task.cancelled() and task.exception() is not None:
        log.error("HA: re-following the newly named primary failed", exc_info=task.exception())
