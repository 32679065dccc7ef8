"""The source offset of a replication query: the next queue offset to read, per source queue.

The Spark source returns it from ``initialOffset`` / ``latestOffset`` and receives it back in
``partitions(start, end)`` and ``commit(end)``; Spark stores it in the checkpoint's offset log, so its
serialised form is persistent and versioned. ``LinkTables.latest_offsets`` rebuilds one when the
checkpoint is gone. Runs on the driver; pure.

Canonical document (JSON; what ``to_dict`` returns and ``to_json`` prints)::

    {"queues": {"<topic>/<brokerName>/<queueId>": <next offset>, ...}, "version": 1}

    keys            sorted as strings at every level, so equal offsets serialise to equal bytes
                    with or without ``sort_keys`` (Spark compares offsets by their JSON)
    <topic>         never contains "/" (RocketMQ topic names are [%|a-zA-Z0-9_-]+)
    <brokerName>    everything between the first and the last "/" (non-empty)
    <queueId>       decimal int >= 0 without leading zeros
    <next offset>   int >= 0: the first queue offset NOT yet replicated
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from broker_store.client import MessageQueue
from connectors.core.errors import OffsetFormatError

OFFSET_FORMAT_VERSION = 1
KEY_SEPARATOR = "/"


def queue_key(queue: MessageQueue) -> str:
    """``"<topic>/<broker>/<queueId>"``, the queue's key in the offset document."""
    return f"{queue.topic}{KEY_SEPARATOR}{queue.broker_name}{KEY_SEPARATOR}{queue.queue_id}"


def parse_queue_key(key: str) -> MessageQueue:
    """Parse a document key (``queue_key``'s inverse); ``OffsetFormatError`` naming the key when malformed."""
    if not isinstance(key, str):
        raise OffsetFormatError(f"queue key {key!r} is not a string")
    topic, sep1, rest = key.partition(KEY_SEPARATOR)
    broker, sep2, queue = rest.rpartition(KEY_SEPARATOR)
    if not (sep1 and sep2 and topic and broker and queue):
        raise OffsetFormatError(f"queue key {key!r} is not '<topic>/<broker>/<queueId>'")
    if not queue.isascii() or not queue.isdigit() or (len(queue) > 1 and queue[0] == "0"):
        raise OffsetFormatError(f"queue key {key!r}: queue id {queue!r} is not a canonical integer >= 0")
    return MessageQueue(topic, broker, int(queue))


@dataclass(frozen=True)
class SourceOffset:
    """Next offset to read per source queue; immutable, hashable by value, picklable."""

    queues: Mapping[MessageQueue, int]
    """Queue -> next queue offset; iteration is in canonical (key string) order."""

    def __post_init__(self) -> None:
        for queue, offset in self.queues.items():
            if not isinstance(queue, MessageQueue):
                raise OffsetFormatError(f"{queue!r} is not a MessageQueue")
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
                raise OffsetFormatError(f"{queue_key(queue)!r}: offset {offset!r} is not an integer >= 0")
        ordered = dict(sorted(self.queues.items(), key=lambda item: queue_key(item[0])))
        object.__setattr__(self, "queues", MappingProxyType(ordered))

    @classmethod
    def of(cls, queues: Mapping[MessageQueue, int] | Iterable[tuple[MessageQueue, int]] = ()) -> SourceOffset:
        """Build from a mapping or (queue, offset) pairs; validated and put in canonical order."""
        return cls(dict(queues))

    def __hash__(self) -> int:
        return hash(tuple(self.queues.items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SourceOffset) and dict(self.queues) == dict(other.queues)

    def __getstate__(self) -> dict[str, Any]:
        return {"queues": dict(self.queues)}  # MappingProxyType does not pickle

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "queues", MappingProxyType(state["queues"]))

    def get(self, queue: MessageQueue, default: int | None = None) -> int | None:
        return self.queues.get(queue, default)

    def merged(self, newer: Mapping[MessageQueue, int]) -> SourceOffset:
        """A copy where ``newer``'s queues replace or extend this offset's."""
        return SourceOffset({**self.queues, **newer})

    def to_dict(self) -> dict[str, Any]:
        """The canonical document as a dict (what Spark's Python source API exchanges)."""
        return {"queues": {queue_key(q): o for q, o in self.queues.items()}, "version": OFFSET_FORMAT_VERSION}

    def to_json(self) -> str:
        """The canonical document, compact, keys sorted."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> SourceOffset:
        """Parse a document; ``OffsetFormatError`` naming the bad key or value."""
        if not isinstance(document, Mapping):
            raise OffsetFormatError(f"offset document must be an object, got {type(document).__name__}")
        unknown = sorted(set(document) - {"queues", "version"})
        if unknown:
            raise OffsetFormatError(f"offset document has unknown keys {unknown}")
        version = document.get("version")
        if version != OFFSET_FORMAT_VERSION or isinstance(version, bool):
            raise OffsetFormatError(f"offset document 'version' is {version!r}; supported: "
                                    f"{OFFSET_FORMAT_VERSION}")
        queues = document.get("queues")
        if not isinstance(queues, Mapping):
            raise OffsetFormatError(f"offset document 'queues' must be an object, "
                                    f"got {type(queues).__name__}")
        parsed: dict[MessageQueue, int] = {}
        for key, offset in queues.items():
            queue = parse_queue_key(key)
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
                raise OffsetFormatError(f"queue key {key!r}: offset {offset!r} is not an integer >= 0")
            parsed[queue] = offset
        return cls(parsed)

    @classmethod
    def from_json(cls, text: str | bytes) -> SourceOffset:
        try:
            document = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise OffsetFormatError(f"offset is not valid JSON: {exc}") from exc
        return cls.from_dict(document)


def parse_queue_offsets(text: str | bytes) -> SourceOffset:
    """Per-queue offsets given by a person: the canonical document above, or the bare mapping
    ``{"<topic>/<broker>/<queueId>": n, ...}``. ``OffsetFormatError`` naming the bad key or value."""
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise OffsetFormatError(f"offsets are not valid JSON: {exc}") from exc
    if isinstance(document, Mapping) and "queues" not in document and "version" not in document:
        document = {"queues": document, "version": OFFSET_FORMAT_VERSION}
    return SourceOffset.from_dict(document)


OffsetSpecKind = Literal["earliest", "latest", "timestamp", "offsets"]


@dataclass(frozen=True)
class OffsetSpec:
    """Where a link's queues start (``starting_offsets`` of a new link) or are reset to
    (``jobs.reset_offsets --to``). Text forms::

        earliest             each queue's min offset
        latest               each queue's max offset (only messages produced from now on)
        timestamp:<ms>       the first offset stored at or after <ms> since the epoch
        {"queues": {...}}    per-queue offsets (``parse_queue_offsets``); the reader starts a queue
        or {"t/b/0": n}      missing from them at earliest
    """

    kind: OffsetSpecKind
    timestamp_ms: int | None = None
    """Set iff ``kind`` is ``timestamp``."""
    offsets: SourceOffset | None = None
    """Set iff ``kind`` is ``offsets``."""

    @classmethod
    def parse(cls, text: str) -> OffsetSpec:
        """``OffsetFormatError`` saying which forms are accepted when ``text`` is none of them."""
        value = text.strip()
        lowered = value.lower()
        if lowered in ("earliest", "latest"):
            return cls("earliest" if lowered == "earliest" else "latest")
        if lowered.startswith("timestamp:"):
            ms = value.split(":", 1)[1].strip()
            if not ms.isascii() or not ms.isdigit():
                raise OffsetFormatError(f"{value!r}: expected timestamp:<ms since the epoch>")
            return cls("timestamp", timestamp_ms=int(ms))
        if value.startswith("{"):
            return cls("offsets", offsets=parse_queue_offsets(value))
        raise OffsetFormatError(f"{value!r} is not earliest, latest, timestamp:<ms> or per-queue offsets JSON")

    def __str__(self) -> str:
        if self.kind == "timestamp":
            return f"timestamp:{self.timestamp_ms}"
        if self.offsets is not None:
            return self.offsets.to_json()
        return self.kind
