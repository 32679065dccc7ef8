"""Message properties: the one owner of their wire and storage format.

Used by the message codec (``protocol.message``: decoding stored records, batch entries), the store
(the TAGS code of a ConsumeQueue entry, the WAIT flag of a put), the broker's send path (CLUSTER is
appended to every message) and the client. The fast paths work on the raw bytes without decoding:
they must agree with ``decode_properties`` on what a whole property is (property tests hold them to it).

Format (RocketMQ's MessageDecoder.messageProperties2String), UTF-8::

    name \\x01 value \\x02  name \\x01 value \\x02  ...
    +----+----+-----+----+
    |name|0x01|value|0x02|   repeated; names non-empty; neither names nor values hold 0x01 or 0x02
    +----+----+-----+----+

Readers are tolerant, as RocketMQ's: the last ``\\x02`` may be missing, items without ``\\x01`` are
skipped, and when a name repeats the last entry wins (``decode_properties``). A byte search for
``name\\x01`` only finds a property when it starts the properties or follows a ``\\x02`` (otherwise it
is the end of another property's value): ``find_property`` applies that rule.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence

from broker_store.protocol.errors import ProtocolError

NAME_VALUE_SEPARATOR = "\x01"
"""Between a property's name and its value."""
PROPERTY_SEPARATOR = "\x02"
"""After each property's value."""
NAME_VALUE_SEPARATOR_BYTE = 1
PROPERTY_SEPARATOR_BYTE = 2

# Standard property names (RocketMQ's MessageConst) and the replicator's own.
PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_WAIT = "WAIT"
"""``WAIT=false``: the producer does not wait for durability (SYNC_FLUSH / replica acks)."""
PROPERTY_DELAY = "DELAY"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_MSG_REGION = "MSG_REGION"
PROPERTY_TRACE_SWITCH = "TRACE_ON"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_REPLICATOR_SOURCE = "ROCKETMQ_REPLICATOR_SOURCE"
"""The loop-guard chain of clusters a replicated message passed (format: ``connectors.replication.loop_guard``)."""
PROPERTY_REPLICATOR_POSITION = "ROCKETMQ_REPLICATOR_POSITION"
"""Where the replicator read a message: its position on the link's source, set on every hop (the last
hop's source wins; an upstream value is replaced). Written by ``connectors.replication.forwarding``,
read back by the sink's recovery check (``connectors.replication.resend_check``)::

    ROCKETMQ_REPLICATOR_POSITION = <cluster> "/" <topic> "/" <broker name> "/" <queue id> "/" <queue offset>

    e.g. "src/Orders/broker-a/3/1042": offset 1042 of queue 3 of topic Orders on broker group broker-a
    of cluster src; queue id and offset in decimal ASCII, no sign, no padding.

A cluster name (``[A-Za-z0-9][A-Za-z0-9_.-]*``) and a topic (``[%|a-zA-Z0-9_-]``) never hold "/", so the
value splits into cluster and topic from the left and queue id and offset from the right; the broker name
is what lies between (it may hold "/")."""
PROPERTY_REPLICATOR_RECOVERY = "ROCKETMQ_REPLICATOR_RECOVERY"
"""Set on a message that ``python -m jobs.dr recover`` copied to the target after a failover (a message A had
acknowledged but the link had not replicated when A was lost): the recovery operation's id. Beside the position
property, which names where on A the message was."""
KEY_SEPARATOR = " "
"""Between the keys of the KEYS property."""

# -- whole properties: encode / decode --------------------------------------------------------------


def encode_properties(properties: Mapping[str, str]) -> bytes:
    """Serialise properties; names and values must not contain the two separator characters."""
    parts = []
    for name, value in properties.items():
        if name.__class__ is not str or value.__class__ is not str or not name:
            return _encode_properties_checked(properties)
        parts.append(f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}")
    text = "".join(parts)
    # Every entry adds exactly one of each separator: more means a name or value holds one.
    n = len(parts)
    if text.count(NAME_VALUE_SEPARATOR) != n or text.count(PROPERTY_SEPARATOR) != n:
        return _encode_properties_checked(properties)
    return text.encode()


def _encode_properties_checked(properties: Mapping[str, str]) -> bytes:
    """``encode_properties`` checking every entry, naming the first bad one."""
    parts = []
    for name, value in properties.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise ProtocolError(f"property {name!r} must map a string to a string, got {type(value).__name__}")
        for text in (name, value):
            if NAME_VALUE_SEPARATOR in text or PROPERTY_SEPARATOR in text:
                raise ProtocolError(f"property {name!r} contains a reserved separator character (\\x01 or \\x02)")
        if not name:
            raise ProtocolError("property name must not be empty")
        parts.append(f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}")
    return "".join(parts).encode()


def parse_properties_text(text: str) -> dict[str, str]:
    """Properties from their decoded text; items without a separator are skipped, the last repeat wins."""
    result: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep and name:
            result[name] = value
    return result


def decode_properties(raw: bytes | memoryview | str) -> dict[str, str]:
    """Parse properties. Tolerant as RocketMQ's own decoder: entries without a separator are skipped."""
    if not raw:
        return {}
    if isinstance(raw, str):
        return parse_properties_text(raw)
    try:
        text = bytes(raw).decode()
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"message properties are not valid UTF-8: {exc}") from exc
    return parse_properties_text(text)


# -- fast paths on raw bytes -------------------------------------------------------------------------


def property_key(name: str) -> bytes:
    """``name\\x01``: what ``find_property`` and ``last_value_start`` search for."""
    return f"{name}{NAME_VALUE_SEPARATOR}".encode()


def property_entry(name: str, value: str) -> bytes:
    """``name\\x01value\\x02``: one whole property, ready to append or search for."""
    return f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}".encode()


def find_property(props: bytes, key: bytes) -> int:
    """Start of ``key`` (``name\\x01`` or a whole ``name\\x01value\\x02``) as a whole property in ``props``,
    or -1: a match must start the properties or follow a ``\\x02``. The first such match."""
    pos = props.find(key)
    while pos > 0 and props[pos - 1] != PROPERTY_SEPARATOR_BYTE:
        pos = props.find(key, pos + 1)
    return pos


def any_has_property(props_list: Sequence[bytes], key: bytes) -> bool:
    """Whether any of ``props_list`` holds ``key`` as a whole property. One search of them all joined (by
    ``\\0``, which no key holds) settles the common case, where none even contains the bytes."""
    if len(props_list) == 1:
        return find_property(props_list[0], key) >= 0
    return key in b"\0".join(props_list) and any(find_property(p, key) >= 0 for p in props_list)


def first_value(props: bytes, key: bytes) -> bytes | None:
    """Raw value of the first whole ``key`` (``name\\x01``) property, None without one."""
    pos = find_property(props, key)
    if pos < 0:
        return None
    start = pos + len(key)
    end = props.find(b"\x02", start)
    return props[start:] if end < 0 else props[start:end]


def last_value_start(props: bytes, key: bytes) -> int:
    """Where the value of the LAST whole ``key`` (``name\\x01``) property starts (the one
    ``decode_properties`` keeps), -1 without one. An empty value starts at a ``\\x02`` or at the end."""
    pos = props.rfind(b"\x02" + key)
    if pos >= 0:
        return pos + 1 + len(key)
    return len(key) if props.startswith(key) else -1


def append_properties(props: bytes, entries: bytes) -> bytes:
    """``props`` followed by whole ``entries`` (``name\\x01value\\x02``...), adding the ``\\x02`` a tolerant
    writer may have left off the last property."""
    if props and props[-1] != PROPERTY_SEPARATOR_BYTE:
        return props + b"\x02" + entries
    return props + entries


def ends_a_property(props: bytes) -> bool:
    """Whether entries can be appended to ``props`` as they are (empty, or ending with ``\\x02``)."""
    return not props or props[-1] == PROPERTY_SEPARATOR_BYTE


def put_property(props: bytes, name: str, value: str) -> bytes:
    """``props`` with ``name`` set to ``value``; appended when absent (the cheap, common case), otherwise
    re-encoded with every repeat of ``name`` replaced."""
    if find_property(props, property_key(name)) >= 0:
        decoded = decode_properties(props)
        decoded[name] = value
        return encode_properties(decoded)
    return append_properties(props, property_entry(name, value))


def dropped_entries_pattern(names: Collection[str]) -> re.Pattern[bytes]:
    """Matches ``\\x02 name \\x01 value`` for every name in ``names``. Used by ``strip_properties``: applied
    to the properties with a ``\\x02`` put in front, it removes whole entries and leaves the separators of
    the others (the leading literal lets the regex engine jump between separators)."""
    alternatives = b"|".join(re.escape(n.encode()) for n in sorted(names, key=len, reverse=True))
    return re.compile(rb"\x02(?:" + alternatives + rb")\x01[^\x02]*")


def strip_properties(props: bytes, pattern: re.Pattern[bytes]) -> bytes:
    """``props`` without the entries ``pattern`` (from ``dropped_entries_pattern``) matches."""
    return pattern.sub(b"", b"\x02" + props)[1:]


# -- TAGS: the ConsumeQueue tags code -----------------------------------------------------------------

TAGS_KEY = property_key(PROPERTY_TAGS)


def tags_code_of_properties(properties: bytes | memoryview, hash_tags: Callable[[str], int]) -> int:
    """The ConsumeQueue tags code of raw properties: hash of the first whole TAGS value, 0 without TAGS.

    Recovery and replication rebuild ConsumeQueue entries with this; the broker must compute the
    ``tags_code`` it passes to put the same way, or rebuilt entries will differ from the originals.
    """
    value = first_value(bytes(properties), TAGS_KEY)
    if value is None:
        return 0
    try:
        return hash_tags(value.decode())
    except UnicodeDecodeError:
        return 0


def tags_codes_of_properties(properties_list: Sequence[bytes], hash_tags: Callable[[str], int]) -> list[int]:
    """``tags_code_of_properties`` of each, for a batch: a tag value seen before is not decoded and hashed
    again (messages of one batch mostly share their tags)."""
    codes: list[int] = []
    add = codes.append
    seen: dict[bytes, int] = {}
    for raw in properties_list:
        pos = raw.find(TAGS_KEY)
        if pos < 0:
            add(0)
        elif pos and raw[pos - 1] != PROPERTY_SEPARATOR_BYTE:  # ends another property's value: the general rule
            add(tags_code_of_properties(raw, hash_tags))
        else:
            start = pos + len(TAGS_KEY)
            end = raw.find(b"\x02", start)
            value = raw[start:] if end < 0 else raw[start:end]
            code = seen.get(value)
            if code is None:
                code = seen[value] = tags_code_of_properties(raw, hash_tags)
            add(code)
    return codes
