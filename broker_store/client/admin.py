"""Admin: cluster and topic metadata, topic creation, queue offsets, consumer group offsets.

Used on the Spark driver (planning partitions, config sync, checkpoints), by the CLI and tests.
Reads go to the name servers or to each broker group's primary; nothing here is cached except
topic routes (through the session's RouteCache, refreshed after any ``invalid_route`` error).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from broker_store.client.consumer import query_consumer_offset
from broker_store.client.records import MessageQueue
from broker_store.client.route_cache import DEFAULT_TOPIC, RouteCache, publish_queues, subscribe_queues
from broker_store.client.runtime import SyncClient
from broker_store.client.session import ClientSession
from broker_store.clock import SYSTEM_CLOCK, Clock
from broker_store.net.client import RemotingClient
from broker_store.net.tls_settings import TlsClientSettings
from broker_store.protocol.acl import SessionCredentials
from broker_store.protocol.codes import PERM_READ, PERM_WRITE, RequestCode, ResponseCode
from broker_store.protocol.delay_offset import decode_delay_offsets
from broker_store.protocol.errors import (
    ConfigError,
    ProtocolError,
    RequestTimeoutError,
    RocketMQError,
    TopicNotExistError,
    error_for_response,
)
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.ha_status import EpochEntryCacheStatus, HAStatus
from broker_store.protocol.headers import (
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    GetConsumerListByGroupRequestHeader,
    OffsetResponseHeader,
    QueueRequestHeader,
    SearchOffsetRequestHeader,
    TopicRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from broker_store.protocol.message import validate_topic
from broker_store.protocol.route import MASTER_ID, ClusterInfo, TopicRouteData, dumps_rocketmq, loads_rocketmq
from broker_store.protocol.topic import TOPIC_FILTER_SINGLE_TAG, TopicConfig, TopicConfigTable
from broker_store.protocol.topic_stats import TopicOffset, TopicStatsTable

DEFAULT_PERM = PERM_READ | PERM_WRITE

T = TypeVar("T")


class AsyncAdmin:
    """Asyncio admin client. Methods must run on one event loop."""

    def __init__(self, namesrv_addr: str | Sequence[str], *, request_timeout: float = 3.0,
                 route_ttl: float = 30.0, remoting: RemotingClient | None = None,
                 clock: Clock = SYSTEM_CLOCK, credentials: SessionCredentials | None = None,
                 tls: TlsClientSettings | None = None) -> None:
        self._session = ClientSession(namesrv_addr, remoting=remoting, request_timeout=request_timeout,
                                      route_ttl=route_ttl, clock=clock, credentials=credentials, tls=tls)
        self._clock = clock

    @property
    def routes(self) -> RouteCache:
        return self._session.routes

    @property
    def session(self) -> ClientSession:
        """The session every request goes through (signed with this admin's credentials): for request
        families kept in their own modules (``client.acl_admin``)."""
        return self._session

    async def start(self) -> None:
        """Nothing to connect up front. Kept for symmetry."""

    async def close(self) -> None:
        await self._session.close()

    async def __aenter__(self) -> AsyncAdmin:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- name server ----------------------------------------------------------------------------

    async def cluster_info(self) -> ClusterInfo:
        resp = await self._session.routes.invoke_namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)
        return ClusterInfo.decode(resp.body)

    async def topic_route(self, topic: str) -> TopicRouteData:
        """The route straight from a name server (TopicNotExistError if it has none)."""
        return await self._session.routes.fetch(topic)

    async def topic_list(self) -> list[str]:
        resp = await self._session.routes.invoke_namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        body = loads_rocketmq(resp.body) if resp.body else {}
        topics = body.get("topicList") if isinstance(body, dict) else None
        if not isinstance(topics, list):
            raise ProtocolError("GET_ALL_TOPIC_LIST_FROM_NAMESERVER body has no topicList array")
        return sorted(str(t) for t in topics)

    async def wait_for_route(self, topic: str, timeout: float = 10.0, *, writable: bool = True,
                             poll_interval: float = 0.1, min_queues: int = 1) -> TopicRouteData:
        """Poll the name servers until the topic has ``min_queues`` writable (or, with ``writable=False``,
        readable) queues; RequestTimeoutError naming the last reason after ``timeout`` seconds."""
        deadline = self._clock.monotonic() + timeout
        reason = "no route yet"
        while True:
            try:
                route = await self._session.routes.fetch(topic)
                queues = publish_queues(topic, route) if writable else subscribe_queues(topic, route)
                if queues and len(queues) >= min_queues:
                    self._session.routes.invalidate(topic)
                    return route
                reason = (f"route has {len(queues)} {'writable' if writable else 'readable'} queue(s), "
                          f"waiting for {max(1, min_queues)}")
            except RocketMQError as exc:
                if not (exc.retriable or exc.invalid_route):
                    raise
                reason = str(exc)
            if self._clock.monotonic() >= deadline:
                raise RequestTimeoutError(f"topic {topic} has no usable route after {timeout}s: {reason}")
            await self._clock.sleep(poll_interval)

    # -- topics ---------------------------------------------------------------------------------

    async def create_topic(self, topic: str, queue_nums: int = 8, perm: int = DEFAULT_PERM,
                           cluster: str | Sequence[str] | None = None, *,
                           broker_names: Sequence[str] | None = None, order: bool = False,
                           read_queue_nums: int | None = None,
                           write_queue_nums: int | None = None,
                           attributes: Mapping[str, str] | None = None) -> list[str]:
        """UPDATE_AND_CREATE_TOPIC on the primary of every broker group of ``cluster`` (a name or
        names; None = every cluster), or of exactly ``broker_names``. Returns the primaries' addresses.
        Also updates an existing topic's queue counts and permission."""
        try:
            validate_topic(topic)
        except ProtocolError as exc:
            raise ConfigError(f"topic: {exc}") from exc
        if queue_nums <= 0:
            raise ConfigError(f"queue_nums: must be > 0, got {queue_nums}")
        info = await self.cluster_info()
        names = _target_brokers(info, cluster, broker_names)
        addrs = []
        for name in names:
            broker = info.broker_addr_table.get(name)
            if broker is None or broker.master_addr is None:
                raise error_for_response(ResponseCode.SERVICE_NOT_AVAILABLE,
                                         f"broker group {name} has no primary registered")
            addrs.append(broker.master_addr)
        header = CreateTopicRequestHeader(
            topic=topic, default_topic=DEFAULT_TOPIC, read_queue_nums=read_queue_nums or queue_nums,
            write_queue_nums=write_queue_nums or queue_nums, perm=perm,
            topic_filter_type=TOPIC_FILTER_SINGLE_TAG, topic_sys_flag=0, order=order,
            attributes=",".join(f"+{k}={v}" for k, v in sorted(attributes.items())) if attributes else None)
        for addr in addrs:
            await self._session.invoke(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, header)
        self._session.routes.invalidate(topic)
        return addrs

    async def primary_addrs(self, cluster: str | None = None) -> dict[str, str]:
        """Broker group name -> primary address, for every group of ``cluster`` (None: every cluster)
        that has a primary registered."""
        return {name: addr for name, addr in (await self.broker_groups(cluster)).items() if addr is not None}

    async def broker_groups(self, cluster: str | None = None) -> dict[str, str | None]:
        """Broker group name -> primary address, or None for a group registered by its replicas alone (no
        primary: down, or a failover under way), for every group of ``cluster`` (None: every cluster)."""
        info = await self.cluster_info()
        names = sorted(info.broker_addr_table) if cluster is None else sorted(info.cluster_addr_table.get(cluster, ()))
        return {name: broker.master_addr for name in names
                if (broker := info.broker_addr_table.get(name)) is not None}

    async def all_topic_config(self, broker_addr: str) -> dict[str, TopicConfig]:
        resp = await self._session.invoke(broker_addr, RequestCode.GET_ALL_TOPIC_CONFIG)
        body = loads_rocketmq(resp.body) if resp.body else {}
        table = body.get("topicConfigTable") if isinstance(body, dict) else None
        if not isinstance(table, dict):
            raise ProtocolError(f"GET_ALL_TOPIC_CONFIG body from {broker_addr} has no topicConfigTable")
        try:
            return dict(TopicConfigTable.from_json(body).topic_configs)
        except ProtocolError as exc:
            raise ProtocolError(f"GET_ALL_TOPIC_CONFIG body from {broker_addr}: {exc}") from exc

    async def delete_topic(self, topic: str, cluster: str | None = None) -> list[str]:
        """DELETE_TOPIC_IN_BROKER on every primary of ``cluster`` (None: every cluster), then
        DELETE_TOPIC_IN_NAMESRV on the name servers. Returns the primaries' addresses."""
        addrs = sorted((await self.primary_addrs(cluster)).values())
        header = TopicRequestHeader(topic=topic)
        for addr in addrs:
            await self._session.invoke(addr, RequestCode.DELETE_TOPIC_IN_BROKER, header)
        await self._session.routes.invoke_namesrv(RequestCode.DELETE_TOPIC_IN_NAMESRV, header)
        self._session.routes.invalidate(topic)
        return addrs

    # -- subscription groups --------------------------------------------------------------------

    async def all_subscription_groups(self, broker_addr: str) -> dict[str, dict[str, Any]]:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG of one broker: group -> its SubscriptionGroupConfig JSON."""
        resp = await self._session.invoke(broker_addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        body = loads_rocketmq(resp.body) if resp.body else {}
        table = body.get("subscriptionGroupTable") if isinstance(body, dict) else None
        if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
            raise ProtocolError(f"GET_ALL_SUBSCRIPTIONGROUP_CONFIG body from {broker_addr} has no "
                                f"subscriptionGroupTable of objects")
        return {str(k): dict(v) for k, v in table.items()}

    async def create_subscription_group(self, config: Mapping[str, Any], cluster: str | None = None) -> list[str]:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (body: SubscriptionGroupConfig JSON with ``groupName``) on
        every primary of ``cluster`` (None: every cluster). Returns the primaries' addresses."""
        if not config.get("groupName"):
            raise ConfigError("subscription group config needs a groupName")
        addrs = sorted((await self.primary_addrs(cluster)).values())
        for addr in addrs:
            await self._session.invoke(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                       body=dumps_rocketmq(dict(config)))
        return addrs

    async def delete_subscription_group(self, group: str, cluster: str | None = None) -> list[str]:
        addrs = sorted((await self.primary_addrs(cluster)).values())
        for addr in addrs:
            await self._session.invoke(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP,
                                       DeleteSubscriptionGroupRequestHeader(group_name=group))
        return addrs

    async def ha_status(self, broker_addr: str) -> HAStatus:
        """GET_BROKER_HA_STATUS of one broker (``protocol.ha_status.HAStatus``)."""
        resp = await self._session.invoke(broker_addr, RequestCode.GET_BROKER_HA_STATUS)
        return HAStatus.from_json(resp.body, broker_addr)

    async def epoch_cache(self, broker_addr: str) -> EpochEntryCacheStatus:
        """GET_BROKER_EPOCH_CACHE of one controller-mode broker: its epoch entries and max offset."""
        resp = await self._session.invoke(broker_addr, RequestCode.GET_BROKER_EPOCH_CACHE)
        return EpochEntryCacheStatus.from_json(resp.body, broker_addr)

    # -- offsets --------------------------------------------------------------------------------

    async def _invoke_read(self, topic: str, broker_name: str, code: int, header: Any) -> tuple[str, RemotingCommand]:
        """``code`` to the broker of ``broker_name`` that serves reads of ``topic`` (its primary, else its lowest
        listed replica); the topic's route is dropped after an ``invalid_route`` error. (address, response)."""
        routes = self._session.routes
        await routes.get(topic)
        addr, _ = await routes.require_read_addr(topic, broker_name)
        try:
            return addr, await self._session.invoke(addr, code, header)
        except RocketMQError as exc:
            if exc.invalid_route:
                routes.invalidate(topic)
            raise

    async def _queue_offset(self, code: int, mq: MessageQueue, header: Any) -> int:
        addr, resp = await self._invoke_read(mq.topic, mq.broker_name, code, header)
        try:
            return OffsetResponseHeader.from_ext(resp.ext_fields).offset
        except ProtocolError as exc:
            raise ProtocolError(f"offset response from {addr}: {exc}") from exc

    async def min_offset(self, mq: MessageQueue) -> int:
        return await self._queue_offset(RequestCode.GET_MIN_OFFSET, mq,
                                        QueueRequestHeader(topic=mq.topic, queue_id=mq.queue_id))

    async def max_offset(self, mq: MessageQueue) -> int:
        """One past the last message's queue offset (the next offset to be written)."""
        return await self._queue_offset(RequestCode.GET_MAX_OFFSET, mq,
                                        QueueRequestHeader(topic=mq.topic, queue_id=mq.queue_id))

    async def max_offset_at(self, broker_addr: str, topic: str, queue_id: int) -> int:
        """GET_MAX_OFFSET of one queue asked of one broker (no route needed: ``SCHEDULE_TOPIC_XXXX`` has none)."""
        resp = await self._session.invoke(broker_addr, RequestCode.GET_MAX_OFFSET,
                                          QueueRequestHeader(topic=topic, queue_id=queue_id))
        try:
            return OffsetResponseHeader.from_ext(resp.ext_fields).offset
        except ProtocolError as exc:
            raise ProtocolError(f"offset response from {broker_addr}: {exc}") from exc

    async def topic_stats(self, broker_addr: str, topic: str) -> TopicStatsTable:
        """GET_TOPIC_STATS_INFO of one broker: min / max offset (and last store time) of every queue of
        ``topic`` it holds, in one request (TopicNotExistError when it has no config of the topic)."""
        resp = await self._session.invoke(broker_addr, RequestCode.GET_TOPIC_STATS_INFO,
                                          TopicRequestHeader(topic=topic))
        return TopicStatsTable.decode(resp.body or b"", broker_addr)

    async def topic_offsets(self, topic: str, broker_name: str) -> dict[int, TopicOffset]:
        """Queue id -> offsets of ``topic``'s queues on broker group ``broker_name``: ``topic_stats`` of the broker
        ``max_offset`` asks (same address choice and route refresh), so each ``max_offset`` of those queues is
        its ``max_offset`` here. A queue the broker's config does not cover is absent."""
        addr, resp = await self._invoke_read(topic, broker_name, RequestCode.GET_TOPIC_STATS_INFO,
                                             TopicRequestHeader(topic=topic))
        table = TopicStatsTable.decode(resp.body or b"", addr)
        return {q.queue_id: offsets for q, offsets in table.offsets.items() if q.topic == topic}

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The first queue offset whose message was stored at or after ``timestamp_ms``."""
        return await self._queue_offset(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, mq,
                                        SearchOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id,
                                                                  timestamp=timestamp_ms))

    async def consumer_offset(self, group: str, mq: MessageQueue) -> int | None:
        """The group's committed offset on ``mq``; None if it never committed one."""
        return await query_consumer_offset(self._session, group, mq)

    async def update_consumer_offset(self, group: str, mq: MessageQueue, offset: int) -> None:
        """UPDATE_CONSUMER_OFFSET on the primary of ``mq``'s broker group: ``offset`` is the group's next
        offset to consume. As in RocketMQ the last commit wins, even a lower one (callers that must never
        move a group backwards compare first)."""
        routes = self._session.routes
        await routes.get(mq.topic)
        addr, _ = await routes.require_read_addr(mq.topic, mq.broker_name, MASTER_ID)
        header = UpdateConsumerOffsetRequestHeader(consumer_group=group, topic=mq.topic, queue_id=mq.queue_id,
                                                   commit_offset=offset)
        try:
            await self._session.invoke(addr, RequestCode.UPDATE_CONSUMER_OFFSET, header)
        except RocketMQError as exc:
            if exc.invalid_route:
                routes.invalidate(mq.topic)
            raise

    async def all_consumer_offsets(self, broker_addr: str) -> dict[tuple[str, str], dict[int, int]]:
        """GET_ALL_CONSUMER_OFFSET of one broker: (topic, group) -> queue id -> committed next offset.
        The table's keys are ``<topic>@<group>`` (topics never contain ``@``; groups may)."""
        resp = await self._session.invoke(broker_addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
        body = loads_rocketmq(resp.body) if resp.body else {}
        table = body.get("offsetTable") if isinstance(body, dict) else None
        if not isinstance(table, dict):
            raise ProtocolError(f"GET_ALL_CONSUMER_OFFSET body from {broker_addr} has no offsetTable")
        out: dict[tuple[str, str], dict[int, int]] = {}
        try:
            for key, queues in table.items():
                topic, sep, group = str(key).partition("@")
                if not sep or not topic or not group:
                    raise ValueError(f"offset key {key!r} is not <topic>@<group>")
                out[(topic, group)] = {int(q): int(o) for q, o in queues.items()}
        except (AttributeError, TypeError, ValueError) as exc:
            raise ProtocolError(f"malformed consumer offsets from {broker_addr}: {exc}") from exc
        return out

    async def all_delay_offsets(self, broker_addr: str) -> dict[int, int]:
        """GET_ALL_DELAY_OFFSET of one broker: delay level -> next SCHEDULE_TOPIC_XXXX queue offset its schedule
        service delivers (a replica answers with its copy of its primary's)."""
        resp = await self._session.invoke(broker_addr, RequestCode.GET_ALL_DELAY_OFFSET)
        body = loads_rocketmq(resp.body) if resp.body else {}
        table = body.get("offsetTable") if isinstance(body, dict) else None
        if not isinstance(table, dict):
            raise ProtocolError(f"GET_ALL_DELAY_OFFSET body from {broker_addr} has no offsetTable")
        return decode_delay_offsets(body, broker_addr)

    async def consumer_list(self, group: str, topic: str) -> list[str]:
        """Client ids of the group's live consumers, as the brokers of ``topic`` know them. The topic's route
        is dropped after an ``invalid_route`` error, as for every other broker request of this class."""
        routes = self._session.routes
        route = await routes.get(topic)
        ids: set[str] = set()
        header = GetConsumerListByGroupRequestHeader(consumer_group=group)
        for broker in route.broker_datas:
            addr = broker.select_addr()
            if addr is None:
                continue
            try:
                resp = await self._session.invoke(addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP, header)
            except RocketMQError as exc:
                # RocketMQ answers SYSTEM_ERROR "no consumer for this group" when there is none.
                if getattr(exc, "code", None) == ResponseCode.SYSTEM_ERROR and "no consumer" in str(exc):
                    continue
                if exc.invalid_route:  # a dead or replaced primary: the next call asks the name servers
                    routes.invalidate(topic)
                raise
            body = loads_rocketmq(resp.body) if resp.body else {}
            if isinstance(body, dict):
                ids.update(str(i) for i in body.get("consumerIdList") or [])
        return sorted(ids)


def _target_brokers(info: ClusterInfo, cluster: str | Sequence[str] | None,
                    broker_names: Sequence[str] | None) -> list[str]:
    if broker_names is not None:
        if cluster is not None:
            raise ConfigError("create_topic: give cluster or broker_names, not both")
        names = list(broker_names)
    elif cluster is None:
        names = sorted(info.broker_addr_table)
    else:
        clusters = [cluster] if isinstance(cluster, str) else list(cluster)
        names = []
        for c in clusters:
            if c not in info.cluster_addr_table:
                known = sorted(info.cluster_addr_table)
                raise TopicNotExistError(ResponseCode.TOPIC_NOT_EXIST,
                                         f"cluster {c!r} is not registered (known: {known})")
            names.extend(info.cluster_addr_table[c])
        names = sorted(set(names))
    if not names:
        raise error_for_response(ResponseCode.SERVICE_NOT_AVAILABLE, "no broker group to create the topic on")
    return names


class Admin(SyncClient[AsyncAdmin]):
    """Thread-safe synchronous admin client over a shared background event loop."""

    def __init__(self, namesrv_addr: str | Sequence[str], *, request_timeout: float = 3.0,
                 route_ttl: float = 30.0, clock: Clock = SYSTEM_CLOCK,
                 credentials: SessionCredentials | None = None, tls: TlsClientSettings | None = None,
                 shared_runtime: bool = True) -> None:
        super().__init__(shared_runtime=shared_runtime)
        self._init_kwargs = dict(namesrv_addr=namesrv_addr, request_timeout=request_timeout,
                                 route_ttl=route_ttl, clock=clock, credentials=credentials, tls=tls)
        self.request_timeout: float = AsyncAdmin(**self._init_kwargs)._session.request_timeout

    def _make_core(self, remoting: RemotingClient) -> AsyncAdmin:
        return AsyncAdmin(**self._init_kwargs, remoting=remoting)

    async def _close_core(self, core: AsyncAdmin) -> None:
        await core.close()

    def _t(self, n: int = 3) -> float:
        return self.request_timeout * n

    def call(self, factory: Callable[[AsyncAdmin], Coroutine[Any, Any, T]], requests: int = 3) -> T:
        """``factory(the async admin)`` run on the client's loop with the time of ``requests`` requests: for
        request families of their own modules (``client.acl_admin.AclAdmin``)."""
        return self._call(factory, self._t(requests))

    def cluster_info(self) -> ClusterInfo:
        return self._call(lambda a: a.cluster_info(), self._t())

    def topic_route(self, topic: str) -> TopicRouteData:
        return self._call(lambda a: a.topic_route(topic), self._t())

    def topic_list(self) -> list[str]:
        return self._call(lambda a: a.topic_list(), self._t())

    def wait_for_route(self, topic: str, timeout: float = 10.0, *, writable: bool = True,
                       min_queues: int = 1) -> TopicRouteData:
        return self._call(lambda a: a.wait_for_route(topic, timeout, writable=writable, min_queues=min_queues),
                          timeout + self._t())

    def create_topic(self, topic: str, queue_nums: int = 8, perm: int = DEFAULT_PERM,
                     cluster: str | Sequence[str] | None = None, *, broker_names: Sequence[str] | None = None,
                     order: bool = False, read_queue_nums: int | None = None,
                     write_queue_nums: int | None = None, attributes: Mapping[str, str] | None = None) -> list[str]:
        return self._call(lambda a: a.create_topic(
            topic, queue_nums, perm, cluster, broker_names=broker_names, order=order,
            read_queue_nums=read_queue_nums, write_queue_nums=write_queue_nums, attributes=attributes),
            self._t(10))

    def primary_addrs(self, cluster: str | None = None) -> dict[str, str]:
        return self._call(lambda a: a.primary_addrs(cluster), self._t())

    def broker_groups(self, cluster: str | None = None) -> dict[str, str | None]:
        return self._call(lambda a: a.broker_groups(cluster), self._t())

    def all_topic_config(self, broker_addr: str) -> dict[str, TopicConfig]:
        return self._call(lambda a: a.all_topic_config(broker_addr), self._t())

    def delete_topic(self, topic: str, cluster: str | None = None) -> list[str]:
        return self._call(lambda a: a.delete_topic(topic, cluster), self._t(10))

    def all_subscription_groups(self, broker_addr: str) -> dict[str, dict[str, Any]]:
        return self._call(lambda a: a.all_subscription_groups(broker_addr), self._t())

    def create_subscription_group(self, config: Mapping[str, Any], cluster: str | None = None) -> list[str]:
        return self._call(lambda a: a.create_subscription_group(config, cluster), self._t(10))

    def delete_subscription_group(self, group: str, cluster: str | None = None) -> list[str]:
        return self._call(lambda a: a.delete_subscription_group(group, cluster), self._t(10))

    def update_consumer_offset(self, group: str, mq: MessageQueue, offset: int) -> None:
        self._call(lambda a: a.update_consumer_offset(group, mq, offset), self._t())

    def all_consumer_offsets(self, broker_addr: str) -> dict[tuple[str, str], dict[int, int]]:
        return self._call(lambda a: a.all_consumer_offsets(broker_addr), self._t())

    def all_delay_offsets(self, broker_addr: str) -> dict[int, int]:
        return self._call(lambda a: a.all_delay_offsets(broker_addr), self._t())

    def ha_status(self, broker_addr: str) -> HAStatus:
        return self._call(lambda a: a.ha_status(broker_addr), self._t())

    def epoch_cache(self, broker_addr: str) -> EpochEntryCacheStatus:
        return self._call(lambda a: a.epoch_cache(broker_addr), self._t())

    def min_offset(self, mq: MessageQueue) -> int:
        return self._call(lambda a: a.min_offset(mq), self._t())

    def max_offset(self, mq: MessageQueue) -> int:
        return self._call(lambda a: a.max_offset(mq), self._t())

    def max_offset_at(self, broker_addr: str, topic: str, queue_id: int) -> int:
        return self._call(lambda a: a.max_offset_at(broker_addr, topic, queue_id), self._t())

    def topic_stats(self, broker_addr: str, topic: str) -> TopicStatsTable:
        return self._call(lambda a: a.topic_stats(broker_addr, topic), self._t())

    def topic_offsets(self, topic: str, broker_name: str) -> dict[int, TopicOffset]:
        return self._call(lambda a: a.topic_offsets(topic, broker_name), self._t())

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return self._call(lambda a: a.search_offset(mq, timestamp_ms), self._t())

    def consumer_offset(self, group: str, mq: MessageQueue) -> int | None:
        return self._call(lambda a: a.consumer_offset(group, mq), self._t())

    def consumer_list(self, group: str, topic: str) -> list[str]:
        return self._call(lambda a: a.consumer_list(group, topic), self._t(10))
