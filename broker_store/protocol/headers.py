"""Typed request/response headers: declarative wire types for the extFields of each request code.

Each header is a frozen dataclass whose snake_case fields map to RocketMQ's camelCase extFields names
(``consumer_group`` <-> ``consumerGroup``; overrides via ``wire(...)``). ``from_ext`` validates and
converts the string values a client sent, naming the field on error; ``to_ext`` renders the strings a
Java peer expects (booleans as "true"/"false", ``None`` omitted).

SEND_MESSAGE_V2 sends SendMessageRequestHeader under one-letter names (``a``..``n``), declared with its
fields (``SEND_V2_NAMES``); ``decode_send_header`` and ``encode_send_v2`` are its hot-path codecs.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Self

from broker_store.protocol.errors import ProtocolError


def wire(name: str, default: Any = dataclasses.MISSING) -> Any:
    """Field whose extFields name is not the camelCase of its Python name."""
    return field(default=default, metadata={"wire": name})


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


_INT_RANGE = (-(2**63), 2**63 - 1)
_I32_RANGE = (-(2**31), 2**31 - 1)


class I32:
    """Marks an int field Java declares ``int``/``Integer`` (``Annotated[int, I32]``): a value past 32 bits is
    refused as RocketMQ's ``Integer.parseInt`` refuses it, instead of reaching a 4-byte field of the store.
    Plain ``int`` fields are Java ``long``s."""


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
    least, most = _I32_RANGE if kind is I32 else _INT_RANGE
    if not least <= value <= most:
        raise ProtocolError(f"{header}.{name}: {raw!r} is out of the {32 if kind is I32 else 64}-bit range")
    return value


class Header:
    """Base of all headers (subclasses are frozen dataclasses; SendMessageRequestHeader says why it is not)."""

    _spec: ClassVar[tuple[tuple[str, str, type, bool], ...]]

    @classmethod
    @functools.cache
    def _fields(cls) -> tuple[tuple[str, str, type, bool], ...]:
        hints = typing.get_type_hints(cls, include_extras=True)
        spec = []
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            hint = hints[f.name]
            args = [a for a in typing.get_args(hint) if a is not type(None)] if typing.get_origin(hint) is not \
                Annotated else []
            kind = args[0] if args else hint
            if typing.get_origin(kind) is Annotated:
                kind = I32 if I32 in kind.__metadata__ else typing.get_args(kind)[0]
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


def v2(short_name: str, default: Any = dataclasses.MISSING) -> Any:
    """Field of SendMessageRequestHeader with its SEND_MESSAGE_V2 one-letter name."""
    return field(default=default, metadata={"v2": short_name})


@dataclass(slots=True)
class SendMessageRequestHeader(Header):
    """SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE request header: the one declaration.

    V1 (SEND_MESSAGE) carries it under the camelCase names: ``to_ext()`` / ``from_ext(ext)``. V2
    (SEND_MESSAGE_V2, and SEND_BATCH_MESSAGE from current clients) under the one-letter names declared here
    (``SEND_V2_NAMES``): ``to_ext(SEND_V2_NAMES)`` / ``from_ext(ext, SEND_V2_NAMES)``. The hot paths use
    ``decode_send_header`` and ``encode_send_v2`` below, written out for speed and held equal to these by
    tests (tests/unit/test_protocol_codec.py, test_decoder_fuzz.py).

    Not frozen, unlike the other headers: the broker builds one per send, and a frozen ``__init__`` (one
    ``object.__setattr__`` per field) cost a large share of decoding it (benchmarks/MEASUREMENTS.md). Read-only
    by contract: nothing assigns to it after decoding.
    """

    producer_group: str = v2("a")
    topic: str = v2("b")
    default_topic: str = v2("c")
    default_topic_queue_nums: Annotated[int, I32] = v2("d")
    queue_id: Annotated[int, I32] = v2("e")
    """-1: any writable queue (the broker picks one)."""
    sys_flag: Annotated[int, I32] = v2("f")
    born_timestamp: int = v2("g")
    flag: Annotated[int, I32] = v2("h")
    properties: str | None = v2("i", None)
    reconsume_times: Annotated[int, I32] | None = v2("j", None)
    unit_mode: bool | None = v2("k", None)
    batch: bool | None = v2("m", None)
    max_reconsume_times: Annotated[int, I32] | None = v2("l", None)
    broker_name: str | None = v2("n", None)


SEND_V2_NAMES = {
    wire_name: f.metadata["v2"] for (_attr, wire_name, _kind, _required), f in zip(
        SendMessageRequestHeader._fields(), dataclasses.fields(SendMessageRequestHeader), strict=True)
}
"""camelCase extFields name -> SEND_MESSAGE_V2 one-letter name, from the declaration above."""

_BOOLS = {"true": True, "false": False}
_INT_MIN, _INT_MAX = _INT_RANGE
_I32_MIN, _I32_MAX = _I32_RANGE


def decode_send_header(ext: dict[str, str], short_names: bool) -> SendMessageRequestHeader:
    """``SendMessageRequestHeader.from_ext(ext, SEND_V2_NAMES if short_names else None)``: exactly its result
    (the same header, or the ProtocolError naming the field), fast for SEND_MESSAGE_V2.

    The broker's put path parses one header per request, and clients send V2. The well-formed V2 case
    (required fields present, integers in their 32- or 64-bit range, booleans spelled "true"/"false") is read here
    in one pass with the short names written out; anything else, and V1, goes to ``from_ext``.
    """
    if short_names:
        g = ext.get
        try:
            d, e, f, born, h = int(ext["d"]), int(ext["e"]), int(ext["f"]), int(ext["g"]), int(ext["h"])
            j, k, l_, m = g("j"), g("k"), g("l"), g("m")
            reconsume = None if j is None else int(j)
            max_reconsume = None if l_ is None else int(l_)
            if (_I32_MIN <= d <= _I32_MAX and _I32_MIN <= e <= _I32_MAX and _I32_MIN <= f <= _I32_MAX
                    and _INT_MIN <= born <= _INT_MAX and _I32_MIN <= h <= _I32_MAX
                    and (reconsume is None or _I32_MIN <= reconsume <= _I32_MAX)
                    and (max_reconsume is None or _I32_MIN <= max_reconsume <= _I32_MAX)):
                return SendMessageRequestHeader(
                    ext["a"], ext["b"], ext["c"], d, e, f, born, h, g("i"), reconsume,
                    None if k is None else _BOOLS[k], None if m is None else _BOOLS[m], max_reconsume, g("n"))
        except (KeyError, ValueError):
            pass
    return SendMessageRequestHeader.from_ext(ext, SEND_V2_NAMES if short_names else None)


def encode_send_v2(producer_group: str, topic: str, default_topic: str, default_topic_queue_nums: int,
                   queue_id: int, sys_flag: int, born_timestamp: int, flag: int, properties: str, batch: bool,
                   broker_name: str) -> dict[str, str]:
    """``SendMessageRequestHeader(..., reconsume_times=0, unit_mode=False, batch=batch).to_ext(SEND_V2_NAMES)``
    written out, keys in the same order: the producer builds one per send."""
    return {
        "a": producer_group, "b": topic, "c": default_topic, "d": str(default_topic_queue_nums),
        "e": str(queue_id), "f": str(sys_flag), "g": str(born_timestamp), "h": str(flag), "i": properties,
        "j": "0", "k": "false", "m": "true" if batch else "false", "n": broker_name,
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
    """BROKER_HEARTBEAT (904), sent in two forms: the name server's lite heartbeat (cluster, address, name:
    keeps the route alive) and the controller heartbeat, which adds the broker id, epoch and offsets an
    election compares (``is_controller_heartbeat``)."""

    cluster_name: str
    broker_addr: str
    broker_name: str
    broker_id: int | None = None
    epoch: int | None = None
    max_offset: int | None = None
    confirm_offset: int | None = None
    heartbeat_timeout_mills: int | None = None
    election_priority: int | None = None

    @property
    def is_controller_heartbeat(self) -> bool:
        """The one rule telling the two forms apart: a controller heartbeat names the broker id and its max
        offset. A lite heartbeat has neither (its id is 0 while primary), and must not reach a controller,
        whose elections would see a max offset of 0."""
        return self.broker_id is not None and self.max_offset is not None


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatResponseHeader(Header):
    """The name server's answer to a lite heartbeat. ``registered`` false: it holds no registration of that
    broker (it restarted, or expired the broker while the broker was frozen) and ignored the heartbeat, so the
    broker registers at once instead of at its next interval. An extension: RocketMQ's brokers send this
    heartbeat oneway and never read an answer, and its name server answers none."""

    registered: bool | None = None


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
