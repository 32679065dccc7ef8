"""Pull consumer: read a queue from an offset, and keep a consumer group's committed offsets.

Used by the Spark source on executors (one queue per partition, offsets owned by the connector)
and by tests and the CLI. Pulls are stateless except for one thing the broker asks for: the
``suggestWhichBrokerId`` of a pull response says which broker of the group to read that queue
from next (a replica when the primary is far behind in memory); the next pull follows it, falling
back to the primary when that id is not in the route. A replica that may not serve reads answers a
pull PULL_RETRY_IMMEDIATELY at the same offset with suggestWhichBrokerId 0: the pull goes to the
primary at once, or, when the route names no other primary (a failover under way: the route lists only a
replica, or a demoted primary as id 0), fails with a retriable ServiceNotAvailableError and drops the route,
instead of looking like an empty read.

Tag filtering works as in Java: the broker filters by tag hash code only, so the client keeps a
message only if its TAGS is one of the expression's tags ("*" keeps everything).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from broker_store.client.records import PULL_STATUS_BY_CODE, MessageQueue, PullResult, PullStatus
from broker_store.client.route_cache import RouteCache, subscribe_queues
from broker_store.client.runtime import SyncClient
from broker_store.client.session import ClientSession, require_positive
from broker_store.client.unique_id import local_ipv4
from broker_store.clock import SYSTEM_CLOCK, Clock, wall_ms
from broker_store.net.client import RemotingClient
from broker_store.net.tls_settings import TlsClientSettings
from broker_store.protocol.acl import SessionCredentials
from broker_store.protocol.codes import (
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    RequestCode,
    ResponseCode,
)
from broker_store.protocol.errors import (
    BrokerResponseError,
    ConfigError,
    ProtocolError,
    RocketMQError,
    ServiceNotAvailableError,
    TransportError,
)
from broker_store.protocol.headers import (
    OffsetResponseHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from broker_store.protocol.message import decode_stored_messages, tags_hash_code, validate_topic
from broker_store.protocol.route import MASTER_ID

log = logging.getLogger(__name__)

SUB_ALL = "*"
EXPRESSION_TYPE_TAG = "TAG"
LONG_POLL_MARGIN = 5.0
OFFSET_UPDATES_IN_FLIGHT = 32
"""UPDATE_CONSUMER_OFFSET requests ``update_consumer_offsets`` keeps in flight at once."""
"""Seconds a long-polling pull waits beyond suspendTimeoutMillis for the broker's answer."""
_instance_seq = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Subscription:
    """A parsed tag expression ("*" or "a || b"), as Java's FilterAPI.buildSubscriptionData."""

    topic: str
    expression: str
    """What goes on the wire as ``subscription``."""
    tags: frozenset[str]
    """Empty means every tag (and untagged messages) match."""
    sub_version: int

    @classmethod
    def parse(cls, topic: str, expression: str | None, version: int) -> Subscription:
        """``version``: the subVersion, wall-clock ms when the subscription was made (as Java's)."""
        expr = (expression or "").strip()
        if not expr or expr == SUB_ALL:
            return cls(topic, SUB_ALL, frozenset(), version)
        tags = frozenset(t.strip() for t in expr.split("||") if t.strip())
        if not tags:
            raise ValueError(f"tag expression {expression!r} names no tag")
        return cls(topic, expr, tags, version)

    def matches(self, tags: str | None) -> bool:
        return not self.tags or (tags is not None and tags in self.tags)

    def to_json(self) -> dict[str, Any]:
        return {"classFilterMode": False, "codeSet": sorted(tags_hash_code(t) for t in self.tags),
                "expressionType": EXPRESSION_TYPE_TAG, "subString": self.expression,
                "subVersion": self.sub_version, "tagsSet": sorted(self.tags), "topic": self.topic}


def make_client_id() -> str:
    """ip@pid#n: unique per client instance in this process (Java: ip@instanceName)."""
    return f"{socket.inet_ntoa(local_ipv4())}@{os.getpid()}#{next(_instance_seq)}"


class AsyncPullConsumer:
    """Asyncio pull consumer for one consumer group. Methods must run on one event loop.

    ``heartbeat_interval``: seconds of ``clock`` between HEART_BEAT rounds to the brokers of the topics pulled
    so far (the broker lists the group's clients from them); None disables heartbeats. The first
    round for a new topic goes out right after its first pull. ``close()`` unregisters.
    """

    def __init__(self, namesrv_addr: str | Sequence[str], group: str, *, pull_timeout: float = 10.0,
                 request_timeout: float = 3.0, route_ttl: float = 30.0,
                 heartbeat_interval: float | None = 30.0, client_id: str | None = None,
                 remoting: RemotingClient | None = None, clock: Clock = SYSTEM_CLOCK,
                 credentials: SessionCredentials | None = None, tls: TlsClientSettings | None = None) -> None:
        try:
            validate_topic(group)
        except ProtocolError as exc:
            raise ConfigError(f"group: {exc}") from exc
        require_positive("pull_timeout", pull_timeout)
        if heartbeat_interval is not None:
            require_positive("heartbeat_interval", heartbeat_interval)
        self.group = group
        self.pull_timeout = pull_timeout
        self.heartbeat_interval = heartbeat_interval
        self.client_id = client_id or make_client_id()
        self._session = ClientSession(namesrv_addr, remoting=remoting, request_timeout=request_timeout,
                                      route_ttl=route_ttl, clock=clock, credentials=credentials, tls=tls)
        self._pull_from: dict[MessageQueue, int] = {}
        self._subscriptions: dict[str, Subscription] = {}
        self._heartbeat_addrs: set[str] = set()
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._heartbeat_wakeup: asyncio.Event | None = None
        self._closed = False

    @property
    def routes(self) -> RouteCache:
        return self._session.routes

    async def start(self) -> None:
        if self.heartbeat_interval is not None and self._heartbeat_task is None:
            self._heartbeat_wakeup = asyncio.Event()
            self._heartbeat_task = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat_task
        await self._unregister()
        await self._session.close()

    async def __aenter__(self) -> AsyncPullConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- queues and pulls -----------------------------------------------------------------------

    async def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues, sorted; TopicNotExistError if the name servers have no route."""
        route = await self._session.routes.get(topic)
        return subscribe_queues(topic, route)

    def pull_from_broker_id(self, mq: MessageQueue) -> int:
        """The broker id the next pull of ``mq`` goes to (the last suggestWhichBrokerId)."""
        return self._pull_from.get(mq, MASTER_ID)

    def forget_route(self, topic: str) -> None:
        """The next pull of ``topic`` asks the name servers for its route anew, and goes to the primary (an answer
        that contradicts what the primary said before: a broker deposed by a failover, still on this route)."""
        self._session.routes.invalidate(topic)
        for mq in [mq for mq in self._pull_from if mq.topic == topic]:
            del self._pull_from[mq]

    async def pull(self, mq: MessageQueue, offset: int, max_nums: int = 32, *, expression: str = SUB_ALL,
                   suspend_timeout_ms: int = 0, timeout: float | None = None,
                   commit_offset: int | None = None, decode: bool = True) -> PullResult:
        """Pull up to ``max_nums`` messages of ``mq`` starting at ``offset``.

        ``suspend_timeout_ms`` > 0 long-polls: the broker holds the request until messages arrive
        or that many ms pass (then NO_NEW_MSG). ``timeout`` (seconds) must exceed the suspension;
        by default it is ``pull_timeout``, or suspension + LONG_POLL_MARGIN when long polling.
        ``commit_offset`` piggy-backs an offset commit for the group (primary only, as Java).
        ``decode=False`` returns the records undecoded in ``PullResult.raw`` (forwarding them costs
        no per-message work); with a tag expression they are still decoded to apply the exact
        re-filter, and only the matching records' bytes are returned.
        """
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        if max_nums <= 0:
            raise ValueError(f"max_nums must be > 0, got {max_nums}")
        if suspend_timeout_ms < 0:
            raise ValueError(f"suspend_timeout_ms must be >= 0, got {suspend_timeout_ms}")
        suspend_s = suspend_timeout_ms / 1000
        if timeout is None:
            timeout = self.pull_timeout
            if suspend_timeout_ms:
                timeout = max(timeout, suspend_s + LONG_POLL_MARGIN)
        elif suspend_timeout_ms and timeout <= suspend_s:
            raise ValueError(f"timeout {timeout}s must exceed the long-poll suspension of {suspend_s}s")
        sub = self._subscribe(mq.topic, expression)
        routes = self._session.routes
        await routes.get(mq.topic)
        addr, broker_id = await routes.require_read_addr(mq.topic, mq.broker_name,
                                                         self.pull_from_broker_id(mq))
        sys_flag = PULL_FLAG_SUBSCRIPTION
        if suspend_timeout_ms:
            sys_flag |= PULL_FLAG_SUSPEND
        if commit_offset is not None and broker_id == MASTER_ID:
            sys_flag |= PULL_FLAG_COMMIT_OFFSET
        header = PullMessageRequestHeader(
            consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id, queue_offset=offset,
            max_msg_nums=max_nums, sys_flag=sys_flag, commit_offset=commit_offset or 0,
            suspend_timeout_millis=suspend_timeout_ms, sub_version=sub.sub_version,
            subscription=sub.expression, expression_type=EXPRESSION_TYPE_TAG)
        try:
            resp = await self._session.invoke(addr, RequestCode.PULL_MESSAGE, header, timeout=timeout,
                                              accept=PULL_STATUS_BY_CODE)
        except (TransportError, BrokerResponseError) as exc:
            self._on_error(mq, exc)
            raise
        try:
            rh = PullMessageResponseHeader.from_ext(resp.ext_fields)
            status = PULL_STATUS_BY_CODE[ResponseCode(resp.code)]
            found = status is PullStatus.FOUND and bool(resp.body)
            raw = b""
            if decode or sub.tags:
                messages = decode_stored_messages(resp.body) if found else []
            else:
                messages, raw = [], resp.body if found else b""
        except ProtocolError as exc:
            raise ProtocolError(f"pull response from {addr} for {mq}: {exc}") from exc
        self._pull_from[mq] = rh.suggest_which_broker_id
        if (status is PullStatus.NO_MATCHED_MSG and rh.next_begin_offset == offset
                and rh.suggest_which_broker_id == MASTER_ID):
            # A replica that may not serve reads sent the pull back to the primary without reading.
            if broker_id != MASTER_ID and routes.master_addr(mq.broker_name) is not None:
                return await self.pull(mq, offset, max_nums, expression=expression,
                                       suspend_timeout_ms=suspend_timeout_ms, timeout=timeout,
                                       commit_offset=commit_offset, decode=decode)
            # The route names no primary (a failover under way), or names as primary a broker that now
            # answers as a replica: a stale route, not an empty queue.
            routes.invalidate(mq.topic)
            raise ServiceNotAvailableError(
                ResponseCode.SERVICE_NOT_AVAILABLE,
                f"pull of {mq.topic}/{mq.broker_name}/{mq.queue_id} at {offset}: broker id {broker_id} of "
                f"{mq.broker_name} sends reads to the primary and the route names no other primary", addr=addr)
        if sub.tags:
            matching = [sub.matches(m.tags) for m in messages]
            if not decode:
                body, pos, kept = resp.body, 0, []
                for m, keep in zip(messages, matching, strict=True):
                    if keep:
                        kept.append(body[pos:pos + m.store_size])
                    pos += m.store_size
                messages, raw = [], b"".join(kept)
            else:
                messages = [m for m, keep in zip(messages, matching, strict=True) if keep]
        return PullResult(status=status, next_begin_offset=rh.next_begin_offset, min_offset=rh.min_offset,
                          max_offset=rh.max_offset, messages=messages,
                          suggest_which_broker_id=rh.suggest_which_broker_id, raw=raw)

    def _on_error(self, mq: MessageQueue, exc: RocketMQError) -> None:
        # A failing replica (or a stale route) sends the next pull back to the primary.
        self._pull_from.pop(mq, None)
        if exc.invalid_route:
            self._session.routes.invalidate(mq.topic)

    # -- consumer offsets -----------------------------------------------------------------------

    async def _offset_addr(self, mq: MessageQueue) -> str:
        await self._session.routes.get(mq.topic)
        addr, _ = await self._session.routes.require_read_addr(mq.topic, mq.broker_name, MASTER_ID)
        return addr

    async def update_consumer_offset(self, mq: MessageQueue, offset: int) -> None:
        """Commit ``offset`` (the next offset to consume) for this group on ``mq``."""
        addr = await self._offset_addr(mq)
        header = UpdateConsumerOffsetRequestHeader(consumer_group=self.group, topic=mq.topic,
                                                   queue_id=mq.queue_id, commit_offset=offset)
        try:
            await self._session.invoke(addr, RequestCode.UPDATE_CONSUMER_OFFSET, header)
        except RocketMQError as exc:
            if exc.invalid_route:
                self._session.routes.invalidate(mq.topic)
            raise


    async def update_consumer_offsets(self, offsets: Sequence[tuple[MessageQueue, int]]
                                      ) -> list[RocketMQError | None]:
        """``update_consumer_offset`` of every (queue, offset), concurrently (at most
        ``OFFSET_UPDATES_IN_FLIGHT`` requests at once): each one's error, or None, in order. One call for a
        whole batch's queues instead of a round trip (and a waiting thread) per queue."""
        gate = asyncio.Semaphore(OFFSET_UPDATES_IN_FLIGHT)

        async def one(mq: MessageQueue, offset: int) -> RocketMQError | None:
            async with gate:
                try:
                    await self.update_consumer_offset(mq, offset)
                except RocketMQError as exc:
                    return exc
                return None

        return list(await asyncio.gather(*(one(mq, offset) for mq, offset in offsets)))
    async def query_consumer_offset(self, mq: MessageQueue) -> int | None:
        """The group's committed offset on ``mq``, None if it never committed one (QUERY_NOT_FOUND)."""
        return await query_consumer_offset(self._session, self.group, mq)

    # -- heartbeats -----------------------------------------------------------------------------

    def _subscribe(self, topic: str, expression: str | None) -> Subscription:
        sub = self._subscriptions.get(topic)
        if sub is None or sub.expression != (expression or SUB_ALL).strip():
            sub = Subscription.parse(topic, expression, wall_ms(self._session.clock))
            is_new = topic not in self._subscriptions
            self._subscriptions[topic] = sub
            if is_new and self._heartbeat_wakeup is not None:
                self._heartbeat_wakeup.set()
        return sub

    def heartbeat_body(self) -> bytes:
        """HeartbeatData JSON for this group and the topics pulled so far."""
        return orjson.dumps({
            "clientID": self.client_id,
            "consumerDataSet": [{
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "consumeType": "CONSUME_ACTIVELY",
                "groupName": self.group, "messageModel": "CLUSTERING",
                "subscriptionDataSet": [s.to_json() for s in self._subscriptions.values()], "unitMode": False,
            }],
            "producerDataSet": [],
        })

    async def heartbeat(self) -> None:
        """Send one heartbeat round to every broker of every subscribed topic's route."""
        routes = self._session.routes
        addrs: set[str] = set()
        for topic in list(self._subscriptions):
            try:
                route = await routes.get(topic)
            except RocketMQError as exc:
                log.debug("no route for heartbeat of topic %s: %s", topic, exc)
                continue
            for b in route.broker_datas:
                addrs.update(b.broker_addrs.values())
        body = self.heartbeat_body()
        results = await asyncio.gather(
            *(self._session.invoke(a, RequestCode.HEART_BEAT, body=body) for a in sorted(addrs)),
            return_exceptions=True)
        for addr, result in zip(sorted(addrs), results, strict=True):
            if isinstance(result, RocketMQError):
                log.debug("heartbeat to %s failed: %s", addr, result)
            elif isinstance(result, BaseException):
                raise result
            else:
                self._heartbeat_addrs.add(addr)

    async def _heartbeat_loop(self) -> None:
        assert self._heartbeat_wakeup is not None and self.heartbeat_interval is not None
        while True:
            await self._session.clock.wait_for(self._heartbeat_wakeup.wait(), self.heartbeat_interval)
            self._heartbeat_wakeup.clear()
            if self._subscriptions:
                await self.heartbeat()

    async def _unregister(self) -> None:
        header = UnregisterClientRequestHeader(client_id=self.client_id, consumer_group=self.group)
        for addr in sorted(self._heartbeat_addrs):
            try:
                await self._session.invoke(addr, RequestCode.UNREGISTER_CLIENT, header)
            except RocketMQError as exc:
                log.debug("unregister from %s failed: %s", addr, exc)
        self._heartbeat_addrs.clear()


async def query_consumer_offset(session: ClientSession, group: str, mq: MessageQueue) -> int | None:
    """QUERY_CONSUMER_OFFSET with setZeroIfNotFound=false: None when the group has no offset.
    (4.x brokers ignore that flag and may answer 0 for a queue whose first message is in memory.)"""
    await session.routes.get(mq.topic)
    addr, _ = await session.routes.require_read_addr(mq.topic, mq.broker_name, MASTER_ID)
    header = QueryConsumerOffsetRequestHeader(consumer_group=group, topic=mq.topic, queue_id=mq.queue_id,
                                              set_zero_if_not_found=False)
    try:
        resp = await session.invoke(addr, RequestCode.QUERY_CONSUMER_OFFSET, header,
                                    accept=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
    except RocketMQError as exc:
        if exc.invalid_route:
            session.routes.invalidate(mq.topic)
        raise
    if resp.code == ResponseCode.QUERY_NOT_FOUND:
        return None
    try:
        return OffsetResponseHeader.from_ext(resp.ext_fields).offset
    except ProtocolError as exc:
        raise ProtocolError(f"QUERY_CONSUMER_OFFSET response from {addr}: {exc}") from exc


class PullConsumer(SyncClient[AsyncPullConsumer]):
    """Thread-safe synchronous pull consumer over a shared background event loop.

    Picklable before and after start (only constructor arguments travel). Arguments are those of
    ``AsyncPullConsumer`` except ``remoting``.
    """

    def __init__(self, namesrv_addr: str | Sequence[str], group: str, *, pull_timeout: float = 10.0,
                 request_timeout: float = 3.0, route_ttl: float = 30.0,
                 heartbeat_interval: float | None = 30.0, client_id: str | None = None,
                 clock: Clock = SYSTEM_CLOCK, credentials: SessionCredentials | None = None,
                 tls: TlsClientSettings | None = None, shared_runtime: bool = True) -> None:
        super().__init__(shared_runtime=shared_runtime)
        self._init_kwargs = dict(
            namesrv_addr=namesrv_addr, group=group, pull_timeout=pull_timeout,
            request_timeout=request_timeout, route_ttl=route_ttl, heartbeat_interval=heartbeat_interval,
            client_id=client_id, clock=clock, credentials=credentials, tls=tls)
        probe = AsyncPullConsumer(**self._init_kwargs)  # validates options on the caller's thread
        self.pull_timeout = probe.pull_timeout
        self.request_timeout = probe._session.request_timeout

    def _make_core(self, remoting: RemotingClient) -> AsyncPullConsumer:
        return AsyncPullConsumer(**self._init_kwargs, remoting=remoting)

    async def _start_core(self, core: AsyncPullConsumer) -> None:
        await core.start()

    async def _close_core(self, core: AsyncPullConsumer) -> None:
        await core.close()

    @property
    def client_id(self) -> str:
        return self._ensure_started()[1].client_id

    def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        return self._call(lambda c: c.fetch_message_queues(topic), self.request_timeout * 3)

    def pull(self, mq: MessageQueue, offset: int, max_nums: int = 32, *, expression: str = SUB_ALL,
             suspend_timeout_ms: int = 0, timeout: float | None = None,
             commit_offset: int | None = None, decode: bool = True) -> PullResult:
        wait = timeout if timeout is not None else max(self.pull_timeout,
                                                       suspend_timeout_ms / 1000 + LONG_POLL_MARGIN)
        return self._call(lambda c: c.pull(mq, offset, max_nums, expression=expression,
                                           suspend_timeout_ms=suspend_timeout_ms, timeout=timeout,
                                           commit_offset=commit_offset, decode=decode),
                          wait + self.request_timeout * 2)

    def pull_async(self, mq: MessageQueue, offset: int, max_nums: int = 32, *, expression: str = SUB_ALL,
                   timeout: float | None = None, decode: bool = True) -> concurrent.futures.Future[PullResult]:
        """``pull`` (no long polling) started at once; the future resolves to the PullResult or the
        error. The pull's own ``timeout`` (default ``pull_timeout``) bounds it; ``pull_wait_budget``
        is how long a caller should wait for the future at most."""
        return self._submit(lambda c: c.pull(mq, offset, max_nums, expression=expression, timeout=timeout,
                                             decode=decode))

    def forget_route(self, topic: str) -> None:
        """``AsyncPullConsumer.forget_route``."""
        async def forget(c: AsyncPullConsumer) -> None:
            c.forget_route(topic)
        self._call(forget, self.request_timeout)

    def pull_wait_budget(self, timeout: float | None = None) -> float:
        """Seconds to wait for a ``pull_async`` future before giving up on the client itself."""
        return (timeout if timeout is not None else self.pull_timeout) + self.request_timeout * 2 + 5.0

    def update_consumer_offset(self, mq: MessageQueue, offset: int) -> None:
        self._call(lambda c: c.update_consumer_offset(mq, offset), self.request_timeout * 3)

    def update_consumer_offsets(self, offsets: Sequence[tuple[MessageQueue, int]]) -> list[RocketMQError | None]:
        rounds = max(1, -(-len(offsets) // OFFSET_UPDATES_IN_FLIGHT))
        return self._call(lambda c: c.update_consumer_offsets(offsets), self.request_timeout * 3 * rounds)

    def query_consumer_offset(self, mq: MessageQueue) -> int | None:
        return self._call(lambda c: c.query_consumer_offset(mq), self.request_timeout * 3)

    def heartbeat(self) -> None:
        self._call(lambda c: c.heartbeat(), self.request_timeout * 3)

    def pull_from_broker_id(self, mq: MessageQueue) -> int:
        async def read(c: AsyncPullConsumer) -> int:
            return c.pull_from_broker_id(mq)
        return self._call(read, self.request_timeout)
