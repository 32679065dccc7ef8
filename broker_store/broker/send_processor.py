"""SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE and CONSUMER_SEND_MSG_BACK.

Called by ``BrokerServer`` for those request codes, with a ``SendContext``. Order of checks and the remarks
follow RocketMQ's SendMessageProcessor / AbstractSendMessageProcessor.msgCheck so clients see familiar
answers: role (SERVICE_NOT_AVAILABLE; a fenced broker, changing role, says so in the remark) -> topic name ->
forbidden system topic -> topic config (auto-create from TBW102) -> queue id -> sizes -> store. The put path
is the broker's hottest: the header is parsed by ``decode_send_header`` (the typed header's fast path),
properties stay bytes, and the only per-message property edit is appending CLUSTER. A message whose
properties hold DELAY (a level > 0) is stored in SCHEDULE_TOPIC_XXXX for the schedule service
(``delayed_send``, ``schedule``); others pay one bytes search for it. A batch whose header asks for a delay is
refused, as RocketMQ's CommitLog does (its client refuses delay levels in batches); DELAY inside a batch's
messages is stored as sent, not acted on.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING

from broker_store.broker.delayed_send import DelayedSend, batch_delay_refusal, send_back_level
from broker_store.protocol.codes import PERM_READ, PERM_WRITE, RequestCode, ResponseCode
from broker_store.protocol.errors import ProtocolError
from broker_store.protocol.frame import RemotingCommand
from broker_store.protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    SendMessageRequestHeader,
    decode_send_header,
)
from broker_store.protocol.message import (
    MAX_PROPERTIES_LENGTH,
    decode_stored_message,
    split_batch,
    tags_hash_code,
    validate_topic,
)
from broker_store.protocol.properties import (
    PROPERTY_CLUSTER,
    PROPERTY_DELAY,
    PROPERTY_MSG_REGION,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_SEPARATOR,
    PROPERTY_TRACE_SWITCH,
    PROPERTY_WAIT,
    TAGS_KEY,
    append_properties,
    encode_properties,
    find_property,
    property_entry,
    property_key,
    put_property,
    tags_code_of_properties,
    tags_codes_of_properties,
)
from broker_store.protocol.topic import (
    RETRY_GROUP_TOPIC_PREFIX,
    dlq_topic,
    is_writeable,
    retry_topic,
)
from broker_store.store import (
    PutEntry,
    PutResult,
    PutStatus,
    resolved,
)
from broker_store.store.delay_levels import DEFAULT_DELAY_LEVELS, DELAY_KEY

if TYPE_CHECKING:
    from broker_store.broker.primary_lease import PrimaryLease
    from broker_store.broker.role import RoleState
    from broker_store.broker.topic_config import TopicConfigManager
    from broker_store.net.server import Connection
    from broker_store.store import MessageStore

log = logging.getLogger(__name__)

# TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET: broker-internal topics producers may not write.
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
    }
)
RETRY_QUEUE_NUMS = 1
"""SubscriptionGroupConfig.retryQueueNums default."""
DLQ_QUEUE_NUMS = 1
"""MixAll.DLQ_QUEUE_NUMS_PER_GROUP."""
SERVICE_NOT_AVAILABLE_REMARK = (
    "service not available now. It may be caused by one of the following reasons: the broker's disk is full, "
    "messages are put to the slave, message store has been shut down, etc."
)


def fenced_remark(role: RoleState, broker_name: str) -> str:
    """The SERVICE_NOT_AVAILABLE remark while ``role`` is fenced: clients retry it after refreshing the route."""
    return (f"broker {broker_name} is fenced while it changes role ({role.stage.value}, epoch {role.epoch}): "
            "it takes no messages until the change is done; refresh the route and retry")


_CLUSTER_KEY = property_key(PROPERTY_CLUSTER)
_ENDS_A_PROPERTY = (PROPERTY_SEPARATOR.encode(), b"")
"""Last byte of properties the CLUSTER property is appended to without a separator (b"": empty): the
batch path's inlined ``ends_a_property``."""


_DURABLE_NOW = resolved(PutStatus.PUT_OK)
_BODY = itemgetter(0)
"""The body of a ``split_batch`` entry."""

DURABLE_RESPONSE_CODES = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
}
"""The one table of put outcomes -> response codes for stored messages: durability outcomes answered with
their own code and the send header (the message IS stored). Anything else reaches the client as
SYSTEM_ERROR with a remark naming the status: IN_SYNC_REPLICAS_NOT_ENOUGH, which has no wire code of its
own and is normally a put refused before the append (``PutResult.status``, the message not stored)."""


def _durable_response(cmd: RemotingCommand, status: PutStatus, ext: dict[str, str]) -> RemotingCommand:
    code = DURABLE_RESPONSE_CODES.get(status)
    if code is None:
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"{status.name}: the message was stored but is not durable")
    return cmd.response(code, None, ext)


def born_host_of(remote_addr: str) -> str:
    """IPv4 ``ip:port`` for the BORNHOST field (IPv6 peers are recorded as 127.0.0.1)."""
    host, _, port = remote_addr.rpartition(":")
    if host.startswith("::ffff:"):
        host = host[7:]
    if host.count(".") != 3:
        host = "127.0.0.1"
    return f"{host}:{port if port.isdigit() else 0}"


@dataclass(frozen=True)
class SendContext:
    """What the send path needs of its broker."""

    store: MessageStore
    topic_configs: TopicConfigManager
    role: RoleState
    """Only an unfenced primary takes writes."""
    broker_name: str
    cluster_name: str
    """Written as the CLUSTER property of every message."""
    region_id: str
    trace_on: bool
    max_message_size: int
    """Largest body (each message of a batch too)."""
    max_batch_size: int
    """Largest encoded batch body (``StoreSettings.max_batch_size``)."""
    max_reconsume_times: int
    delayed_send: DelayedSend = field(default_factory=lambda: DelayedSend(DEFAULT_DELAY_LEVELS))
    """Where messages asking for a delay level are put (``message_delay_level``)."""
    lease: PrimaryLease | None = None
    """Controller mode: a primary appends only while its lease says so (``broker.primary_lease``)."""


class SendProcessor:
    """Writes producers' messages into the store. One instance per broker."""

    def __init__(self, ctx: SendContext) -> None:
        self.ctx = ctx
        self._cluster_suffix = property_entry(PROPERTY_CLUSTER, ctx.cluster_name)
        self._cluster_name = ctx.cluster_name
        self._region = ctx.region_id
        self._trace_on = "true" if ctx.trace_on else "false"
        self._max_message_size = ctx.max_message_size
        self._max_batch_size = ctx.max_batch_size
        self._born_hosts: dict[str, str] = {}

    # -- shared checks ----------------------------------------------------------------------------

    def _born_host(self, conn: Connection) -> str:
        host = self._born_hosts.get(conn.remote_addr)
        if host is None:
            if len(self._born_hosts) > 4096:
                self._born_hosts.clear()
            host = self._born_hosts[conn.remote_addr] = born_host_of(conn.remote_addr)
        return host

    def _with_cluster(self, props: bytes) -> bytes:
        if find_property(props, _CLUSTER_KEY) >= 0:
            return put_property(props, PROPERTY_CLUSTER, self._cluster_name)
        return append_properties(props, self._cluster_suffix)

    def _check(
        self, cmd: RemotingCommand, req: SendMessageRequestHeader, conn: Connection
    ) -> RemotingCommand | int:
        """msgCheck: the queue id to write to (the request's, or a random writable one for -1), or the error
        response."""
        refused = self._refused_write(cmd)
        if refused is not None:
            return refused
        topics = self.ctx.topic_configs
        tc = topics.select(req.topic)
        if tc is None:
            try:
                validate_topic(req.topic)
            except ProtocolError as exc:
                return cmd.response(ResponseCode.MESSAGE_ILLEGAL, f"the message is illegal: {exc}")
            if req.topic in NOT_ALLOWED_SEND_TOPICS:
                return cmd.response(
                    ResponseCode.NO_PERMISSION, f"Sending message to topic[{req.topic}] is forbidden."
                )
            tc = topics.create_in_send(req.topic, req.default_topic, req.default_topic_queue_nums)
            if tc is None and req.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                tc = topics.create_in_send_back(req.topic, RETRY_QUEUE_NUMS, PERM_READ | PERM_WRITE)
            if tc is None:
                return cmd.response(
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"topic[{req.topic}] not exist, apply first please! (auto_create_topic_enable is "
                    f"{'on' if topics.auto_create_topic_enable else 'off'} on broker "
                    f"{self.ctx.broker_name}; create the topic with UPDATE_AND_CREATE_TOPIC)",
                )
        if not is_writeable(tc.perm):
            return cmd.response(
                ResponseCode.NO_PERMISSION, f"the topic[{req.topic}] sending message is forbidden"
            )
        valid = max(tc.write_queue_nums, tc.read_queue_nums)
        if req.queue_id >= valid:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{req.queue_id}] is illegal, {tc} Producer: {conn.remote_addr}",
            )
        if req.queue_id < 0:
            return random.randrange(max(tc.write_queue_nums, 1))
        return req.queue_id

    def _refused_write(self, cmd: RemotingCommand) -> RemotingCommand | None:
        """SERVICE_NOT_AVAILABLE unless an unfenced primary whose lease (controller mode) holds; checked before
        anything is appended, so a primary that may have been replaced never appends and then times out."""
        role = self.ctx.role
        if not role.is_primary:
            remark = fenced_remark(role, self.ctx.broker_name) if role.fenced else SERVICE_NOT_AVAILABLE_REMARK
            return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE, remark)
        lease = self.ctx.lease
        if lease is not None:
            refusal = lease.refusal(role.epoch)
            if refusal is not None:
                return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE, f"broker {self.ctx.broker_name}: {refusal}")
        return None

    def _illegal_size(self, cmd: RemotingCommand, size: int) -> RemotingCommand:
        return cmd.response(
            ResponseCode.MESSAGE_ILLEGAL,
            f"the message is illegal: body size {size} exceeds the limit of "
            f"{self._max_message_size} bytes (max_message_size)",
        )

    def _illegal_props(self, cmd: RemotingCommand, size: int) -> RemotingCommand:
        return cmd.response(
            ResponseCode.MESSAGE_ILLEGAL,
            f"the message is illegal: properties length {size} exceed the limit of "
            f"{MAX_PROPERTIES_LENGTH} bytes",
        )

    def _answer(
        self, cmd: RemotingCommand, result: PutResult, queue_id: int, conn: Connection
    ) -> RemotingCommand | None:
        """The send response; None while the store's durability future is pending (``conn`` answers once it
        resolves: ``Connection.reply_when_done``)."""
        status = result.status
        if status is PutStatus.PUT_OK:
            ext = {
                "msgId": ",".join(result.msg_ids),
                "queueId": str(queue_id),
                "queueOffset": str(result.queue_offset),
                PROPERTY_MSG_REGION: self._region,
                PROPERTY_TRACE_SWITCH: self._trace_on,
            }
            durable = result.durable
            if durable is _DURABLE_NOW:  # nothing to wait for (ASYNC_FLUSH, WAIT=false): the common case
                return cmd.response(ResponseCode.SUCCESS, None, ext)
            if durable.done():
                return _durable_response(cmd, durable.result(), ext)
            conn.reply_when_done(cmd, durable, lambda status: _durable_response(cmd, status, ext))
            return None
        if status is PutStatus.MESSAGE_ILLEGAL or status is PutStatus.PROPERTIES_SIZE_EXCEEDED:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, f"the message is illegal: {result.remark}")
        if status is PutStatus.SERVICE_NOT_AVAILABLE:
            return cmd.response(
                ResponseCode.SERVICE_NOT_AVAILABLE,
                f"{SERVICE_NOT_AVAILABLE_REMARK} ({result.remark})"
                if result.remark
                else SERVICE_NOT_AVAILABLE_REMARK,
            )
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"{status.name}: {result.remark}")

    # -- SEND_MESSAGE / SEND_MESSAGE_V2 -----------------------------------------------------------

    def send_message(
        self, cmd: RemotingCommand, conn: Connection
    ) -> RemotingCommand | None:
        short = cmd.code != RequestCode.SEND_MESSAGE and "b" in cmd.ext_fields
        req = decode_send_header(cmd.ext_fields, short)
        queue_id = self._check(cmd, req, conn)
        if isinstance(queue_id, RemotingCommand):
            return queue_id
        body = cmd.body
        if len(body) > self._max_message_size:
            return self._illegal_size(cmd, len(body))
        props = (req.properties or "").encode()
        topic = req.topic
        reconsume_times = req.reconsume_times or 0
        to_dlq = False
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            max_times = (
                req.max_reconsume_times
                if req.max_reconsume_times is not None
                else self.ctx.max_reconsume_times
            )
            if reconsume_times >= max_times:
                # handleRetryAndDLQ: a retry that exhausted its attempts goes to the group's DLQ.
                topic = dlq_topic(topic[len(RETRY_GROUP_TOPIC_PREFIX) :])
                self.ctx.topic_configs.create_in_send_back(topic, DLQ_QUEUE_NUMS, PERM_READ | PERM_WRITE)
                queue_id = 0
                to_dlq = True
        props = self._with_cluster(props)
        put_topic, put_queue_id = topic, queue_id
        if DELAY_KEY in props and not to_dlq:  # the only cost of scheduled delivery to other messages
            try:
                put_topic, put_queue_id, props = self.ctx.delayed_send.place(topic, queue_id, props, req.sys_flag)
            except ValueError as exc:
                return cmd.response(ResponseCode.MESSAGE_ILLEGAL, f"the message is illegal: {exc}")
        if len(props) > MAX_PROPERTIES_LENGTH:
            return self._illegal_props(cmd, len(props))
        tags_code = tags_code_of_properties(props, tags_hash_code)
        result = self.ctx.store.put_message(
            put_topic,
            put_queue_id,
            body,
            props,
            tags_code=tags_code,
            flag=req.flag,
            sys_flag=req.sys_flag,
            born_timestamp=req.born_timestamp,
            born_host=self._born_host(conn),
            reconsume_times=reconsume_times,
        )
        return self._answer(cmd, result, queue_id, conn)

    # -- SEND_BATCH_MESSAGE -----------------------------------------------------------------------

    def send_batch_message(
        self, cmd: RemotingCommand, conn: Connection
    ) -> RemotingCommand | None:
        req = decode_send_header(cmd.ext_fields, "b" in cmd.ext_fields)
        if len(req.topic.encode()) > 127:
            return cmd.response(
                ResponseCode.MESSAGE_ILLEGAL,
                f"message topic length too long {len(req.topic.encode())} (limit 127 bytes)",
            )
        if req.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return cmd.response(
                ResponseCode.MESSAGE_ILLEGAL, f"batch request does not support retry group {req.topic}"
            )
        queue_id = self._check(cmd, req, conn)
        if isinstance(queue_id, RemotingCommand):
            return queue_id
        properties = req.properties or ""
        if PROPERTY_DELAY in properties:
            refusal = batch_delay_refusal(properties)
            if refusal is not None:
                return cmd.response(ResponseCode.MESSAGE_ILLEGAL, f"the message is illegal: {refusal}")
        if len(cmd.body) > self._max_batch_size:
            return cmd.response(
                ResponseCode.MESSAGE_ILLEGAL,
                f"the message is illegal: encoded batch size {len(cmd.body)} exceeds the limit of "
                f"{self._max_batch_size} bytes (max_message_size + 64 KiB)",
            )
        try:
            batch = split_batch(cmd.body)
        except ProtocolError as exc:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, f"the message is illegal: {exc}")
        if not batch:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, "the message is illegal: the batch is empty")
        longest = max(map(len, map(_BODY, batch)))
        if longest > self._max_message_size:  # each body alone, as a single send is checked
            return self._illegal_size(cmd, longest)
        prepared = self._batch_entries(batch)
        if isinstance(prepared, int):
            return self._illegal_props(cmd, prepared)
        result = self.ctx.store.put_messages(
            req.topic,
            queue_id,
            prepared,
            sys_flag=req.sys_flag,
            born_timestamp=req.born_timestamp,
            born_host=self._born_host(conn),
        )
        return self._answer(cmd, result, queue_id, conn)

    def _batch_entries(self, batch: list[tuple[memoryview, bytes, int]]) -> list[PutEntry] | int:
        """Store entries with CLUSTER set, or an illegal properties length.

        Column-wise, like the store's encoder: the per-message work is comprehensions and C-level maps.
        A property key found nowhere in all properties joined (by \\0, which no key contains) is in none
        of them, so one search settles the common case; messages naming a cluster take the general path.
        """
        bodies, raw_props, flags = zip(*batch, strict=True)
        if _CLUSTER_KEY in b"\0".join(raw_props):
            return self._batch_entries_in_order(batch)
        suffix, separated = self._cluster_suffix, PROPERTY_SEPARATOR.encode() + self._cluster_suffix
        props_list = [props + suffix if props[-1:] in _ENDS_A_PROPERTY else props + separated
                      for props in raw_props]
        if max(map(len, props_list)) > MAX_PROPERTIES_LENGTH:
            return next(n for n in map(len, props_list) if n > MAX_PROPERTIES_LENGTH)
        if TAGS_KEY in b"\0".join(props_list):
            tags_codes = tags_codes_of_properties(props_list, tags_hash_code)
        else:
            tags_codes = [0] * len(props_list)
        return list(zip(bodies, props_list, flags, tags_codes, strict=True))

    def _batch_entries_in_order(self, batch: list[tuple[memoryview, bytes, int]]) -> list[PutEntry] | int:
        """``_batch_entries`` one message at a time (some properties name a cluster already)."""
        entries: list[PutEntry] = []
        for body, props, flag in batch:
            props = self._with_cluster(props)
            if len(props) > MAX_PROPERTIES_LENGTH:
                return len(props)
            entries.append((body, props, flag, tags_code_of_properties(props, tags_hash_code)))
        return entries

    # -- CONSUMER_SEND_MSG_BACK -------------------------------------------------------------------

    def consumer_send_msg_back(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """Re-put a consumed message to %RETRY%<group>, or %DLQ%<group> once it exhausted its retries.

        The retry waits its delay level in SCHEDULE_TOPIC_XXXX: the request's delayLevel, or 3 + the
        message's reconsumeTimes when that is 0 (RocketMQ's rule); a negative delayLevel sends it to the DLQ
        at once. A DLQ message is not delayed (DELAY=0, as RocketMQ writes it).
        """
        h = ConsumerSendMsgBackRequestHeader.from_ext(cmd.ext_fields)
        refused = self._refused_write(cmd)
        if refused is not None:
            return refused
        topics = self.ctx.topic_configs
        new_topic = retry_topic(h.group)
        tc = topics.create_in_send_back(new_topic, RETRY_QUEUE_NUMS, PERM_READ | PERM_WRITE)
        if not is_writeable(tc.perm):
            return cmd.response(
                ResponseCode.NO_PERMISSION, f"the topic[{new_topic}] sending message is forbidden"
            )
        record = self.ctx.store.read_record(h.offset)
        if record is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {h.offset}")
        try:
            msg = decode_stored_message(record, decompress=False)
        except ProtocolError as exc:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {h.offset}: {exc}"
            )
        props = dict(msg.properties)
        props.setdefault(PROPERTY_RETRY_TOPIC, msg.topic)
        props[PROPERTY_WAIT] = "false"
        max_times = (
            h.max_reconsume_times
            if h.max_reconsume_times is not None
            else self.ctx.max_reconsume_times
        )
        queue_id = random.randrange(tc.write_queue_nums) if tc.write_queue_nums > 0 else 0
        to_dlq = msg.reconsume_times >= max_times or h.delay_level < 0
        if to_dlq:
            new_topic = dlq_topic(h.group)
            tc = topics.create_in_send_back(new_topic, DLQ_QUEUE_NUMS, PERM_READ | PERM_WRITE)
            queue_id = 0
            props[PROPERTY_DELAY] = "0"
        else:
            props[PROPERTY_DELAY] = str(send_back_level(h.delay_level, msg.reconsume_times))
        if not props.get(PROPERTY_ORIGIN_MESSAGE_ID):
            props[PROPERTY_ORIGIN_MESSAGE_ID] = msg.offset_msg_id
        raw_props = encode_properties(props)
        put_topic, put_queue_id = new_topic, queue_id
        if not to_dlq:
            put_topic, put_queue_id, raw_props = self.ctx.delayed_send.place(new_topic, queue_id, raw_props,
                                                                             msg.sys_flag)
        if len(raw_props) > MAX_PROPERTIES_LENGTH:
            return self._illegal_props(cmd, len(raw_props))
        result = self.ctx.store.put_message(
            put_topic,
            put_queue_id,
            msg.body,
            raw_props,
            tags_code=tags_code_of_properties(raw_props, tags_hash_code),
            flag=msg.flag,
            sys_flag=msg.sys_flag,
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host,
            reconsume_times=msg.reconsume_times + 1,
        )
        if result.status is PutStatus.PUT_OK:
            return cmd.response(ResponseCode.SUCCESS)
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"{result.status.name}: {result.remark}")
