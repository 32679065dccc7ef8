"""Committed consumer offsets per (topic, group, queue): the broker's consumerOffset table.

Owned by ``BrokerServer``; written by UPDATE_CONSUMER_OFFSET and by pulls carrying
FLAG_COMMIT_OFFSET, read by QUERY_CONSUMER_OFFSET / GET_ALL_CONSUMER_OFFSET. Changes live in memory
and are persisted by the controller every ``offset_persist_interval_seconds`` and on shutdown, so a
crash loses at most that interval of commits (consumers then re-read: at least once).

``consumer_offsets.json`` (see ``broker_store.durable_file``)::

    {"version": 1, "dataVersion": {...}, "offsetTable": {"<topic>@<group>": {"0": 17, "1": 4}}}
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker_store.clock import Clock, wall_ms
from broker_store.durable_file import load_metadata_file, write_metadata_file
from broker_store.protocol.errors import ProtocolError, StoreError
from broker_store.protocol.route import dumps_rocketmq
from broker_store.protocol.topic import DataVersion

FILE_NAME = "consumer_offsets.json"
TOPIC_GROUP_SEPARATOR = "@"


def offset_key(topic: str, group: str) -> str:
    return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"


class ConsumerOffsetManager:
    """In-memory offset table with explicit persistence. Single-threaded (the broker's loop)."""

    def __init__(self, path: Path, *, clock: Clock) -> None:
        self.path = path
        self._clock = clock
        self._table: dict[str, dict[int, int]] = {}
        self.data_version = DataVersion()
        self._dirty = False

    def load(self) -> None:
        """Read the file, or its ``.bak`` when it is damaged (``metadata_file.load_metadata_file``)."""
        loaded = load_metadata_file(self.path, _parse)
        if loaded is not None:
            self._table, self.data_version = loaded

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record a consumer's position (as RocketMQ: the last commit wins, even if lower)."""
        queues = self._table.get(offset_key(topic, group))
        if queues is None:
            queues = self._table[offset_key(topic, group)] = {}
        queues[queue_id] = offset
        self._dirty = True

    def replace_all(self, table: dict[str, dict[int, int]]) -> None:
        """A replica's metadata sync: the primary's whole table (``topic@group`` -> queue -> offset); persisted
        by the next ``persist`` if it differs."""
        if table != self._table:
            self._table = {key: dict(queues) for key, queues in table.items()}
            self._dirty = True

    def clamp(self, max_offset: Callable[[str, int], int]) -> int:
        """Lower every offset past its queue's end (``max_offset(topic, queue_id)``) to that end: after a
        controller-mode replica cut its log, an offset past the cut would skip the records the new primary
        writes there (apache/rocketmq#4771). Returns how many offsets moved."""
        moved = 0
        for key, queues in self._table.items():
            topic = key.split(TOPIC_GROUP_SEPARATOR, 1)[0]
            for queue_id, offset in queues.items():
                end = max_offset(topic, queue_id)
                if offset > end:
                    queues[queue_id] = end
                    moved += 1
        if moved:
            self._dirty = True
        return moved

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """Committed offset, or -1 when the group never committed on this queue."""
        queues = self._table.get(offset_key(topic, group))
        if queues is None:
            return -1
        return queues.get(queue_id, -1)

    def query_all(self, group: str, topic: str) -> dict[int, int]:
        return dict(self._table.get(offset_key(topic, group), {}))

    def groups_of(self, topic: str) -> list[str]:
        prefix = topic + TOPIC_GROUP_SEPARATOR
        return sorted(k[len(prefix) :] for k in self._table if k.startswith(prefix))

    def remove_group(self, group: str, topic: str) -> None:
        if self._table.pop(offset_key(topic, group), None) is not None:
            self._dirty = True

    @property
    def dirty(self) -> bool:
        return self._dirty

    def persist(self, *, force: bool = False) -> bool:
        """Write the table if it changed since the last write (or ``force``); True if written."""
        if not self._dirty and not force:
            return False
        self.data_version = self.data_version.next(wall_ms(self._clock))
        write_metadata_file(
            self.path,
            {
                "dataVersion": self.data_version.to_json(),
                "offsetTable": {
                    key: {str(q): o for q, o in sorted(queues.items())}
                    for key, queues in sorted(self._table.items())
                },
            },
        )
        self._dirty = False
        return True

    def encode_wrapper(self) -> bytes:
        """ConsumerOffsetSerializeWrapper JSON for GET_ALL_CONSUMER_OFFSET (numeric queue-id keys)."""
        return dumps_rocketmq(
            {
                "dataVersion": self.data_version.to_json(),
                "offsetTable": {k: dict(v) for k, v in self._table.items()},
            }
        )


def _parse(data: dict[str, Any]) -> tuple[dict[str, dict[int, int]], DataVersion]:
    try:
        table = {
            str(key): {int(q): int(o) for q, o in queues.items()}
            for key, queues in (data.get("offsetTable") or {}).items()
        }
        return table, DataVersion.from_json(data.get("dataVersion"))
    except (AttributeError, TypeError, ValueError, ProtocolError) as exc:
        raise StoreError(f"malformed offset table: {exc}") from exc
