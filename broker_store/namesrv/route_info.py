"""The name server's route registry: a pure state machine (no sockets, injectable clock).

``NamesrvServer`` feeds it decoded requests; tests drive it directly and advance the clock.
Mirrors RocketMQ's RouteInfoManager:

    topic_queue_table   topic -> broker name -> QueueData      (from the primary's topic table)
    broker_addr_table   broker name -> cluster, {broker id: addr}
    cluster_addr_table  cluster -> {broker name}
    broker_live_table   (cluster, addr) -> last heartbeat, timeout, data version, HA address

A broker is live while ``now - last_update <= timeout``; ``scan_not_active_brokers`` removes the
others exactly like an UNREGISTER_BROKER. When the last address of a broker name goes, its queue
data goes with it, so clients re-route.

A registration naming a broker id that another live address holds with a higher ``stateVersion`` (the master
epoch a broker in controller mode registers with, as RocketMQ 5's name server compares it) is stale and
ignored: a primary frozen while the controller promoted a replica registers again as id 0 when it resumes,
before it hears that it was replaced; taking id 0 back from the new primary, then leaving it when it demotes
itself, would leave the group without a primary in the route until the new one's next full registration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from broker_store.clock import Clock
from broker_store.protocol.route import MASTER_ID, BrokerData, ClusterInfo, QueueData, TopicRouteData
from broker_store.protocol.topic import DataVersion, TopicConfig


@dataclass(frozen=True, slots=True)
class BrokerKey:
    """Identity of one broker process in the live table."""

    cluster: str
    addr: str


@dataclass(slots=True)
class RegisteredBroker:
    """Liveness of one registered broker process (mutable: refreshed by every heartbeat)."""

    broker_name: str
    broker_id: int
    last_update: float
    """Clock seconds of the last registration or heartbeat."""
    timeout: float
    """Seconds without heartbeat after which the broker is removed."""
    data_version: DataVersion
    ha_server_addr: str


@dataclass(frozen=True, slots=True)
class RegisterResult:
    """What REGISTER_BROKER answers: where the group's primary and its HA service are."""

    master_addr: str | None
    ha_server_addr: str | None
    stale_over: str | None = None
    """The address that keeps the id when the registration was ignored as stale (see the module docstring)."""


@dataclass(slots=True)
class _BrokerGroup:
    cluster: str
    broker_name: str
    addrs: dict[int, str]


class RouteInfoManager:
    """Route registry. Not thread-safe: one asyncio loop owns it.

    Liveness reads ``clock.monotonic()`` (the name server's one clock); ``default_timeout`` is the broker
    expiry used when a registration does not carry its own heartbeat timeout.
    """

    def __init__(self, *, clock: Clock, default_timeout: float = 5.0) -> None:
        self.default_timeout = default_timeout
        self._clock = clock
        self._topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self._broker_addr_table: dict[str, _BrokerGroup] = {}
        self._cluster_addr_table: dict[str, set[str]] = {}
        self._broker_live_table: dict[BrokerKey, RegisteredBroker] = {}

    # -- registration ---------------------------------------------------------------------------

    def register_broker(
        self,
        *,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str = "",
        topic_configs: Mapping[str, TopicConfig] | None = None,
        data_version: DataVersion | None = None,
        heartbeat_timeout: float | None = None,
    ) -> RegisterResult:
        """Add or refresh a broker. Topic configs of a primary (id 0) update queue data when its
        data version changed, this is its first registration, or the address registered under another id
        before (a replica promoted by the controller: its data version is the one it had as a replica, and
        its topics become the group's); a replica's are ignored."""
        now = self._clock.monotonic()
        version = data_version or DataVersion()
        holder = self._newer_holder(cluster, broker_name, broker_id, broker_addr, version)
        if holder is not None:
            return RegisterResult(master_addr=None, ha_server_addr=None, stale_over=holder)
        self._cluster_addr_table.setdefault(cluster, set()).add(broker_name)
        group = self._broker_addr_table.get(broker_name)
        register_first = group is None
        if group is None:
            group = _BrokerGroup(cluster=cluster, broker_name=broker_name, addrs={})
            self._broker_addr_table[broker_name] = group
        # One address holds one id: a broker that changed role re-registers under its new id.
        for old_id, addr in list(group.addrs.items()):
            if addr == broker_addr and old_id != broker_id:
                del group.addrs[old_id]
        old_addr = group.addrs.get(broker_id)
        if old_addr is not None and old_addr != broker_addr:
            # Another process took over this id: its predecessor's liveness no longer counts.
            self._broker_live_table.pop(BrokerKey(cluster, old_addr), None)
        register_first = register_first or old_addr is None
        group.addrs[broker_id] = broker_addr

        key = BrokerKey(cluster, broker_addr)
        prev = self._broker_live_table.get(key)
        if topic_configs is not None and broker_id == MASTER_ID:
            changed = prev is None or prev.data_version != version or prev.broker_id != broker_id
            if changed or register_first:
                for tc in topic_configs.values():
                    self._update_queue_data(broker_name, tc)
        self._broker_live_table[key] = RegisteredBroker(
            broker_name=broker_name,
            broker_id=broker_id,
            last_update=now,
            timeout=heartbeat_timeout if heartbeat_timeout else self.default_timeout,
            data_version=version,
            ha_server_addr=ha_server_addr,
        )

        if broker_id == MASTER_ID:
            return RegisterResult(master_addr=None, ha_server_addr=None)
        master_addr = group.addrs.get(MASTER_ID)
        master_live = self._broker_live_table.get(BrokerKey(cluster, master_addr)) if master_addr else None
        return RegisterResult(
            master_addr=master_addr, ha_server_addr=master_live.ha_server_addr if master_live else None
        )

    def _newer_holder(self, cluster: str, broker_name: str, broker_id: int, broker_addr: str,
                      version: DataVersion) -> str | None:
        """The live address holding ``broker_id`` of the group at a higher state version than ``version``
        (the registration is stale), else None."""
        group = self._broker_addr_table.get(broker_name)
        holder = group.addrs.get(broker_id) if group is not None else None
        if holder is None or holder == broker_addr:
            return None
        live = self._broker_live_table.get(BrokerKey(cluster, holder))
        if live is None or live.data_version.state_version <= version.state_version:
            return None
        return holder

    def _update_queue_data(self, broker_name: str, tc: TopicConfig) -> None:
        qd = QueueData(
            broker_name=broker_name,
            read_queue_nums=tc.read_queue_nums,
            write_queue_nums=tc.write_queue_nums,
            perm=tc.perm,
            topic_sys_flag=tc.topic_sys_flag,
        )
        self._topic_queue_table.setdefault(tc.topic_name, {})[broker_name] = qd

    def delete_topic(self, topic: str) -> bool:
        """Forget a topic's queue data on every broker group (DELETE_TOPIC_IN_NAMESRV, after the brokers
        deleted it: a later full registration listing it again brings it back)."""
        return self._topic_queue_table.pop(topic, None) is not None

    def update_topic(self, broker_name: str, tc: TopicConfig) -> None:
        """Queue data of one topic on one broker group (incremental registration)."""
        self._update_queue_data(broker_name, tc)

    def unregister_broker(self, *, cluster: str, broker_addr: str, broker_name: str, broker_id: int) -> bool:
        """Remove one broker process; True if it was known."""
        known = self._broker_live_table.pop(BrokerKey(cluster, broker_addr), None) is not None
        group = self._broker_addr_table.get(broker_name)
        if group is not None and group.addrs.get(broker_id) == broker_addr:
            del group.addrs[broker_id]
            known = True
            if not group.addrs:
                self._remove_broker_name(cluster, broker_name)
        return known

    def _remove_broker_name(self, cluster: str, broker_name: str) -> None:
        self._broker_addr_table.pop(broker_name, None)
        names = self._cluster_addr_table.get(cluster)
        if names is not None:
            names.discard(broker_name)
            if not names:
                del self._cluster_addr_table[cluster]
        for topic in list(self._topic_queue_table):
            queues = self._topic_queue_table[topic]
            queues.pop(broker_name, None)
            if not queues:
                del self._topic_queue_table[topic]

    # -- liveness -------------------------------------------------------------------------------

    def heartbeat(self, *, cluster: str, broker_addr: str) -> bool:
        """Lite heartbeat (BROKER_HEARTBEAT); False if the broker is not registered (it must
        re-register: RocketMQ ignores heartbeats of unknown brokers the same way)."""
        live = self._broker_live_table.get(BrokerKey(cluster, broker_addr))
        if live is None:
            return False
        live.last_update = self._clock.monotonic()
        return True

    def query_data_version(
        self, *, cluster: str, broker_addr: str, data_version: DataVersion
    ) -> tuple[bool, DataVersion | None]:
        """(changed, version held here). Refreshes liveness like a heartbeat, as RocketMQ does."""
        live = self._broker_live_table.get(BrokerKey(cluster, broker_addr))
        if live is None:
            return True, None
        live.last_update = self._clock.monotonic()
        return live.data_version != data_version, live.data_version

    def scan_not_active_brokers(self) -> list[BrokerKey]:
        """Remove every broker whose heartbeat is older than its timeout; returns the removed."""
        now = self._clock.monotonic()
        expired = [k for k, live in self._broker_live_table.items() if now - live.last_update > live.timeout]
        for key in expired:
            live = self._broker_live_table[key]
            self.unregister_broker(
                cluster=key.cluster,
                broker_addr=key.addr,
                broker_name=live.broker_name,
                broker_id=live.broker_id,
            )
        return expired

    def brokers_at(self, broker_addr: str) -> list[tuple[BrokerKey, RegisteredBroker]]:
        """Registrations of the process at ``broker_addr`` (any cluster)."""
        return [(k, v) for k, v in self._broker_live_table.items() if k.addr == broker_addr]

    # -- queries --------------------------------------------------------------------------------

    def pickup_topic_route(self, topic: str) -> TopicRouteData | None:
        """Route of a topic, or None when no live broker group serves it."""
        queues = self._topic_queue_table.get(topic)
        if not queues:
            return None
        broker_datas = []
        for broker_name in sorted(queues):
            group = self._broker_addr_table.get(broker_name)
            if group is not None:
                broker_datas.append(
                    BrokerData(cluster=group.cluster, broker_name=broker_name, broker_addrs=dict(group.addrs))
                )
        if not broker_datas:
            return None
        return TopicRouteData(
            queue_datas=tuple(queues[n] for n in sorted(queues)), broker_datas=tuple(broker_datas)
        )

    def cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            broker_addr_table={
                n: BrokerData(cluster=g.cluster, broker_name=n, broker_addrs=dict(g.addrs))
                for n, g in self._broker_addr_table.items()
            },
            cluster_addr_table={c: tuple(sorted(names)) for c, names in self._cluster_addr_table.items()},
        )

    def all_topics(self) -> list[str]:
        return sorted(self._topic_queue_table)
