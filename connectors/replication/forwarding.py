"""Stored records -> SEND_BATCH_MESSAGE entries: the sink's per-message hot path for raw pulls.

Called on executors by ``connectors.replication.partition_writer.PartitionWriter`` for the records of one
pull (the reader's ``rowFormat=raw`` rows and the ranges the writer pulls itself). It turns each stored
record (V1 layout, ``broker_store.protocol.message``) into the batch entry the target is sent, without
building a message object or a property dict: the body is sliced out, the properties stay bytes and are edited in place
by the rules of ``forwarded_properties``:

* entries named in ``DROPPED_PROPERTIES`` are cut out (one regex pass; in practice the CLUSTER entry
  every broker appends);
* a record without UNIQ_KEY gets its source offset message id as UNIQ_KEY, so re-sends of one source
  message carry one id;
* ``ROCKETMQ_REPLICATOR_SOURCE`` gets the source cluster appended (``connectors.replication.loop_guard``), or the
  record is skipped when the target is already in its chain;
* ``ROCKETMQ_REPLICATOR_POSITION`` is set to the record's position on the source (``source_position``; an upstream
  hop's value is replaced), after the chain, when the forwarder knows its source cluster and the pull names
  its broker.

A record that already carries a chain, an empty UNIQ_KEY, or a compressed body takes the exact path instead
(properties decoded to a dict, body inflated): equivalent output, slower, and rare outside two-way
links. Pulls with no such record go through the same loop written in C (``connectors/replication/_forward.c``, built
by ``pip install -e .`` when a compiler is there); ``RecordForwarder.forward_each`` is the Python loop.

Output entries are byte-exact in body and flag; their properties equal ``forwarded_properties`` of the
source properties as a mapping (order and duplicates as the source stored them).

Batch entry layout (``encode_batch``): TOTALSIZE 4 | MAGICCODE 4 (0) | BODYCRC 4 (0, the target computes
it) | FLAG 4 | BODYLEN 4 | body | PROPLEN 2 | properties.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from enum import Enum
from typing import NamedTuple

from broker_store.protocol.codes import MSG_FLAG_BORNHOST_V6, MSG_FLAG_COMPRESSED, MSG_FLAG_STOREHOST_V6
from broker_store.protocol.errors import ProtocolError
from broker_store.protocol.message import (
    BATCH_HEADER,
    MAGIC_V1,
    MAX_PROPERTIES_LENGTH,
    STORED_HEADER_SIZE,
    decode_stored_message,
    make_msg_id,
    stored_header_view,
)
from broker_store.protocol.message_queue import MessageQueue
from broker_store.protocol.properties import (
    PROPERTY_REPLICATOR_POSITION,
    PROPERTY_REPLICATOR_SOURCE,
    PROPERTY_UNIQ_KEY,
    append_properties,
    dropped_entries_pattern,
    encode_properties,
    last_value_start,
    property_entry,
    property_key,
)
from connectors.replication import loop_guard
from connectors.replication.source_position import format_position, position_entry_prefix

_HEADER = stored_header_view("TOTALSIZE", "MAGICCODE", "QUEUEID", "FLAG", "QUEUEOFFSET", "PHYSICALOFFSET", "SYSFLAG",
                             "BORNTIMESTAMP", "STORETIMESTAMP", "STOREHOST", "STOREHOST_PORT", "BODYLEN")
"""The stored-record fields forwarding needs (BODYCRC, BORNHOST, RECONSUMETIMES and PREPARED_TX_OFFSET
skipped); _forward.c reads the same fields at ``STORED_OFFSETS``."""
assert _HEADER.size == STORED_HEADER_SIZE
_ENTRY_HEADER = BATCH_HEADER.pack
_ENTRY_OVERHEAD = BATCH_HEADER.size + 2
_UNUSUAL_FLAGS = MSG_FLAG_COMPRESSED | MSG_FLAG_BORNHOST_V6 | MSG_FLAG_STOREHOST_V6
_CHAIN_KEY = property_key(PROPERTY_REPLICATOR_SOURCE)
_UNIQ_KEY = property_key(PROPERTY_UNIQ_KEY)
_MAX_STOP = (1 << 63) - 1

try:  # the same loop in C (connectors/replication/_forward.c), built by pip install when a compiler is there
    from connectors.replication import _forward
except ImportError:  # pragma: no cover - depends on the build
    _forward_plain: Callable[..., tuple[list[bytes], list[int], list[int], list[int], list[int], int, int | None]
                             | None] | None = None
else:
    _forward_plain = _forward.forward_plain

DROPPED_PROPERTIES = frozenset({
    "CLUSTER",                      # the target broker stamps its own cluster name when it stores
    "MSG_REGION", "TRACE_ON",       # broker region / trace switch of the cluster the message is on
    "MIN_OFFSET", "MAX_OFFSET",     # pull-time annotations of Java consumers, never meant to be stored
    "CONSUME_START_TIME",           # consumer-side bookkeeping
    "DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "__STARTDELIVERTIME",
                                    # the delay was served on the source; keeping it delays the copy again
    "REAL_TOPIC", "REAL_QID",       # the source's schedule / transaction bookkeeping (source topology)
    "TRAN_MSG", "PGROUP", "TRAN_PREPARED_QUEUE_OFFSET",
                                    # would make the target store a transaction half message
    PROPERTY_REPLICATOR_POSITION,   # an upstream hop's position: replaced by this hop's (source_position)
})
"""Properties not copied to the target (see ``connectors.replication.writer``'s module docstring)."""


class Skip(Enum):
    """The type of ``SKIP`` (an enum member, so ``stamped is SKIP`` narrows a ``Stamp``'s answer)."""

    SKIP = "skip"


SKIP = Skip.SKIP
"""What a ``Stamp`` returns for a chain that must not be written to the target (a loop)."""


def forwarded_properties(source: Iterable[tuple[str, str]], msg_id: str | None, chain: str | None,
                         dropped: Collection[str] = DROPPED_PROPERTIES, position: str | None = None) -> dict[str, str]:
    """The properties a replicated message is sent with, from the source's (name, value) pairs: all but
    ``dropped``; UNIQ_KEY set to ``msg_id`` when it is missing or empty (re-sends of one source message
    carry one id); the loop-guard chain set to ``chain``, the already stamped value (None: left as is); the
    source position (``source_position.format_position``) last, when given.
    The one statement of these rules: ``target_properties``, the writer's row path and
    ``RecordForwarder``'s exact path all call it, and its byte-level fast path is tested against it."""
    props = {k: v for k, v in source if k not in dropped}
    if msg_id and not props.get(PROPERTY_UNIQ_KEY):
        props[PROPERTY_UNIQ_KEY] = msg_id
    if chain is not None:
        props[PROPERTY_REPLICATOR_SOURCE] = chain
    if position is not None:
        props[PROPERTY_REPLICATOR_POSITION] = position
    return props


Stamp = Callable[[str | None], "str | None | Skip"]
"""The chain value a message with chain ``c`` (None: none) is sent with, or ``SKIP``."""


class ForwardedPull(NamedTuple):
    """The batch entries made from one pull's records, in queue-offset order."""

    entries: list[bytes]
    """One encoded SEND_BATCH_MESSAGE entry per forwarded record."""
    offsets: list[int]
    """Source queue offset of each entry."""
    sizes: list[int]
    """Body bytes of each entry (what the sink's batch limits and byte counts use)."""
    borns: list[int]
    """Source born timestamp (ms) of each entry."""
    starts: list[int]
    """Where each entry's source record starts in the pull's buffer (failure records decode it)."""
    refused: list[tuple[int, str]]
    """(start, reason) of records no target could take as they are (properties too long once stamped)."""
    skipped: int
    """Records not forwarded because the target cluster is in their chain (loop guard)."""
    next_offset: int
    """Highest queue offset seen + 1 (skipped and refused records included); -1 for an empty pull."""
    oldest_store_ms: int | None
    """Earliest source store timestamp among the records."""


class RecordForwarder:
    """Turns pulls of one source queue into batch entries; one per sink task (executor, one thread).

    ``dropped``: property names never copied; ``stamp``: the loop-guard decision per existing chain
    (memoised by the caller's ``_chain``); ``cluster``: the source cluster, which the position property
    names (None: no position is written, as for a pull that names no broker).
    """

    def __init__(self, dropped: Collection[str], stamp: Stamp, cluster: str | None = None) -> None:
        self._dropped = frozenset(dropped)
        self._dropped_names = tuple(name.encode() for name in sorted(self._dropped))
        self._drop = dropped_entries_pattern(dropped).sub
        self._stamp = stamp
        self._plain_suffix: dict[str | None, bytes | None] = {}
        self._cluster = cluster
        self._position_prefixes: dict[tuple[str, str, int], bytes] = {}

    def position_prefix(self, topic: str, broker: str | None, queue_id: int) -> bytes:
        """The position entry's bytes before the offset for records of this queue (b"": none is written)."""
        if self._cluster is None or broker is None:
            return b""
        key = (topic, broker, queue_id)
        prefix = self._position_prefixes.get(key)
        if prefix is None:
            prefix = self._position_prefixes[key] = position_entry_prefix(self._cluster, MessageQueue(*key))
        return prefix

    def _suffix_for_unchained(self) -> bytes | None:
        """Properties appended to a record without a chain (None: such records are skipped)."""
        try:
            return self._plain_suffix[None]
        except KeyError:
            stamped = self._stamp(None)
            suffix = None if stamped is SKIP else (
                b"" if stamped is None else property_entry(PROPERTY_REPLICATOR_SOURCE, str(stamped)))
            self._plain_suffix[None] = suffix
            return suffix

    def forward(self, buf: bytes, topic: str, queue_id: int, first: int = 0, stop: int = 1 << 63,
                broker: str | None = None) -> ForwardedPull:
        """The entries for ``buf``: stored records of queue ``queue_id`` of ``topic`` (on broker group ``broker``,
        which the position property names), back to back.
        Records outside queue offsets ``[first, stop)`` are left out (a pull trimmed to its range).

        Raises ProtocolError when a record is malformed (the exact decoder names the problem) or belongs
        to another queue than the pull's.

        A pull whose records are all plain (well formed, of this queue, uncompressed, no chain, no empty
        UNIQ_KEY, properties within the limit) goes through the C loop of ``connectors.replication._forward`` when it
        is built; any other pull, or every pull without it, through ``forward_each``. Both give the same
        result (tests/unit/test_connectors_forwarding.py holds them equal).
        """
        suffix = self._suffix_for_unchained()
        if _forward_plain is not None and suffix is not None:
            out = _forward_plain(buf, topic.encode(), queue_id, first, min(stop, _MAX_STOP), self._dropped_names,
                                 suffix, MAX_PROPERTIES_LENGTH, self.position_prefix(topic, broker, queue_id))
            if out is not None:
                entries, offsets, sizes, borns, starts, next_offset, oldest = out
                return ForwardedPull(entries, offsets, sizes, borns, starts, [], 0, next_offset, oldest)
        return self.forward_each(buf, topic, queue_id, first, stop, broker)

    def forward_each(self, buf: bytes, topic: str, queue_id: int, first: int = 0,
                     stop: int = 1 << 63, broker: str | None = None) -> ForwardedPull:
        """``forward`` in Python, record by record: every case (the exact path, refusals, errors)."""
        entries: list[bytes] = []
        offsets: list[int] = []
        sizes: list[int] = []
        borns: list[int] = []
        starts: list[int] = []
        refused: list[tuple[int, str]] = []
        skipped = 0
        next_offset = -1
        oldest: int | None = None
        unpack = _HEADER.unpack_from
        drop = self._drop
        plain_suffix = self._suffix_for_unchained()
        position = self.position_prefix(topic, broker, queue_id)
        topic_raw = topic.encode()
        topic_len = len(topic_raw)
        min_total = STORED_HEADER_SIZE + 3 + topic_len
        pos, n = 0, len(buf)
        while pos < n:
            if n - pos < STORED_HEADER_SIZE:
                decode_stored_message(buf, pos)  # raises: truncated
            (total, magic, qid, flag, offset, phys, sys_flag, born_ms, store_ms, store_ip, store_port,
             body_len) = unpack(buf, pos)
            end = pos + total
            p = pos + STORED_HEADER_SIZE
            t = p + body_len
            q = t + 1 + topic_len
            if (magic != MAGIC_V1 or total < min_total or end > n or body_len < 0 or q + 2 > end
                    or buf[t] != topic_len or q + 2 + ((buf[q] << 8) | buf[q + 1]) != end):
                decode_stored_message(buf, pos)  # raises on the problem
                raise ProtocolError(f"stored message at byte {pos} is not a record of topic {topic}")
            if qid != queue_id or not buf.startswith(topic_raw, t + 1):
                raise ProtocolError(f"stored message at byte {pos} belongs to {buf[t + 1:q]!r} queue {qid}, "
                                    f"not to the pulled {topic} queue {queue_id}")
            if not first <= offset < stop:
                pos = end
                continue
            if offset >= next_offset:
                next_offset = offset + 1
            if oldest is None or store_ms < oldest:
                oldest = store_ms
            props = buf[q + 2:end]
            uniq = last_value_start(props, _UNIQ_KEY)  # the last UNIQ_KEY entry counts, as when decoding
            if (sys_flag & _UNUSUAL_FLAGS or _CHAIN_KEY in props or plain_suffix is None
                    or (uniq >= 0 and (uniq == len(props) or props[uniq] == 2))):  # an empty UNIQ_KEY
                exact = self._exact(buf, pos, position)
                if exact is None or isinstance(exact, str):
                    if exact is None:
                        skipped += 1
                    else:
                        refused.append((pos, exact))
                    pos = end
                    continue
                entry = exact
                body_len = entry_body_length(entry)
            else:
                props = drop(b"", b"\x02" + props)[1:]  # properties.strip_properties, with the bound sub
                if uniq < 0:
                    props = append_properties(
                        props, property_entry(PROPERTY_UNIQ_KEY, make_msg_id(store_ip, store_port, phys)))
                if plain_suffix:
                    props = append_properties(props, plain_suffix)
                if position:
                    props = append_properties(props, b"%s%d\x02" % (position, offset))
                plen = len(props)
                if plen > MAX_PROPERTIES_LENGTH:
                    refused.append((pos, f"properties of {plen} bytes exceed {MAX_PROPERTIES_LENGTH} once the "
                                         f"replicator's entries are added"))
                    pos = end
                    continue
                entry = b"".join((_ENTRY_HEADER(_ENTRY_OVERHEAD + body_len + plen, 0, 0, flag, body_len),
                                  buf[p:t], plen.to_bytes(2, "big"), props))
            entries.append(entry)
            offsets.append(offset)
            sizes.append(body_len)
            borns.append(born_ms)
            starts.append(pos)
            pos = end
        return ForwardedPull(entries, offsets, sizes, borns, starts, refused, skipped, next_offset, oldest)

    def _exact(self, buf: bytes, pos: int, position: bytes) -> bytes | str | None:
        """The entry for one record through decoded properties (records with a chain, compressed
        bodies, or all records when unchained ones are skipped): None when the loop guard skips it, a
        reason when no target could take it. Raises ProtocolError for what the codec refuses."""
        message = decode_stored_message(buf, pos, decompress=True)
        source = message.properties
        stamped = self._stamp(source.get(PROPERTY_REPLICATOR_SOURCE))
        if stamped is SKIP:
            return None
        props = forwarded_properties(source.items(), message.offset_msg_id,
                                     None if stamped is None else str(stamped), self._dropped,
                                     position_value(position, message.queue_offset))
        try:
            return encode_entry(message.body, encode_properties(props), message.flag)
        except ProtocolError as exc:
            return str(exc)


def position_value(prefix: bytes, offset: int) -> str | None:
    """The position value a record at ``offset`` gets from ``RecordForwarder.position_prefix`` (None: none)."""
    if not prefix:
        return None
    return prefix[prefix.index(1) + 1:].decode() + str(offset)


def encode_entry(body: bytes, properties: bytes, flag: int) -> bytes:
    """One SEND_BATCH_MESSAGE entry; raises ProtocolError when the properties are too long."""
    if len(properties) > MAX_PROPERTIES_LENGTH:
        raise ProtocolError(f"properties of {len(properties)} bytes exceed {MAX_PROPERTIES_LENGTH}")
    return b"".join((_ENTRY_HEADER(_ENTRY_OVERHEAD + len(body) + len(properties), 0, 0, flag, len(body)),
                     body, len(properties).to_bytes(2, "big"), properties))


def with_entry_property(entry: bytes, name: str, value: str) -> bytes:
    """``entry`` (an encoded batch entry) with one property appended; raises ProtocolError when the properties
    grow too long."""
    body_len = entry_body_length(entry)
    props_at = BATCH_HEADER.size + body_len
    body = entry[BATCH_HEADER.size:props_at]
    flag = int.from_bytes(entry[12:16], "big")
    properties = entry[props_at + 2:]
    return encode_entry(body, properties + property_entry(name, value), flag)


def entry_body_length(entry: bytes) -> int:
    """BODYLEN of an encoded batch entry."""
    return int.from_bytes(entry[16:20], "big")


def target_properties(source_properties: Mapping[str, str], source_cluster: str | None,
                      msg_id: str | None = None, position: tuple[MessageQueue, int] | None = None) -> dict[str, str]:
    """The properties a replicated message is sent with (see ``DROPPED_PROPERTIES``); input untouched.
    The rule the forwarding loops apply in bulk, for one decoded message.

    ``source_cluster`` None (rows without a cluster name) copies the chain unchanged and writes no position;
    ``position``: the message's (source queue, queue offset), written as its position property."""
    props = forwarded_properties(source_properties.items(), msg_id, None)
    if not source_cluster:
        return props
    props = loop_guard.stamp(props, source_cluster)
    if position is not None:
        props[PROPERTY_REPLICATOR_POSITION] = format_position(source_cluster, *position)
    return props
