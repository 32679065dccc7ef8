"""Producer: send single messages and batches to a topic, choosing queues and retrying like the
Java client (DefaultMQProducer).

Used by the Spark sink on executors (``Producer``, sync, many threads), by the CLI, tests and
benchmarks. ``AsyncProducer`` is the same thing for code already on an event loop.

Sending, per attempt (at most 1 + ``retry_times_when_send_failed``, all within ``send_timeout``; one
attempt waits at most ``attempt_timeout`` for its answer, by default the whole remaining budget as RocketMQ's
client does):
pick a queue round-robin among writable queues, skipping the broker group that just failed and
groups that failed recently (simple latency-fault avoidance); send SEND_MESSAGE_V2 (short header,
``SEND_V2_NAMES``) or SEND_BATCH_MESSAGE to the group's primary. A response of FLUSH_DISK_TIMEOUT,
FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE means *stored* and is returned as a ``SendStatus``;
errors flagged ``retriable`` or ``invalid_route`` are retried on another group (the route is
refreshed first when ``invalid_route``); anything else is raised at once.

Sends started one after another to one queue are written in call order, also while the route cache is
cold: ``RouteCache.get`` returns in call order per topic, and the connection to a broker is opened once
with its waiters resumed in order.
"""

from __future__ import annotations

import concurrent.futures
import logging
import random
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from broker_store.client.records import SEND_STATUS_BY_CODE, MessageQueue, SendResult
from broker_store.client.route_cache import (
    DEFAULT_TOPIC,
    DEFAULT_TOPIC_QUEUE_NUMS,
    RouteCache,
    awaiting_primary,
    publish_queues,
)
from broker_store.client.runtime import SyncClient
from broker_store.client.session import ClientSession, require_positive
from broker_store.client.unique_id import UniqueIdGenerator, create_unique_id
from broker_store.clock import SYSTEM_CLOCK, Clock, wall_ms
from broker_store.net.client import RemotingClient
from broker_store.net.tls_settings import TlsClientSettings
from broker_store.protocol.acl import SessionCredentials
from broker_store.protocol.codes import MSG_FLAG_COMPRESSED, RequestCode, ResponseCode
from broker_store.protocol.errors import (
    BrokerResponseError,
    ConfigError,
    MessageIllegalError,
    NoWritableQueueError,
    ProtocolError,
    RequestTimeoutError,
    RocketMQError,
    TransportError,
    error_for_response,
)
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.headers import SendMessageResponseHeader, encode_send_v2
from broker_store.protocol.message import (
    MAX_PROPERTIES_LENGTH,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    Message,
    encode_batch,
    encode_properties,
    validate_topic,
)
from broker_store.protocol.route import TopicRouteData

log = logging.getLogger(__name__)

DEFAULT_PRODUCER_GROUP = "DEFAULT_PRODUCER"
MAX_MESSAGE_SIZE = 4 * 1024 * 1024
"""Java's default maxMessageSize: body of one message, or encoded body of one batch."""
RETRY_TOPIC_PREFIX = "%RETRY%"

QueueSelector = Callable[[list[MessageQueue], Message], MessageQueue]
"""Picks the queue for a message from the topic's writable queues (Java's MessageQueueSelector)."""
QueueChoice = MessageQueue | QueueSelector | None


def new_message(topic: str, body: bytes, *, tags: str | None = None, keys: str | Sequence[str] | None = None,
                properties: Mapping[str, str] | None = None, flag: int = 0) -> Message:
    """A Message with TAGS / KEYS set the way Java's Message constructor sets them."""
    props = dict(properties or {})
    if tags:
        props[PROPERTY_TAGS] = tags
    if keys:
        props[PROPERTY_KEYS] = keys if isinstance(keys, str) else " ".join(keys)
    return Message(topic=topic, body=body, properties=props, flag=flag)


class BrokerFaultTable:
    """Broker groups that failed recently, avoided by queue selection until ``isolation`` passes."""

    def __init__(self, isolation: float, clock: Clock) -> None:
        self.isolation = isolation
        self._clock = clock
        self._until: dict[str, float] = {}

    def mark_failed(self, broker_name: str) -> None:
        self._until[broker_name] = self._clock.monotonic() + self.isolation

    def mark_ok(self, broker_name: str) -> None:
        self._until.pop(broker_name, None)

    def available(self, broker_name: str) -> bool:
        until = self._until.get(broker_name)
        if until is None:
            return True
        if self._clock.monotonic() >= until:
            del self._until[broker_name]
            return True
        return False


def _illegal(reason: str) -> MessageIllegalError:
    return MessageIllegalError(ResponseCode.MESSAGE_ILLEGAL, reason)


class AsyncProducer:
    """Asyncio producer; see the module docstring for queue choice and retries.

    Methods must be called on one event loop. ``remoting`` lets several clients share
    connections; without it the producer owns a RemotingClient and closes it in ``close()``.
    """

    def __init__(self, namesrv_addr: str | Sequence[str], group: str = DEFAULT_PRODUCER_GROUP, *,
                 send_timeout: float = 3.0, retry_times_when_send_failed: int = 2,
                 attempt_timeout: float | None = None,
                 compress_over: int | None = None, compress_level: int = 5,
                 max_message_size: int = MAX_MESSAGE_SIZE, auto_create_topic: bool = True,
                 default_topic: str = DEFAULT_TOPIC, default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS,
                 route_ttl: float = 30.0, fault_isolation: float = 10.0,
                 remoting: RemotingClient | None = None, clock: Clock = SYSTEM_CLOCK,
                 id_generator: UniqueIdGenerator | None = None, credentials: SessionCredentials | None = None,
                 tls: TlsClientSettings | None = None) -> None:
        try:
            validate_topic(group)
        except ProtocolError as exc:
            raise ConfigError(f"group: {exc}") from exc
        require_positive("send_timeout", send_timeout)
        if retry_times_when_send_failed < 0:
            raise ConfigError("retry_times_when_send_failed: must be >= 0, "
                              f"got {retry_times_when_send_failed}")
        if attempt_timeout is not None:
            require_positive("attempt_timeout", attempt_timeout)
        if compress_over is not None and compress_over < 0:
            raise ConfigError(f"compress_over: must be None or >= 0, got {compress_over}")
        if not 0 <= compress_level <= 9:
            raise ConfigError(f"compress_level: must be in 0..9, got {compress_level}")
        require_positive("max_message_size", max_message_size)
        require_positive("default_topic_queue_nums", default_topic_queue_nums)
        if fault_isolation < 0:
            raise ConfigError(f"fault_isolation: must be >= 0, got {fault_isolation}")
        self.group = group
        self.send_timeout = send_timeout
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.attempt_timeout = attempt_timeout
        """Longest wait for one broker's answer (None: the rest of the send's budget). A primary that is
        frozen or cut off answers nothing, so without it the first attempt spends the whole budget there; with
        it the send asks the name server again and retries, reaching the new primary once the controller has
        elected one. A slow but healthy broker answering after it is sent the message again (a duplicate)."""
        self.compress_over = compress_over
        self.compress_level = compress_level
        self.max_message_size = max_message_size
        self.auto_create_topic = auto_create_topic
        self.default_topic = default_topic
        self.default_topic_queue_nums = default_topic_queue_nums
        self._session = ClientSession(namesrv_addr, remoting=remoting, request_timeout=send_timeout,
                                      route_ttl=route_ttl, clock=clock, default_topic=default_topic,
                                      default_topic_queue_nums=default_topic_queue_nums, credentials=credentials,
                                      tls=tls)
        self._clock = clock
        self._faults = BrokerFaultTable(fault_isolation, clock)
        self._next_index: dict[str, int] = {}
        self._new_id = id_generator.create if id_generator is not None else create_unique_id
        # publish_queues() of the route object last seen per topic (routes are immutable records,
        # replaced on refresh), so a send does not rebuild the queue list.
        self._queues_of: dict[str, tuple[TopicRouteData, list[MessageQueue]]] = {}
        self._valid_topics: set[str] = set()

    @property
    def routes(self) -> RouteCache:
        """The producer's RouteCache (tests and admin tools peek at it)."""
        return self._session.routes

    async def start(self) -> None:
        """Nothing to connect up front; connections open on first use. Kept for symmetry."""

    async def close(self) -> None:
        await self._session.close()

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- queue selection ------------------------------------------------------------------------

    async def writable_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's writable queues (from TBW102's route for a new topic when auto-creating)."""
        route = await self._session.routes.get(topic, allow_default=self.auto_create_topic)
        cached = self._queues_of.get(topic)
        if cached is not None and cached[0] is route:
            queues = cached[1]
        else:
            queues = publish_queues(topic, route)
            if len(self._queues_of) > 4096:
                self._queues_of.clear()
            self._queues_of[topic] = (route, queues)
        if not queues:  # checked on every call: a cached empty list must not reach queue selection
            if awaiting_primary(route):  # a failover: the next call asks the name servers again
                self._session.routes.invalidate(topic)
                raise NoWritableQueueError(ResponseCode.TOPIC_NOT_EXIST, f"no writable queue in the route of topic "
                                                                         f"{topic}: no primary registered")
            raise error_for_response(ResponseCode.TOPIC_NOT_EXIST,
                                     f"no writable queue in the route of topic {topic}")
        return queues

    def _select(self, topic: str, queues: list[MessageQueue], last_failed: str | None) -> MessageQueue:
        n = len(queues)
        start = self._next_index.get(topic)
        if start is None:
            start = random.randrange(n)
        self._next_index[topic] = (start + 1) % (1 << 30)
        available = self._faults.available
        for i in range(n):
            q = queues[(start + i) % n]
            if q.broker_name != last_failed and available(q.broker_name):
                return q
        for i in range(n):
            q = queues[(start + i) % n]
            if q.broker_name != last_failed:
                return q
        return queues[start % n]

    # -- message preparation --------------------------------------------------------------------

    def _check_topic(self, topic: str) -> None:
        if topic in self._valid_topics:
            return
        try:
            validate_topic(topic)
        except ProtocolError as exc:
            raise _illegal(str(exc)) from exc
        if topic == self.default_topic:
            raise _illegal(f"topic {topic} is the auto-create template topic; it cannot be sent to")
        if len(self._valid_topics) < 4096:
            self._valid_topics.add(topic)

    def _prepare_properties(self, message: Message) -> dict[str, str]:
        props = dict(message.properties)
        # not setdefault: making a new id is not free (benchmarks/MEASUREMENTS.md) and most re-sends carry one
        if PROPERTY_UNIQ_KEY not in props:
            props[PROPERTY_UNIQ_KEY] = self._new_id()
        props.setdefault(PROPERTY_WAIT, "true")
        return props

    def _encode_properties(self, props: Mapping[str, str]) -> bytes:
        try:
            raw = encode_properties(props)
        except ProtocolError as exc:
            raise _illegal(str(exc)) from exc
        if len(raw) > MAX_PROPERTIES_LENGTH:
            raise _illegal(f"properties of {len(raw)} bytes exceed {MAX_PROPERTIES_LENGTH}")
        return raw

    def _check_body(self, body: bytes) -> None:
        if not isinstance(body, bytes | bytearray | memoryview):
            raise _illegal(f"message body must be bytes, got {type(body).__name__}")
        if len(body) == 0:
            raise _illegal("message body is empty")
        if len(body) > self.max_message_size:
            raise _illegal(f"message body of {len(body)} bytes exceeds max_message_size "
                           f"{self.max_message_size}")

    def _single_request(self, message: Message) -> tuple[str, bytes, int, str]:
        """(properties string, body, sysFlag, UNIQ_KEY) for one message, validated."""
        self._check_topic(message.topic)
        self._check_body(message.body)
        props = self._prepare_properties(message)
        raw_props = self._encode_properties(props)
        body, sys_flag = bytes(message.body), 0
        if self.compress_over is not None and len(body) > self.compress_over:
            body = zlib.compress(body, self.compress_level)
            sys_flag |= MSG_FLAG_COMPRESSED
        return raw_props.decode(), body, sys_flag, props[PROPERTY_UNIQ_KEY]

    def _header(self, topic: str, mq: MessageQueue, properties: str, sys_flag: int, flag: int,
                batch: bool) -> dict[str, str]:
        """The SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE header (``protocol.headers.encode_send_v2``)."""
        return encode_send_v2(self.group, topic, self.default_topic, self.default_topic_queue_nums, mq.queue_id,
                              sys_flag, wall_ms(self._clock), flag, properties, batch, mq.broker_name)

    # -- sending --------------------------------------------------------------------------------

    async def send(self, message: Message, queue: QueueChoice = None, *,
                   timeout: float | None = None) -> SendResult:
        """Send one message; returns once the broker stored it (see ``SendResult.status``).

        ``queue``: None = round-robin with retries on other broker groups; a MessageQueue or a
        selector pins the queue (retries then go to the same queue after a route refresh).
        Sets UNIQ_KEY and WAIT=true unless the message has them.
        """
        properties, body, sys_flag, uniq = self._single_request(message)

        def build(mq: MessageQueue) -> RemotingCommand:
            ext = self._header(message.topic, mq, properties, sys_flag, message.flag, batch=False)
            return RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields=ext, body=body)

        return await self._send_with_retries(message.topic, message, queue, build, (uniq,), timeout)

    async def send_batch(self, messages: Sequence[Message], queue: QueueChoice = None, *,
                         timeout: float | None = None) -> SendResult:
        """Send messages of one topic as one SEND_BATCH_MESSAGE into one queue (stored together,
        consecutive queue offsets). ``msg_ids`` lists each message's UNIQ_KEY in order."""
        if not messages:
            raise _illegal("batch is empty")
        topic = messages[0].topic
        self._check_topic(topic)
        if topic.startswith(RETRY_TOPIC_PREFIX):
            raise _illegal(f"retry topic {topic} cannot take batches")
        entries: list[tuple[bytes, bytes, int]] = []
        uniqs: list[str] = []
        for msg in messages:
            if msg.topic != topic:
                raise _illegal(f"batch mixes topics {topic} and {msg.topic}; a batch goes to one topic")
            if PROPERTY_DELAY in msg.properties:
                raise _illegal("delayed messages cannot be batched")
            self._check_body(msg.body)
            props = self._prepare_properties(msg)
            uniqs.append(props[PROPERTY_UNIQ_KEY])
            entries.append((bytes(msg.body), self._encode_properties(props), msg.flag))
        try:
            body = encode_batch(entries)
        except ProtocolError as exc:
            raise _illegal(str(exc)) from exc
        if len(body) > self.max_message_size:
            raise _illegal(f"encoded batch of {len(body)} bytes exceeds max_message_size "
                           f"{self.max_message_size}")
        batch_props = self._encode_properties({
            PROPERTY_WAIT: messages[0].properties.get(PROPERTY_WAIT, "true"),
            PROPERTY_UNIQ_KEY: self._new_id(),
        }).decode()

        def build(mq: MessageQueue) -> RemotingCommand:
            ext = self._header(topic, mq, batch_props, 0, 0, batch=True)
            return RemotingCommand(code=RequestCode.SEND_BATCH_MESSAGE, ext_fields=ext, body=body)

        return await self._send_with_retries(topic, messages[0], queue, build, tuple(uniqs), timeout)

    async def send_encoded_batch(self, topic: str, body: bytes, queue: MessageQueue, *,
                                 timeout: float | None = None) -> SendResult:
        """Send an already encoded SEND_BATCH_MESSAGE body (``encode_batch`` layout, entries complete
        with their properties) into ``queue``. For forwarders that build entries straight from stored
        records (the replicator's sink): no per-message ``Message`` and nothing added to the entries'
        properties, so each entry must carry its own UNIQ_KEY. The result's ``msg_ids`` is empty (the
        ids are inside the entries); ``offset_msg_ids`` lists the broker's ids as usual."""
        if not body:
            raise _illegal("batch is empty")
        if not isinstance(queue, MessageQueue):
            raise TypeError(f"a pre-encoded batch goes to one MessageQueue, got {type(queue).__name__}")
        self._check_topic(topic)
        if topic.startswith(RETRY_TOPIC_PREFIX):
            raise _illegal(f"retry topic {topic} cannot take batches")
        if len(body) > self.max_message_size:
            raise _illegal(f"encoded batch of {len(body)} bytes exceeds max_message_size {self.max_message_size}")
        batch_props = self._encode_properties({PROPERTY_WAIT: "true", PROPERTY_UNIQ_KEY: self._new_id()}).decode()

        def build(mq: MessageQueue) -> RemotingCommand:
            ext = self._header(topic, mq, batch_props, 0, 0, batch=True)
            return RemotingCommand(code=RequestCode.SEND_BATCH_MESSAGE, ext_fields=ext, body=body)

        return await self._send_with_retries(topic, None, queue, build, (), timeout)

    async def send_oneway(self, message: Message, queue: QueueChoice = None) -> None:
        """Fire and forget: one attempt, no response, no result (delivery not guaranteed)."""
        properties, body, sys_flag, _uniq = self._single_request(message)
        queues = await self.writable_queues(message.topic)
        mq = self._choose(message.topic, message, queues, queue, None)
        addr = await self._session.routes.require_master_addr(message.topic, mq.broker_name,
                                                              allow_default=self.auto_create_topic)
        ext = self._header(message.topic, mq, properties, sys_flag, message.flag, batch=False)
        await self._session.send_oneway(
            addr, RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields=ext, body=body))

    def _choose(self, topic: str, message: Message | None, queues: list[MessageQueue], queue: QueueChoice,
                last_failed: str | None) -> MessageQueue:
        if queue is None:
            return self._select(topic, queues, last_failed)
        if isinstance(queue, MessageQueue):
            if queue.topic != topic:
                raise _illegal(f"queue {queue} belongs to another topic than {topic}")
            return queue
        if message is None:
            raise TypeError("a queue selector needs the message; pre-encoded batches take a MessageQueue")
        chosen = queue(queues, message)
        if not isinstance(chosen, MessageQueue):
            raise TypeError(f"queue selector returned {type(chosen).__name__}, not a MessageQueue")
        return chosen

    async def _send_with_retries(self, topic: str, message: Message | None, queue: QueueChoice,
                                 build: Callable[[MessageQueue], RemotingCommand], uniqs: tuple[str, ...],
                                 timeout: float | None) -> SendResult:
        routes = self._session.routes
        budget = self.send_timeout if timeout is None else timeout
        deadline = self._clock.monotonic() + budget
        last_failed: str | None = None
        last_error: RocketMQError | None = None
        for _attempt in range(1 + self.retry_times_when_send_failed):
            remaining = deadline - self._clock.monotonic()
            if remaining <= 0:
                break
            queues = await self._writable_queues_until(topic, deadline)
            mq = self._choose(topic, message, queues, queue, last_failed)
            try:
                addr = await routes.require_master_addr(topic, mq.broker_name,
                                                        allow_default=self.auto_create_topic)
                wait = remaining if self.attempt_timeout is None else min(remaining, self.attempt_timeout)
                resp = await self._session.send(addr, build(mq), wait)
                status = SEND_STATUS_BY_CODE.get(resp.code)
                if status is None:
                    raise error_for_response(resp.code, resp.remark, addr=addr)
            except (TransportError, BrokerResponseError) as exc:
                if not (exc.retriable or exc.invalid_route):
                    raise
                log.debug("send to %s failed, will retry: %s", mq, exc)
                self._faults.mark_failed(mq.broker_name)
                if exc.invalid_route:
                    routes.invalidate(topic)
                last_failed, last_error = mq.broker_name, exc
                continue
            self._faults.mark_ok(mq.broker_name)
            return self._result(topic, mq, resp, status, uniqs, addr)
        if last_error is not None:
            raise last_error
        raise RequestTimeoutError(f"send to topic {topic} found no time left within {budget}s")

    async def _writable_queues_until(self, topic: str, deadline: float) -> list[MessageQueue]:
        """``writable_queues``, asked again while the route has no primary (a failover: the new primary
        registers within seconds) until ``deadline``, backing off 50 ms to 400 ms; then the last error."""
        delay = 0.05
        while True:
            try:
                return await self.writable_queues(topic)
            except NoWritableQueueError:
                remaining = deadline - self._clock.monotonic()
                if remaining <= 0:
                    raise
                await self._clock.sleep(min(delay, remaining))
                delay = min(delay * 2, 0.4)

    @staticmethod
    def _result(topic: str, mq: MessageQueue, resp: RemotingCommand, status: Any, uniqs: tuple[str, ...],
                addr: str) -> SendResult:
        ext = resp.ext_fields
        try:
            msg_id, queue_id, queue_offset = ext["msgId"], int(ext["queueId"]), int(ext["queueOffset"])
        except (KeyError, ValueError):
            try:  # the typed header names what is wrong
                header = SendMessageResponseHeader.from_ext(ext)
            except ProtocolError as exc:
                raise ProtocolError(f"send response from {addr}: {exc}") from exc
            msg_id, queue_id, queue_offset = header.msg_id, header.queue_id, header.queue_offset
        offset_ids = tuple(msg_id.split(",")) if msg_id else ()
        queue = mq if queue_id == mq.queue_id and mq.topic == topic else MessageQueue(topic, mq.broker_name,
                                                                                        queue_id)
        return SendResult(status=status, msg_id=",".join(uniqs), offset_msg_id=msg_id, message_queue=queue,
                          queue_offset=queue_offset, msg_ids=uniqs, offset_msg_ids=offset_ids)


class Producer(SyncClient[AsyncProducer]):
    """Thread-safe synchronous producer over a shared background event loop.

    Construct anywhere (driver or executor); pickling keeps only the constructor arguments. The
    first call (or ``start()``) attaches to the process-wide client runtime; ``close()`` (or the
    context manager) releases it. Arguments are those of ``AsyncProducer`` except ``remoting``;
    ``shared_runtime=False`` gives this producer its own loop thread. A queue selector runs on the
    loop thread: keep it quick and never call a sync client from it.
    """

    def __init__(self, namesrv_addr: str | Sequence[str], group: str = DEFAULT_PRODUCER_GROUP, *,
                 send_timeout: float = 3.0, retry_times_when_send_failed: int = 2,
                 attempt_timeout: float | None = None,
                 compress_over: int | None = None, compress_level: int = 5,
                 max_message_size: int = MAX_MESSAGE_SIZE, auto_create_topic: bool = True,
                 default_topic: str = DEFAULT_TOPIC, default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS,
                 route_ttl: float = 30.0, fault_isolation: float = 10.0,
                 clock: Clock = SYSTEM_CLOCK, id_generator: UniqueIdGenerator | None = None,
                 credentials: SessionCredentials | None = None, tls: TlsClientSettings | None = None,
                 shared_runtime: bool = True) -> None:
        super().__init__(shared_runtime=shared_runtime)
        self._init_kwargs = dict(
            namesrv_addr=namesrv_addr, group=group, send_timeout=send_timeout, tls=tls,
            retry_times_when_send_failed=retry_times_when_send_failed, attempt_timeout=attempt_timeout,
            compress_over=compress_over, compress_level=compress_level, max_message_size=max_message_size,
            auto_create_topic=auto_create_topic, default_topic=default_topic,
            default_topic_queue_nums=default_topic_queue_nums, route_ttl=route_ttl,
            fault_isolation=fault_isolation, clock=clock, id_generator=id_generator, credentials=credentials)
        # Validate the options now, on the caller's thread; the real core is built on start().
        self.send_timeout: float = AsyncProducer(**self._init_kwargs).send_timeout

    def _make_core(self, remoting: RemotingClient) -> AsyncProducer:
        return AsyncProducer(**self._init_kwargs, remoting=remoting)

    async def _close_core(self, core: AsyncProducer) -> None:
        await core.close()

    def _budget(self, timeout: float | None) -> float:
        return self.send_timeout if timeout is None else timeout

    def send(self, message: Message, queue: QueueChoice = None, *,
             timeout: float | None = None) -> SendResult:
        return self._call(lambda p: p.send(message, queue, timeout=timeout), self._budget(timeout))

    def send_async(self, message: Message, queue: QueueChoice = None, *,
                   timeout: float | None = None) -> concurrent.futures.Future[SendResult]:
        """Start a send and return at once; the future resolves to the SendResult or the error."""
        return self._submit(lambda p: p.send(message, queue, timeout=timeout))

    def send_batch(self, messages: Sequence[Message], queue: QueueChoice = None, *,
                   timeout: float | None = None) -> SendResult:
        return self._call(lambda p: p.send_batch(messages, queue, timeout=timeout), self._budget(timeout))

    def send_encoded_batch_async(self, topic: str, body: bytes, queue: MessageQueue, *,
                                 timeout: float | None = None) -> concurrent.futures.Future[SendResult]:
        """``AsyncProducer.send_encoded_batch``, started at once; the future resolves to the result."""
        return self._submit(lambda p: p.send_encoded_batch(topic, body, queue, timeout=timeout))

    def send_oneway(self, message: Message, queue: QueueChoice = None) -> None:
        self._call(lambda p: p.send_oneway(message, queue), self.send_timeout)

    def writable_queues(self, topic: str) -> list[MessageQueue]:
        return self._call(lambda p: p.writable_queues(topic), self.send_timeout)
