"""Message records and their byte layouts: properties, stored messages (V1), batch bodies, ids.

The stored layout is both the CommitLog record (``broker_store.store``) and the pull-response body
(``broker_store.client``), so it is defined once, here.

Stored message, V1 (big-endian; ``STORED_FIELDS`` declares everything up to and including BODYLEN)::

    offset size field
       0    4  TOTALSIZE            whole record, this field included
       4    4  MAGICCODE            MAGIC_V1 = -626843481 (BLANK_MAGIC marks a segment's tail)
       8    4  BODYCRC              crc32(body) & 0x7FFFFFFF
      12    4  QUEUEID
      16    4  FLAG                 user flag
      20    8  QUEUEOFFSET          index in the ConsumeQueue
      28    8  PHYSICALOFFSET       CommitLog offset of this record
      36    4  SYSFLAG              MSG_FLAG_* bits (compressed, multi-tags, transaction, v6 hosts)
      40    8  BORNTIMESTAMP        ms
      48    8  BORNHOST             IPv4 4 + port 4
      56    8  STORETIMESTAMP       ms
      64    8  STOREHOST            IPv4 4 + port 4
      72    4  RECONSUMETIMES
      76    8  PREPARED_TX_OFFSET
      84    4  BODYLEN, then body
              1  TOPICLEN, then topic (UTF-8, <= 127 bytes)
              2  PROPERTIESLEN, then properties

Batch message body (SEND_BATCH_MESSAGE), one entry per message::

    TOTALSIZE 4 | MAGICCODE 4 (0) | BODYCRC 4 (0) | FLAG 4 | BODYLEN 4 | body | PROPLEN 2 | properties

Properties: ``name \\x01 value \\x02`` repeated, UTF-8 (``protocol.properties`` owns the format).
msgId (offset message id): store IPv4 4 + port 4 + commit-log offset 8, as 32 upper-case hex chars.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import socket
import struct
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from broker_store.protocol.codes import MSG_FLAG_BORNHOST_V6, MSG_FLAG_COMPRESSED, MSG_FLAG_STOREHOST_V6
from broker_store.protocol.errors import ProtocolError
from broker_store.protocol.properties import KEY_SEPARATOR as KEY_SEPARATOR
from broker_store.protocol.properties import NAME_VALUE_SEPARATOR as NAME_VALUE_SEPARATOR
from broker_store.protocol.properties import PROPERTY_CLUSTER as PROPERTY_CLUSTER
from broker_store.protocol.properties import PROPERTY_DELAY as PROPERTY_DELAY
from broker_store.protocol.properties import PROPERTY_KEYS as PROPERTY_KEYS
from broker_store.protocol.properties import PROPERTY_MAX_RECONSUME_TIMES as PROPERTY_MAX_RECONSUME_TIMES
from broker_store.protocol.properties import PROPERTY_MSG_REGION as PROPERTY_MSG_REGION
from broker_store.protocol.properties import PROPERTY_ORIGIN_MESSAGE_ID as PROPERTY_ORIGIN_MESSAGE_ID
from broker_store.protocol.properties import PROPERTY_RECONSUME_TIME as PROPERTY_RECONSUME_TIME
from broker_store.protocol.properties import PROPERTY_REPLICATOR_SOURCE as PROPERTY_REPLICATOR_SOURCE
from broker_store.protocol.properties import PROPERTY_RETRY_TOPIC as PROPERTY_RETRY_TOPIC
from broker_store.protocol.properties import PROPERTY_SEPARATOR as PROPERTY_SEPARATOR
from broker_store.protocol.properties import PROPERTY_TAGS as PROPERTY_TAGS
from broker_store.protocol.properties import PROPERTY_TRACE_SWITCH as PROPERTY_TRACE_SWITCH
from broker_store.protocol.properties import PROPERTY_UNIQ_KEY as PROPERTY_UNIQ_KEY
from broker_store.protocol.properties import PROPERTY_WAIT as PROPERTY_WAIT
from broker_store.protocol.properties import decode_properties as decode_properties
from broker_store.protocol.properties import encode_properties as encode_properties
from broker_store.protocol.properties import parse_properties_text

MAGIC_V1 = -626843481
BLANK_MAGIC = -875286124
STORED_FIELDS: tuple[tuple[str, str], ...] = (
    ("TOTALSIZE", "i"), ("MAGICCODE", "i"), ("BODYCRC", "i"), ("QUEUEID", "i"), ("FLAG", "i"),
    ("QUEUEOFFSET", "q"), ("PHYSICALOFFSET", "q"), ("SYSFLAG", "i"), ("BORNTIMESTAMP", "q"),
    ("BORNHOST", "4s"), ("BORNHOST_PORT", "i"), ("STORETIMESTAMP", "q"), ("STOREHOST", "4s"), ("STOREHOST_PORT", "i"),
    ("RECONSUMETIMES", "i"), ("PREPARED_TX_OFFSET", "q"), ("BODYLEN", "i"),
)
"""The fixed part of a stored record (the layout above, up to BODYLEN), as (name, struct code): the one
statement of it. Every reader and writer of records takes its structs or offsets from here: the codec below,
the store's encoder (``store.record_encoding``), the replicator's forwarding loop (``stored_header_view``)
and its C twin (connectors/replication/_forward.c, whose #defines a test compares with ``STORED_OFFSETS``)."""
STORED_HEADER = struct.Struct(">" + "".join(code for _name, code in STORED_FIELDS))
STORED_HEADER_SIZE = STORED_HEADER.size  # 88
STORED_OFFSETS: dict[str, int] = {
    name: struct.calcsize(">" + "".join(code for _n, code in STORED_FIELDS[:i]))
    for i, (name, _c) in enumerate(STORED_FIELDS)
}
"""Byte offset of each field of ``STORED_FIELDS`` from the start of the record."""
MIN_RECORD_SIZE = STORED_HEADER_SIZE + 1 + 2
"""The smallest stored record: empty body, empty topic, no properties (91 bytes)."""


def stored_fields_struct(first: str, last: str) -> struct.Struct:
    """The fields ``first`` .. ``last`` of ``STORED_FIELDS`` (a contiguous run), packed as one Struct."""
    names = [name for name, _code in STORED_FIELDS]
    run = STORED_FIELDS[names.index(first):names.index(last) + 1]
    return struct.Struct(">" + "".join(code for _name, code in run))


def stored_header_view(*names: str) -> struct.Struct:
    """A Struct that unpacks only ``names`` (in layout order) from the start of a stored record, the fields
    between them skipped as padding; it ends with the last field named."""
    wanted = set(names)
    unknown = wanted - set(STORED_OFFSETS)
    if unknown:
        raise ValueError(f"not fields of a stored record: {sorted(unknown)}")
    fmt, skipped = ">", 0
    for name, code in STORED_FIELDS:
        if not wanted:
            break
        if name in wanted:
            fmt += (f"{skipped}x" if skipped else "") + code
            skipped = 0
            wanted.discard(name)
        else:
            skipped += struct.calcsize(">" + code)
    return struct.Struct(fmt)

BATCH_HEADER = struct.Struct(">iiiii")
MAX_TOPIC_LENGTH = 127
MAX_PROPERTIES_LENGTH = 32767
TOPIC_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")



@functools.lru_cache(maxsize=4096)
def tags_hash_code(tags: str) -> int:
    """Java's String.hashCode of the tag, the value ConsumeQueue entries index for tag filtering."""
    h = 0
    data = tags.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def body_crc(body: bytes | memoryview) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


def validate_topic(topic: str) -> None:
    """Raise ProtocolError naming what is wrong with a topic name (RocketMQ's rules)."""
    if not topic:
        raise ProtocolError("topic name is empty")
    if len(topic.encode()) > MAX_TOPIC_LENGTH:
        raise ProtocolError(f"topic name {topic[:40]!r}... is longer than {MAX_TOPIC_LENGTH} bytes")
    if not TOPIC_PATTERN.match(topic):
        raise ProtocolError(f"topic name {topic!r} contains characters outside [%|a-zA-Z0-9_-]")


def host_to_bytes(host: str) -> tuple[bytes, int]:
    """'1.2.3.4:5' -> (b'\\x01\\x02\\x03\\x04', 5)."""
    ip, _, port = host.rpartition(":")
    try:
        return socket.inet_aton(ip), int(port)
    except (OSError, ValueError) as exc:
        raise ProtocolError(f"{host!r} is not an IPv4 host:port") from exc


def host_from_bytes(ip: bytes, port: int) -> str:
    return f"{socket.inet_ntoa(ip)}:{port}"


def msg_id_prefix(store_ip: bytes, store_port: int) -> str:
    """The first 16 hex digits of every offset message id of one store host (STOREHOST ip 4 + port 4)."""
    return (store_ip + struct.pack(">i", store_port)).hex().upper()


@functools.lru_cache(maxsize=4096)
def host_msg_id_prefix(store_host: str) -> str:
    """``msg_id_prefix`` of an 'ip:port' store host, cached (readers make one id per message)."""
    return msg_id_prefix(*host_to_bytes(store_host))


def msg_id_from_prefix(prefix: str, commit_log_offset: int) -> str:
    """The offset message id of ``commit_log_offset`` on the store host of ``prefix``."""
    return f"{prefix}{commit_log_offset & 0xFFFF_FFFF_FFFF_FFFF:016X}"  # the offset as a big-endian int64


def msg_ids_from_prefix(prefix: str, commit_log_offsets: Sequence[int]) -> tuple[str, ...]:
    """``msg_id_from_prefix`` of each offset (a batch put's ids), all offsets hexed by one call."""
    if not commit_log_offsets:
        return ()
    ids = struct.pack(f">{len(commit_log_offsets)}q", *commit_log_offsets).hex(",", 8).upper()
    return tuple((prefix + ids.replace(",", "," + prefix)).split(","))


def make_msg_id(store_ip: bytes, store_port: int, commit_log_offset: int) -> str:
    """The offset message id (see the module docstring): the one definition the functions above split up."""
    return msg_id_from_prefix(msg_id_prefix(store_ip, store_port), commit_log_offset)


def parse_msg_id(msg_id: str) -> tuple[str, int]:
    """Offset message id -> (store host 'ip:port', commit-log offset)."""
    try:
        raw = bytes.fromhex(msg_id)
        if len(raw) != 16:
            raise ValueError("length")
        port, offset = struct.unpack(">iq", raw[4:])
    except ValueError as exc:
        raise ProtocolError(f"{msg_id!r} is not a 32-hex-digit offset message id") from exc
    return host_from_bytes(raw[:4], port), offset


@dataclass(frozen=True, slots=True)
class Message:
    """A message as a producer sends it."""

    topic: str
    body: bytes
    properties: Mapping[str, str] = field(default_factory=dict)
    """User and system properties (TAGS, KEYS, UNIQ_KEY, ...)."""
    flag: int = 0
    """User flag, stored and returned untouched."""

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message as the broker stored it (RocketMQ's MessageExt)."""

    topic: str
    queue_id: int
    queue_offset: int
    """Position in its ConsumeQueue."""
    commit_log_offset: int
    """Physical offset of the record in the CommitLog."""
    body: bytes
    """Body bytes exactly as produced (decompressed if the producer compressed them)."""
    properties: Mapping[str, str]
    """Every user and system property; a plain dict so records pickle (treat it as read-only)."""
    flag: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_tx_offset: int
    body_crc: int
    store_size: int

    @property
    def msg_id(self) -> str:
        """The client-side unique id (UNIQ_KEY) if set, else the offset message id."""
        return self.properties.get(PROPERTY_UNIQ_KEY) or self.offset_msg_id

    @property
    def offset_msg_id(self) -> str:
        return msg_id_from_prefix(host_msg_id_prefix(self.store_host), self.commit_log_offset)

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)


def _stored_message_maker() -> Callable[..., StoredMessage]:
    """A positional constructor of StoredMessage that fills the slots directly.

    A frozen dataclass's ``__init__`` goes through ``object.__setattr__`` once per field, which costs
    more than decoding the record itself; pull responses build one StoredMessage per message. The
    result is indistinguishable from ``StoredMessage(...)`` (the class has no ``__post_init__``).
    """
    names = [f.name for f in dataclasses.fields(StoredMessage)]
    env: dict[str, Any] = {"_new": object.__new__, "_cls": StoredMessage}
    env.update({f"_set_{n}": getattr(StoredMessage, n).__set__ for n in names})
    body = "\n".join(f"    _set_{n}(m, {n})" for n in names)
    exec(f"def make({', '.join(names)}):\n    m = _new(_cls)\n{body}\n    return m", env)
    maker: Callable[..., StoredMessage] = env["make"]
    return maker


_make_stored_message = _stored_message_maker()


def encode_stored_message(*, topic: bytes, queue_id: int, queue_offset: int, physical_offset: int, body: bytes,
                          properties: bytes, flag: int = 0, sys_flag: int = 0, born_timestamp: int = 0,
                          born_ip: bytes = b"\0\0\0\0", born_port: int = 0, store_timestamp: int = 0,
                          store_ip: bytes = b"\0\0\0\0", store_port: int = 0, reconsume_times: int = 0,
                          prepared_tx_offset: int = 0, crc: int | None = None) -> bytes:
    """Serialise one stored record. Lengths must already be validated (topic <= 127, props <= 32767)."""
    total = STORED_HEADER_SIZE + len(body) + 1 + len(topic) + 2 + len(properties)
    head = STORED_HEADER.pack(total, MAGIC_V1, body_crc(body) if crc is None else crc, queue_id, flag,
                              queue_offset, physical_offset, sys_flag, born_timestamp, born_ip, born_port,
                              store_timestamp, store_ip, store_port, reconsume_times, prepared_tx_offset,
                              len(body))
    return b"".join((head, body, bytes((len(topic),)), topic, len(properties).to_bytes(2, "big"), properties))


def stored_message_size(body_len: int, topic_len: int, properties_len: int) -> int:
    return STORED_HEADER_SIZE + body_len + 1 + topic_len + 2 + properties_len


def decode_stored_message(buf: bytes | memoryview, pos: int = 0, *, decompress: bool = True) -> StoredMessage:
    """Decode the record starting at ``pos``; raises ProtocolError on any inconsistency."""
    try:
        (total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts, born_ip, born_port, store_ts,
         store_ip, store_port, reconsume, prepared, body_len) = STORED_HEADER.unpack_from(buf, pos)
    except struct.error as exc:
        raise ProtocolError(f"truncated stored message at byte {pos}") from exc
    if magic != MAGIC_V1:
        raise ProtocolError(f"stored message at byte {pos} has magic {magic}, expected {MAGIC_V1}")
    if sys_flag & (MSG_FLAG_BORNHOST_V6 | MSG_FLAG_STOREHOST_V6):
        raise ProtocolError(f"stored message at byte {pos} uses IPv6 hosts, which this codec does not read")
    end = pos + total
    if total < STORED_HEADER_SIZE + 3 or end > len(buf):
        raise ProtocolError(f"stored message at byte {pos} claims {total} bytes, {len(buf) - pos} available")
    p = pos + STORED_HEADER_SIZE
    if body_len < 0 or p + body_len + 3 > end:
        raise ProtocolError(f"stored message at byte {pos} has body length {body_len} beyond its record")
    body = bytes(buf[p:p + body_len])
    p += body_len
    topic_len = buf[p]
    p += 1
    topic_raw = bytes(buf[p:p + topic_len])
    p += topic_len
    props_len = int.from_bytes(buf[p:p + 2], "big")
    p += 2
    if p + props_len != end:
        raise ProtocolError(f"stored message at byte {pos}: field lengths do not add up to TOTALSIZE {total}")
    properties = decode_properties(buf[p:p + props_len])
    if decompress and sys_flag & MSG_FLAG_COMPRESSED:
        try:
            body = zlib.decompress(body)
        except zlib.error as exc:
            raise ProtocolError(f"stored message at byte {pos} is flagged compressed but does not inflate") from exc
    try:
        topic = topic_raw.decode()
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"stored message at byte {pos} has a non-UTF-8 topic") from exc
    return StoredMessage(topic=topic, queue_id=queue_id, queue_offset=queue_offset, commit_log_offset=phys,
                         body=body, properties=properties, flag=flag, sys_flag=sys_flag,
                         born_timestamp=born_ts, born_host=host_from_bytes(born_ip, born_port),
                         store_timestamp=store_ts, store_host=host_from_bytes(store_ip, store_port),
                         reconsume_times=reconsume, prepared_tx_offset=prepared, body_crc=crc, store_size=total)


_SPAN_HEADER = stored_header_view("TOTALSIZE", "MAGICCODE", "QUEUEOFFSET")
"""TOTALSIZE, MAGICCODE and QUEUEOFFSET of a stored record (BODYCRC, QUEUEID and FLAG skipped)."""


def stored_record_spans(buf: bytes | memoryview) -> list[tuple[int, int, int]]:
    """(queue offset, start, end) of each stored record in a pull-response body, without decoding.

    Checks only what framing needs (length and magic): a reader that forwards records undecoded
    (the Spark source's raw rows) uses this to count and trim them; the consumer of the bytes decodes
    and validates them fully with ``decode_stored_messages``. Raises ProtocolError when a record's
    length does not fit the buffer.
    """
    spans: list[tuple[int, int, int]] = []
    unpack = _SPAN_HEADER.unpack_from
    pos, n = 0, len(buf)
    while pos < n:
        if n - pos < STORED_HEADER_SIZE:
            raise ProtocolError(f"truncated stored message at byte {pos}")
        total, magic, queue_offset = unpack(buf, pos)
        if magic != MAGIC_V1:
            raise ProtocolError(f"stored message at byte {pos} has magic {magic}, expected {MAGIC_V1}")
        if total < STORED_HEADER_SIZE + 3 or pos + total > n:
            raise ProtocolError(f"stored message at byte {pos} claims {total} bytes, {n - pos} available")
        spans.append((queue_offset, pos, pos + total))
        pos += total
    return spans


def decode_stored_messages(buf: bytes | memoryview, *, decompress: bool = True) -> list[StoredMessage]:
    """Decode a pull-response body: stored records back to back.

    The consumer's hot path: the well-formed case is inlined here (hosts and topics decoded once per
    body); any inconsistency is handed to ``decode_stored_message``, which raises the precise error.
    """
    if buf.__class__ is not bytes:
        buf = bytes(buf)
    out: list[StoredMessage] = []
    append = out.append
    make = _make_stored_message
    unpack = STORED_HEADER.unpack_from
    hosts: dict[tuple[bytes, int], str] = {}
    topics: dict[bytes, str] = {}
    v6 = MSG_FLAG_BORNHOST_V6 | MSG_FLAG_STOREHOST_V6
    min_total = STORED_HEADER_SIZE + 3
    pos = 0
    n = len(buf)
    while pos < n:
        if n - pos < STORED_HEADER_SIZE:
            decode_stored_message(buf, pos, decompress=decompress)  # raises
        (total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts, born_ip, born_port, store_ts,
         store_ip, store_port, reconsume, prepared, body_len) = unpack(buf, pos)
        end = pos + total
        p = pos + STORED_HEADER_SIZE
        t = p + body_len
        if (magic != MAGIC_V1 or sys_flag & v6 or total < min_total or end > n or body_len < 0
                or t + 3 > end):
            append(decode_stored_message(buf, pos, decompress=decompress))  # raises on the problem
            pos = end
            continue
        tl = buf[t]
        q = t + 1 + tl
        if q + 2 > end or q + 2 + ((buf[q] << 8) | buf[q + 1]) != end:
            decode_stored_message(buf, pos, decompress=decompress)  # raises
        topic_raw = buf[t + 1:q]
        topic = topics.get(topic_raw)
        if topic is None:
            try:
                topic = topics[topic_raw] = topic_raw.decode()
            except UnicodeDecodeError as exc:
                raise ProtocolError(f"stored message at byte {pos} has a non-UTF-8 topic") from exc
        properties: dict[str, str] = {}
        if q + 2 < end:
            try:
                text = buf[q + 2:end].decode()
            except UnicodeDecodeError as exc:
                raise ProtocolError(f"message properties are not valid UTF-8: {exc}") from exc
            properties = parse_properties_text(text)
        body = buf[p:t]
        if decompress and sys_flag & MSG_FLAG_COMPRESSED:
            try:
                body = zlib.decompress(body)
            except zlib.error as exc:
                raise ProtocolError(f"stored message at byte {pos} is flagged compressed but does not "
                                    f"inflate") from exc
        born = hosts.get((born_ip, born_port))
        if born is None:
            born = hosts[(born_ip, born_port)] = host_from_bytes(born_ip, born_port)
        store = hosts.get((store_ip, store_port))
        if store is None:
            store = hosts[(store_ip, store_port)] = host_from_bytes(store_ip, store_port)
        append(make(topic, queue_id, queue_offset, phys, body, properties, flag, sys_flag, born_ts, born,
                    store_ts, store, reconsume, prepared, crc, total))
        pos = end
    return out


class BatchEntry(NamedTuple):
    """One message inside a SEND_BATCH_MESSAGE body (a NamedTuple: built once per message on the
    broker's batch put path, where a frozen dataclass's __init__ is measurably slower)."""

    body: bytes
    properties: bytes
    """Raw property bytes, kept undecoded for the store's hot path."""
    flag: int


def encode_batch(messages: list[tuple[bytes, bytes, int]]) -> bytes:
    """(body, encoded properties, flag) per message -> SEND_BATCH_MESSAGE body."""
    parts = []
    for body, props, flag in messages:
        if len(props) > MAX_PROPERTIES_LENGTH:
            raise ProtocolError(f"properties of {len(props)} bytes exceed {MAX_PROPERTIES_LENGTH}")
        total = BATCH_HEADER.size + len(body) + 2 + len(props)
        parts.append(BATCH_HEADER.pack(total, 0, 0, flag, len(body)))
        parts.append(body)
        parts.append(len(props).to_bytes(2, "big"))
        parts.append(props)
    return b"".join(parts)


def split_batch(buf: bytes) -> list[tuple[memoryview, bytes, int]]:
    """``iter_batch`` for the broker's put path: (body view, properties, flag) per message, as a list.

    Bodies are views into ``buf`` (no copy; valid while ``buf`` lives). Raises ProtocolError as
    ``iter_batch`` does.
    """
    out: list[tuple[memoryview, bytes, int]] = []
    append = out.append
    unpack = BATCH_HEADER.unpack_from
    head = BATCH_HEADER.size
    pos, n = 0, len(buf)
    view = memoryview(buf)
    while pos < n:
        if pos + head > n:
            raise ProtocolError(f"batch body truncated at byte {pos}")
        total, _magic, _crc, flag, body_len = unpack(buf, pos)
        end = pos + total
        p = pos + head
        t = p + body_len
        if total < head + 2 or end > n or body_len < 0 or t + 2 > end:
            raise ProtocolError(f"batch entry at byte {pos} has inconsistent lengths (total {total}, body {body_len})")
        if t + 2 + ((buf[t] << 8) | buf[t + 1]) != end:
            raise ProtocolError(f"batch entry at byte {pos}: properties length "
                                f"{(buf[t] << 8) | buf[t + 1]} does not match TOTALSIZE")
        append((view[p:t], buf[t + 2:end], flag))
        pos = end
    return out


def iter_batch(buf: bytes) -> Iterator[BatchEntry]:
    """Decode a SEND_BATCH_MESSAGE body; raises ProtocolError if any entry is malformed."""
    pos, n = 0, len(buf)
    view = memoryview(buf)
    while pos < n:
        if pos + BATCH_HEADER.size > n:
            raise ProtocolError(f"batch body truncated at byte {pos}")
        total, _magic, _crc, flag, body_len = BATCH_HEADER.unpack_from(buf, pos)
        end = pos + total
        p = pos + BATCH_HEADER.size
        if total < BATCH_HEADER.size + 2 or end > n or body_len < 0 or p + body_len + 2 > end:
            raise ProtocolError(f"batch entry at byte {pos} has inconsistent lengths (total {total}, body {body_len})")
        body = bytes(view[p:p + body_len])
        p += body_len
        props_len = int.from_bytes(view[p:p + 2], "big")
        p += 2
        if p + props_len != end:
            raise ProtocolError(f"batch entry at byte {pos}: properties length {props_len} does not match TOTALSIZE")
        yield BatchEntry(body=body, properties=bytes(view[p:end]), flag=flag)
        pos = end
