"""BrokerServer: one broker process's wiring, lifecycle and request dispatch.

Started by ``broker_store.cli`` through ``run_broker`` and by tests directly
(``await BrokerServer(cfg).start()`` ... ``await stop()``; listen on port 0 and read ``addr``).
It owns the MessageStore, the topic table, consumer offsets, the client registry, the pull waiters
and the name-server registration, and routes each request code to its processor module through
``broker.request_routing``'s table; each processor gets a narrow context (``SendContext``,
``PullContext``...) rather than the server.

Role is runtime state (``role_state``, ``broker.role.RoleState``): a REPLICA refuses writes with
SERVICE_NOT_AVAILABLE and answers PULL_OFFSET_MOVED as PULL_RETRY_IMMEDIATELY. ``change_role`` is the one
way it changes (tests and operators now, the election controller later): ``broker.role_transition`` fences
the broker (sends refused, pulls served up to the confirm offset) while it awaits the replication switch
and the store steps, then unfences; a change of the registered id re-registers. Two loops follow the
stage (``broker.stage_loops``): the metadata sync runs while unfenced REPLICA, the schedule service
(``broker.schedule``, delivery of delayed messages) while unfenced PRIMARY.

Controller mode (``enable_controller_mode``, wired by ``broker.controller_wiring``): the broker starts REPLICA
under the id its ``brokerIdentity`` file keeps (``broker.identity_file``) and at the newest epoch of its epoch
file (``store.epoch_store``, whose cut and append a promotion makes: ``role_transition.ControllerPromotionSteps``);
without an id it serves but does not register with the name servers until it has one.
``broker.controller_agent`` does the rest once the broker serves: applies for an id, registers with the
controller, heartbeats it, and changes the role as the controller says (NOTIFY_BROKER_ROLE_CHANGED, answered
through ``broker.request_routing``, and a poll); a replica follows the primary the controller names, not the
one a name server's answer names.

ACL (``acl_enable``): every request whose code has a processor first passes ``broker.acl_guard`` (ACL 1.0,
RocketMQ's semantics); a refusal is answered SYSTEM_ERROR with the AclException text and never dispatched.

Start order: bind the port (so the advertised address and STOREHOST carry the real port), load
metadata, recover the store, start the replication side of the role (``broker.replication``: the HA
port of a primary, the HA client of a replica), install processors, register with the name servers (whose
answer names a replica's primary: its remoting address for the metadata sync, its HA address for the HA
client unless ``ha.ha_primary_address`` is configured). Until processors
are installed every request gets SERVICE_NOT_AVAILABLE. Stop order is the reverse; a clean stop
unregisters, persists offsets and flushes the store.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from broker_store.background import cancel_and_wait
from broker_store.broker.acl_guard import AclGuard
from broker_store.broker.acl_processor import AclAdminContext
from broker_store.broker.client_registry import ClientRegistry
from broker_store.broker.consumer_offset import FILE_NAME as OFFSETS_FILE
from broker_store.broker.consumer_offset import ConsumerOffsetManager
from broker_store.broker.controller_agent import ControllerAgent
from broker_store.broker.controller_client import ControllerClient
from broker_store.broker.controller_wiring import (
    PromotionStepsFactory,
    controller_agent,
    load_assigned_id,
    open_epoch_store,
    primary_lease,
    promotion_steps,
)
from broker_store.broker.delay_offsets import FILE_NAME as DELAY_OFFSETS_FILE
from broker_store.broker.delay_offsets import DelayOffsetTable
from broker_store.broker.identity_file import BrokerIdentityFiles
from broker_store.broker.long_polling import PullWaiters
from broker_store.broker.metadata_sync import MetadataSync
from broker_store.broker.metrics import BrokerMetrics
from broker_store.broker.namesrv_registration import BrokerIdentity, NamesrvRegistration
from broker_store.broker.orphan_topics import adopt_orphan_topics
from broker_store.broker.primary_address_listener import PrimaryAddressListener
from broker_store.broker.replication import BrokerReplication
from broker_store.broker.request_routing import BrokerParts, Processor, processor_table, unrouted
from broker_store.broker.role import BrokerRole, RoleState, RoleView
from broker_store.broker.role_transition import RoleTransition
from broker_store.broker.schedule import DelaySchedule, ScheduleService
from broker_store.broker.stage_loops import StageLoops
from broker_store.broker.subscription_group import FILE_NAME as SUBSCRIPTION_GROUPS_FILE
from broker_store.broker.subscription_group import SubscriptionGroupManager
from broker_store.broker.topic_config import FILE_NAME as TOPICS_FILE
from broker_store.broker.topic_config import TopicConfigManager
from broker_store.clock import SYSTEM_CLOCK, Clock
from broker_store.config import BrokerConfig, split_host_port
from broker_store.net.client import RemotingClient
from broker_store.net.metrics_http import MetricsServer
from broker_store.net.server import Connection, HandlerResult, RemotingServer
from broker_store.net.signals import wait_for_termination
from broker_store.net.tls import ServerTls
from broker_store.protocol.acl import SessionCredentials
from broker_store.protocol.credentials_file import CredentialsFileError, read_credentials_file
from broker_store.protocol.errors import ConfigError, RocketMQError
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.ha_status import EpochEntryCacheStatus
from broker_store.protocol.route import MASTER_ID
from broker_store.store import MessageStore
from broker_store.store.delay_levels import SCHEDULE_TOPIC, queue_id_of_level
from broker_store.store.epoch_store import EpochStore

log = logging.getLogger(__name__)

METADATA_DIR = "config"
"""Subdirectory of store_dir holding topics.json, consumer_offsets.json, subscription_groups.json and
delayOffset.json."""
CLIENT_SCAN_INTERVAL = 10.0


class BrokerServer:
    """One broker. ``clock`` is the one clock of every timer it runs (``broker_store.clock``): the store's
    (timestamps, flush deadlines, retention), the name-server heartbeats, client expiry, offset
    persistence and held pulls. ``promotion_steps`` replaces the store steps a promotion awaits (tests hold
    the fenced window open); by default they are ``StorePromotionSteps`` with controller mode's epoch file."""

    def __init__(self, config: BrokerConfig, *, clock: Clock = SYSTEM_CLOCK,
                 promotion_steps: PromotionStepsFactory | None = None) -> None:
        self.config = config
        self.store_config = config.to_store_config()
        self._clock = clock
        self._promotion_steps = promotion_steps
        self.role_state = RoleState(config.broker_id, replica=config.enable_controller_mode)
        self.identity_files: BrokerIdentityFiles | None = None
        """Controller mode: the assigned id's files (None in static groups)."""
        self._id_assigned = False
        """Controller mode: brokerIdentity named an id, or the controller assigned one."""
        self.controller_agent: ControllerAgent | None = None
        """Controller mode: the broker's side of its controller (valid after start)."""
        self.primary_lease = primary_lease(config, clock)
        """Controller mode: whether the primary may append (fed by the agent, read by the send path)."""
        self._controller_client: ControllerClient | None = None
        self._registering = False
        """Registration with the name servers started (controller mode defers it until an id is assigned)."""
        self.role_state.listeners.append(self._follow_role)
        self._role_transition: RoleTransition | None = None
        meta = Path(config.store_dir) / METADATA_DIR
        self.topic_configs = TopicConfigManager(
            meta / TOPICS_FILE,
            auto_create_topic_enable=config.auto_create_topic_enable,
            default_topic_queue_nums=config.default_topic_queue_nums,
            clock=clock,
        )
        self.consumer_offsets = ConsumerOffsetManager(meta / OFFSETS_FILE, clock=clock)
        self.clients = ClientRegistry(clock=clock)
        self.subscription_groups = SubscriptionGroupManager(
            meta / SUBSCRIPTION_GROUPS_FILE, auto_create=config.auto_create_subscription_group, clock=clock)
        self.delay_levels = config.delay_levels()
        self.delay_offsets = DelayOffsetTable(meta / DELAY_OFFSETS_FILE)
        self.schedule: ScheduleService | None = None
        """Delivery of delayed messages; runs while PRIMARY (valid after start)."""
        self._stage_loops: StageLoops | None = None
        host, port = split_host_port(config.listen)
        server_tls = ServerTls.from_settings(config.tls.server)  # one context for both ports
        limits = config.connection_limits()
        self._server = RemotingServer(self._handle, host, port, tls=server_tls, limits=limits, clock=clock)
        self._server.disconnect_listeners.append(self.clients.connection_closed)
        # RocketMQ's fast remoting server ("VIP channel") on listen port - 2: same processors.
        self._fast_server: RemotingServer | None = None
        if config.fast_listen_enable and port > 2:
            self._fast_server = RemotingServer(self._handle, host, port - 2, tls=server_tls, limits=limits,
                                               clock=clock)
            self._fast_server.disconnect_listeners.append(self.clients.connection_closed)
        self.primary_address: PrimaryAddressListener | None = None
        """With ``primary_address``: the group's address, served while this broker is primary."""
        if config.primary_address is not None:
            def primary_address_server(addr: str) -> RemotingServer:
                server = RemotingServer(self._handle, *split_host_port(addr), tls=server_tls, limits=limits,
                                        clock=clock)
                server.disconnect_listeners.append(self.clients.connection_closed)
                return server
            self.primary_address = PrimaryAddressListener(
                config.primary_addresses(), primary_address_server, clock,
                describe=f"broker {config.cluster_name}/{config.broker_name}")
            self.role_state.listeners.append(self.primary_address.role_changed)
        self._processors: dict[int, Processor] = {}
        self.acl: AclGuard | None = None
        """With ``acl_enable``: the ACL 1.0 gate every dispatched request passes first (``broker.acl_guard``)."""
        if config.acl_enable and config.acl_file is not None:
            self.acl = AclGuard(config.acl_file, clock=clock, check_interval=config.acl_reload_check_seconds)
        self.own_credentials: SessionCredentials | None = None
        """``acl_credentials_file``'s account: this broker signs its requests to its primary with it."""
        if config.acl_credentials_file is not None:
            try:
                self.own_credentials = read_credentials_file(config.acl_credentials_file)
            except CredentialsFileError as exc:
                raise ConfigError(f"acl_credentials_file: {exc}") from None
        self._store: MessageStore | None = None
        self.epoch_store: EpochStore | None = None
        """Controller mode: the store with its epoch file (valid after start; None in static groups)."""
        self.replication: BrokerReplication | None = None
        """The group replication side matching the runtime role (valid after start)."""
        self._pull_waiters: PullWaiters | None = None
        self._client: RemotingClient | None = None
        self.registration: NamesrvRegistration | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.metadata_sync: MetadataSync | None = None
        """A replica's copy of its primary's topics, consumer offsets and subscription groups (valid after
        start)."""
        self.metrics: MetricsServer | None = None
        """With ``metrics_port``: the Prometheus endpoint (``broker.metrics``), serving from the start on."""
        if config.metrics_port is not None:
            collector = BrokerMetrics(config.cluster_name, config.broker_name, lambda: self.addr, self.role_state,
                                      lambda: self._store, Path(config.store_dir))
            self.metrics = MetricsServer(collector.collect, host, config.metrics_port, clock=clock)
        self.stopping = False
        self.addr = ""
        """Advertised ``ip:port`` (valid after start)."""

    # -- accessors used by processors -----------------------------------------------------------

    @property
    def store(self) -> MessageStore:
        if self._store is None:
            raise RuntimeError("broker not started")
        return self._store

    @property
    def pull_waiters(self) -> PullWaiters:
        if self._pull_waiters is None:
            raise RuntimeError("broker not started")
        return self._pull_waiters

    @property
    def role(self) -> BrokerRole:
        return self.role_state.role

    @property
    def is_primary(self) -> bool:
        return self.role_state.is_primary

    @property
    def broker_id(self) -> int:
        return self.role_state.broker_id

    def identity(self) -> BrokerIdentity:
        primary_address = self.config.primary_address
        return BrokerIdentity(
            cluster_name=self.config.cluster_name,
            broker_name=self.config.broker_name,
            broker_id=self.broker_id,
            # the group's primary address names the primary in routes, whether bound yet or still held by the old one
            broker_addr=primary_address if primary_address is not None and self.broker_id == MASTER_ID else self.addr,
            ha_server_addr=self.replication.ha_address if self.replication is not None else "",
            state_version=self.role_state.epoch,
        )

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Bind, recover, serve, register. Raises StoreError/TransportError if the broker cannot run."""
        await self._server.start()
        if self._fast_server is not None:
            await self._fast_server.start()
        try:
            self.addr = f"{self.config.advertised_ip}:{self._server.port}"
            if self.metrics is not None:
                await self.metrics.start()
            self.identity_files, self._id_assigned = await load_assigned_id(self.config, self.role_state)
            if self.acl is not None:
                self.acl.load()
            self.topic_configs.load()
            self.consumer_offsets.load()
            self.subscription_groups.load()
            self.delay_offsets.load()
            controller_mode = self.config.enable_controller_mode
            store = MessageStore(self.store_config, store_host=self.addr, clock=self._clock,
                                 delay_levels=self.delay_levels, hold_confirm_offset=controller_mode)
            await asyncio.to_thread(store.start)
            self._store = store
            if controller_mode:
                self.epoch_store = await open_epoch_store(store, self.role_state, self._clamp_offsets_to_queues)
            self._pull_waiters = PullWaiters(asyncio.get_running_loop())
            store.add_arrival_listener(self._pull_waiters.notify)
            self.replication = BrokerReplication(
                store, self.role_state, self.config.ha, host=split_host_port(self.config.listen)[0],
                ha_port=self.config.ha_port(), advertised_ip=self.config.advertised_ip, clock=self._clock,
                epoch_store=self.epoch_store)
            await self.replication.start()
            self._role_transition = RoleTransition(self.role_state, self.replication,
                                                   promotion_steps(self._promotion_steps, store, self.epoch_store),
                                                   adopt_orphans=self._adopt_orphan_topics)
            self._client = RemotingClient(tls=self.config.tls.client_settings(), clock=self._clock)
            replication = self.replication
            self.registration = NamesrvRegistration(
                self._client,
                list(self.config.namesrv_addrs),
                self.identity,
                self.topic_configs.table,
                register_interval=self.config.register_interval_seconds,
                heartbeat_interval=self.config.heartbeat_interval_seconds,
                clock=self._clock,
                on_primary_ha_addr=self._namesrv_names_primary,
                awaiting_primary=lambda: replication.awaiting_primary,
            )
            self.topic_configs.change_listeners.append(lambda _tc: self._request_register())
            self.metadata_sync = MetadataSync(
                self._client, self._primary_broker_addr, self.topic_configs, self.consumer_offsets,
                self.subscription_groups, interval=self.config.ha.metadata_sync_interval_ms / 1000, clock=self._clock,
                on_topics_changed=self._request_register, delay_offsets=self.delay_offsets, acl=self.acl,
                credentials=self.own_credentials, log_end=lambda: store.max_physical_offset)
            store.add_arrival_listener(self.metadata_sync.arrival_listener)
            self.schedule = ScheduleService(store, DelaySchedule(self.delay_levels, self.delay_offsets),
                                            clock=self._clock)
            stage_loops = self._stage_loops = StageLoops(self.metadata_sync, self.schedule,
                                                         persist_delay_offsets=self._persist_delay_offsets,
                                                         stopping=lambda: self.stopping)
            self._install_processors()
            if self.identity_files is not None:
                self._start_controller_agent(self.identity_files)
            if self.identity_files is None or self._id_assigned:
                await self._start_registration()
            else:
                log.warning("broker %s/%s is in controller mode without %s: it does not register with the name "
                            "servers until the controller assigns it an id", self.config.cluster_name,
                            self.config.broker_name, self.identity_files.path)
            loop = asyncio.get_running_loop()
            self._tasks = [
                loop.create_task(self._persist_offsets_loop()),
                loop.create_task(self._client_scan_loop()),
            ]
            stage_loops.follow(self.role_state.stage)
            if self.primary_address is not None:
                self.primary_address.start()
            if self.controller_agent is not None:
                self.controller_agent.start()
        except BaseException:
            await self.stop(unregister=False)
            raise
        log.info(
            "broker %s/%s (%s) serving on %s, store %s",
            self.config.cluster_name,
            self.config.broker_name,
            self.role.value,
            self.addr,
            self.config.store_dir,
        )

    def _start_controller_agent(self, files: BrokerIdentityFiles) -> None:
        self._controller_client, self.controller_agent = controller_agent(
            self.config, self, files, self.role_state, self.replication, self._clock, self.own_credentials,
            self.primary_lease)

    # -- what the controller agent needs (``controller_agent.ControlledBroker``) ----------------------------

    def role_view(self) -> RoleView:
        return self.role_state.view()

    def follow_primary(self, ha_address: str) -> None:
        if self.replication is not None:
            self.replication.follow_primary(ha_address)

    def set_sync_state_set(self, members: frozenset[int], epoch: int) -> None:
        if self.replication is not None:
            self.replication.set_sync_state_set(members, epoch)

    def heartbeat_offsets(self) -> tuple[int, int, int]:
        """(epoch, max offset, confirm offset) as the controller elects by: the epoch cache's newest epoch (the
        master epoch in force while the cache is empty), the CommitLog's max offset and the store's confirm
        offset (held back to what the SyncStateSet acknowledged, in controller mode)."""
        store = self.store
        last = None if self.epoch_store is None else self.epoch_store.epoch_cache.last_epoch
        return (self.role_state.epoch if last is None else last), store.max_physical_offset, store.confirm_offset

    async def take_broker_id(self, broker_id: int) -> None:
        """Controller mode: brokerIdentity holds ``broker_id`` (the controller accepted it): take it, and
        register with the name servers if this broker had no id yet."""
        if self.registration is None:
            raise RuntimeError("take_broker_id needs a started broker in controller mode")
        self.role_state.set_broker_id(broker_id)
        self._id_assigned = True
        if not self._registering:
            await self._start_registration()

    async def assign_broker_id(self, broker_id: int) -> None:
        """Controller mode: keep ``broker_id`` in brokerIdentity (crash-safe, before anything uses it) and take
        it (an operator's or a test's hand; the controller agent applies for its id itself)."""
        if self.identity_files is None or self.registration is None:
            raise RuntimeError("assign_broker_id needs a started broker in controller mode")
        await asyncio.to_thread(self.identity_files.persist, broker_id)
        await self.take_broker_id(broker_id)

    async def _start_registration(self) -> None:
        if self.registration is None:
            raise RuntimeError("broker not started")
        self._registering = True
        await self.registration.register_all()
        self.registration.start()

    def _clamp_offsets_to_queues(self) -> None:
        """After a controller-mode replica cut its log: consumer and delay offsets past their queues' new ends
        come down to them (apache/rocketmq#4771), so no consumer skips what the new primary writes there. Runs
        on the loop (the tables are single-threaded); the metadata sync later copies the primary's tables. The offset
        at which the topic table in force was asked for no longer bounds what it covers (``broker.orphan_topics``)."""
        store = self._store
        if store is None:
            return
        if self.metadata_sync is not None:
            self.metadata_sync.forget_table_log_offset()
        moved = self.consumer_offsets.clamp(store.get_max_offset)
        moved += self.delay_offsets.clamp(lambda level: store.get_max_offset(SCHEDULE_TOPIC, queue_id_of_level(level)))
        if moved:
            log.warning("controller mode: %d consumer/delay offsets lowered to their queues' ends after a truncation",
                        moved)

    def _primary_broker_addr(self) -> str | None:
        """The group primary's remoting address: the one the controller named (controller mode), else the one
        the last registration answer named; unknown (a replica that registered before its primary did) asks
        for a registration now, so the next round knows it."""
        if self.controller_agent is not None:
            return self.controller_agent.following
        if self.registration is None:
            return None
        if self.registration.master_addr is None:
            self.registration.request_register()
        return self.registration.master_addr

    def _namesrv_names_primary(self, ha_address: str) -> None:
        """A registration answer named the group primary's HA address. Static groups follow it; in controller
        mode the controller names the primary, and the agent takes the name server's HA address only for
        that one (a name server may still list a primary that died)."""
        if self.controller_agent is not None:
            master = self.registration.master_addr if self.registration is not None else None
            self.controller_agent.namesrv_named(master, ha_address)
        elif self.replication is not None:
            self.replication.follow_primary(ha_address)

    async def change_role(self, role: BrokerRole, *, epoch: int | None = None) -> None:
        """Promote or demote this broker through the fenced transition (``broker.role_transition``) and
        return once it is unfenced. ``epoch`` None keeps the epoch in force (static groups); an older one
        raises ``role.StaleEpochError``; a failed step raises after leaving the broker REPLICA."""
        if self._role_transition is None:
            raise RuntimeError("broker not started")
        await self._role_transition.change_role(role, epoch=epoch)

    def _follow_role(self, old: RoleView, new: RoleView) -> None:
        """RoleState listener: re-register under a new id, switch the loops that follow the stage, and let
        pulls held while fenced re-read once unfenced (no arrival would wake them)."""
        if old.broker_id != new.broker_id:
            self._request_register()
            if new.broker_id == MASTER_ID and self.config.primary_address is not None and self._registering:
                self._tasks.append(asyncio.get_running_loop().create_task(self._retire_own_route(old)))
        if self._stage_loops is not None:
            self._stage_loops.follow(new.stage)
        if old.stage.fenced and not new.stage.fenced and self._pull_waiters is not None:
            self._pull_waiters.wake_all()

    async def _retire_own_route(self, old: RoleView) -> None:
        """Promoted with a primary address: register it as id 0, then take back this broker's own address's replica
        registration, so routes do not list it twice until the name servers expire it (nobody else registers this
        broker's own address)."""
        if self.registration is None:
            return
        await self.registration.register_all()
        await self.registration.unregister_all(replace(self.identity(), broker_id=old.broker_id, broker_addr=self.addr))

    def _adopt_orphan_topics(self) -> None:
        """Promotion step (fenced, on the loop): topics with messages here but no config get one."""
        sync = self.metadata_sync
        adopt_orphan_topics(self.store, self.topic_configs, sync.table_log_offset if sync is not None else None,
                            self.config.broker_name)

    def _persist_delay_offsets(self) -> None:
        try:
            self.delay_offsets.persist()
        except RocketMQError:
            log.exception("could not persist the delay offsets of %s; retrying next period", self.config.broker_name)

    def _request_register(self) -> None:
        """A full registration soon: the topic table or the broker id (role) changed."""
        if self.registration is not None:
            self.registration.request_register()

    def _ha_status(self) -> bytes:
        if self.replication is None:
            raise RuntimeError("broker not started")
        return self.replication.view().to_json()

    def _install_processors(self) -> None:
        self._processors = processor_table(BrokerParts(
            self.config, self.store, self.topic_configs, self.role_state, self.clients, self.consumer_offsets,
            self.delay_offsets, self.subscription_groups, self.pull_waiters, self.delay_levels, self._clock,
            stopping=lambda: self.stopping, ha_status=self._ha_status, controller_agent=lambda: self.controller_agent,
            epoch_cache=self._epoch_cache_body,
            acl_admin=AclAdminContext(self.acl, self.config.cluster_name, self.config.broker_name,
                                      broker_addr=lambda: self.addr, clock=self._clock),
            lease=self.primary_lease))

    def _epoch_cache_body(self) -> bytes | None:
        """GET_BROKER_EPOCH_CACHE's body: this broker's epoch entries and max offset (None before the epoch file
        is open)."""
        epoch_store = self.epoch_store
        if epoch_store is None:
            return None
        return EpochEntryCacheStatus.of(
            self.config.cluster_name, self.config.broker_name, self.role_state.replica_id,
            epoch_store.max_physical_offset,
            [(e.epoch, e.start_offset) for e in epoch_store.epoch_cache.entries]).to_json()

    async def stop(self, *, unregister: bool = True) -> None:
        """Stop serving; ``unregister=False`` skips UNREGISTER_BROKER (tests simulate a vanished broker).
        Idempotent."""
        if self.stopping:
            return
        self.stopping = True
        if self.primary_address is not None:
            await self.primary_address.stop()
        if self.controller_agent is not None:
            await self.controller_agent.stop()
        if self._pull_waiters is not None:
            self._pull_waiters.wake_all()
            await asyncio.sleep(0)  # let released pulls answer while the store is still open
        if self._stage_loops is not None:
            self._tasks.extend(self._stage_loops.detach())
        await cancel_and_wait(self._tasks)
        self._tasks = []
        if self.registration is not None:
            await self.registration.stop()
            if unregister and self._registering:
                await self.registration.unregister_all()
        self._processors = {}
        await self._server.stop()
        if self._fast_server is not None:
            await self._fast_server.stop()
        if self.metrics is not None:
            await self.metrics.stop()
        if self.replication is not None:
            await self.replication.stop()
        try:
            self.consumer_offsets.persist()
        except RocketMQError:
            log.exception("could not persist consumer offsets of %s at shutdown", self.config.broker_name)
        self._persist_delay_offsets()
        if self._store is not None:
            await asyncio.to_thread(self._store.shutdown)
        if self._client is not None:
            await self._client.close()
        if self._controller_client is not None:
            await self._controller_client.close()

    async def _persist_offsets_loop(self) -> None:
        while True:
            await self._clock.sleep(self.config.offset_persist_interval_seconds)
            try:
                self.consumer_offsets.persist()
            except RocketMQError:
                log.exception("periodic persistence of consumer offsets failed; retrying next period")
            try:
                self.subscription_groups.persist_pending()
            except RocketMQError:
                log.exception("persistence of auto-created subscription groups failed; retrying next period")
            self._persist_delay_offsets()

    async def _client_scan_loop(self) -> None:
        timeout = self.config.client_channel_expiry_seconds
        while True:
            await self._clock.sleep(min(CLIENT_SCAN_INTERVAL, timeout))
            for group, client_id in self.clients.scan_expired(timeout):
                log.info("client %s of group %s expired (no heartbeat for %.0fs)", client_id, group, timeout)

    # -- dispatch -------------------------------------------------------------------------------

    def _handle(self, cmd: RemotingCommand, conn: Connection) -> HandlerResult:
        processor = self._processors.get(cmd.code)
        if processor is None:
            return unrouted(cmd, broker_name=self.config.broker_name, started=self._store is not None,
                            stopping=self.stopping)
        if self.acl is not None:  # as RocketMQ's RPC hook: after the code is known, before the processor
            refusal = self.acl.refuse(cmd, conn)
            if refusal is not None:
                return refusal
        return processor(cmd, conn)


async def run_broker(cfg: BrokerConfig, ready: Callable[[str], None] | None = None) -> None:
    """Serve one broker until cancelled or SIGTERM, then stop cleanly (unregister, persist offsets,
    flush the store). ``ready(addr)`` is called once it serves and made its first registration."""
    broker = BrokerServer(cfg)
    await broker.start()
    try:
        if ready is not None:
            ready(broker.addr)
        await wait_for_termination()
    finally:
        await broker.stop()
