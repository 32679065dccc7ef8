"""Typed request/response headers: declarative wire types for the extFields of each request code.

Each header is a frozen dataclass whose snake_case fields map to RocketMQ's camelCase extFields names
(``consumer_group`` <-> ``consumerGroup``; overrides via ``wire(...)``). ``from_ext`` validates and
converts the string values a client sent, naming the field on error; ``to_ext`` renders the strings a
Java peer expects (booleans as "true"/"false", ``None`` omitted).

SEND_MESSAGE_V2 sends SendMessageRequestHeader under one-letter names (``a``..``n``): see
``SEND_V2_NAMES``.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from broker_store.protocol.errors import ProtocolError


def wire(name: str, default: Any = dataclasses.MISSING) -> Any:
    """Field whose extFields name is not the camelCase of its Python name."""
    return field(default=default, metadata={"wire": name})


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


_INT_RANGE = (-(2**63), 2**63 - 1)


def _convert(header: str, name: str, kind: type, raw: str) -> Any:
    if kind is str:
        return raw
    if kind is bool:
        low = raw.strip().lower()
        if low in ("true", "1"):
            return True
        if low in ("false", "0", ""):
            return False
        raise ProtocolError(f"{header}.{name}: {raw!r} is not a boolean")
    try:
        value = int(raw)
    except ValueError as exc:
        raise ProtocolError(f"{header}.{name}: {raw!r} is not an integer") from exc
    if not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
        raise ProtocolError(f"{header}.{name}: {raw!r} is out of the 64-bit range")
    return value


class Header:
    """Base of all headers (subclasses are frozen dataclasses)."""

    _spec: ClassVar[tuple[tuple[str, str, type, bool], ...]]

    @classmethod
    @functools.cache
    def _fields(cls) -> tuple[tuple[str, str, type, bool], ...]:
        hints = typing.get_type_hints(cls)
        spec = []
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            hint = hints[f.name]
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            kind = args[0] if args else hint
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            spec.append((f.name, f.metadata.get("wire", _camel(f.name)), kind, required))
        return tuple(spec)

    @classmethod
    def from_ext(cls, ext: dict[str, str], names: dict[str, str] | None = None) -> Self:
        """Build from extFields; ``names`` maps wire names to aliases (SEND_MESSAGE_V2)."""
        values = {}
        for attr, wire_name, kind, required in cls._fields():
            key = names.get(wire_name, wire_name) if names else wire_name
            raw = ext.get(key)
            if raw is None:
                if required:
                    raise ProtocolError(f"{cls.__name__}: required field {wire_name!r} is missing")
                continue
            values[attr] = _convert(cls.__name__, wire_name, kind, raw)
        return cls(**values)

    def to_ext(self, names: dict[str, str] | None = None) -> dict[str, str]:
        out = {}
        for attr, wire_name, _kind, _required in self._fields():
            value = getattr(self, attr)
            if value is None:
                continue
            key = names.get(wire_name, wire_name) if names else wire_name
            out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
        return out


@dataclass(frozen=True, slots=True)
class SendMessageRequestHeader(Header):
    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str | None = None
    reconsume_times: int | None = None
    unit_mode: bool | None = None
    batch: bool | None = None
    max_reconsume_times: int | None = None
    broker_name: str | None = None


SEND_V2_NAMES = {
    "producerGroup": "a", "topic": "b", "defaultTopic": "c", "defaultTopicQueueNums": "d", "queueId": "e",
    "sysFlag": "f", "bornTimestamp": "g", "flag": "h", "properties": "i", "reconsumeTimes": "j", "unitMode": "k",
    "maxReconsumeTimes": "l", "batch": "m", "brokerName": "n",
}


@dataclass(frozen=True, slots=True)
class SendMessageResponseHeader(Header):
    msg_id: str
    queue_id: int
    queue_offset: int
    transaction_id: str | None = None


@dataclass(frozen=True, slots=True)
class PullMessageRequestHeader(Header):
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sys_flag: int
    commit_offset: int
    suspend_timeout_millis: int
    sub_version: int
    subscription: str | None = None
    expression_type: str | None = None
    max_msg_bytes: int | None = None
    broker_name: str | None = None


@dataclass(frozen=True, slots=True)
class PullMessageResponseHeader(Header):
    suggest_which_broker_id: int
    next_begin_offset: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True)
class QueryConsumerOffsetRequestHeader(Header):
    consumer_group: str
    topic: str
    queue_id: int
    set_zero_if_not_found: bool | None = None


@dataclass(frozen=True, slots=True)
class OffsetResponseHeader(Header):
    """Response of QUERY_CONSUMER_OFFSET, GET_MAX_OFFSET, GET_MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP."""

    offset: int


@dataclass(frozen=True, slots=True)
class UpdateConsumerOffsetRequestHeader(Header):
    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: int


@dataclass(frozen=True, slots=True)
class QueueRequestHeader(Header):
    """GET_MAX_OFFSET / GET_MIN_OFFSET request."""

    topic: str
    queue_id: int


@dataclass(frozen=True, slots=True)
class SearchOffsetRequestHeader(Header):
    topic: str
    queue_id: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class UnregisterClientRequestHeader(Header):
    client_id: str = wire("clientID")
    producer_group: str | None = None
    consumer_group: str | None = None


@dataclass(frozen=True, slots=True)
class GetConsumerListByGroupRequestHeader(Header):
    consumer_group: str


@dataclass(frozen=True, slots=True)
class ConsumerSendMsgBackRequestHeader(Header):
    offset: int
    group: str
    delay_level: int
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool | None = None
    max_reconsume_times: int | None = None


@dataclass(frozen=True, slots=True)
class CreateTopicRequestHeader(Header):
    topic: str
    default_topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_filter_type: str
    topic_sys_flag: int | None = None
    order: bool | None = None
    attributes: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteSubscriptionGroupRequestHeader(Header):
    """DELETE_SUBSCRIPTIONGROUP."""

    group_name: str


@dataclass(frozen=True, slots=True)
class TopicRequestHeader(Header):
    """GET_ROUTEINFO_BY_TOPIC, DELETE_TOPIC_IN_BROKER, GET_TOPIC_STATS_INFO (RocketMQ's
    GetTopicStatsInfoRequestHeader)."""

    topic: str


@dataclass(frozen=True, slots=True)
class RegisterBrokerRequestHeader(Header):
    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: int
    heartbeat_timeout_millis: int | None = None
    enable_acting_master: bool | None = None
    compressed: bool | None = None
    body_crc32: int | None = None


@dataclass(frozen=True, slots=True)
class RegisterBrokerResponseHeader(Header):
    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclass(frozen=True, slots=True)
class UnregisterBrokerRequestHeader(Header):
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatRequestHeader(Header):
    cluster_name: str
    broker_addr: str
    broker_name: str
    broker_id: int | None = None
    epoch: int | None = None
    max_offset: int | None = None
    confirm_offset: int | None = None
    heartbeat_timeout_mills: int | None = None
    election_priority: int | None = None


@dataclass(frozen=True, slots=True)
class QueryDataVersionRequestHeader(Header):
    """QUERY_DATA_VERSION request; the body is the broker's DataVersion JSON."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int


@dataclass(frozen=True, slots=True)
class QueryDataVersionResponseHeader(Header):
    changed: bool
