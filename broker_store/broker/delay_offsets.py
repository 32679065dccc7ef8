"""Delay offsets: how far the schedule service has delivered each level's SCHEDULE_TOPIC_XXXX queue.

Owned by ``BrokerServer``. On a primary the schedule service (``broker.schedule``) advances it; on a replica
the metadata sync (``broker.metadata_sync``) replaces it with the primary's, so a replica that becomes primary
goes on from there. Served by GET_ALL_DELAY_OFFSET (45). Persisted by the server's offset loop, by the sync
round that changed it and on shutdown; a crash loses at most one period of progress (those messages are then
delivered again: at least once, as RocketMQ).

``delayOffset.json`` (see ``broker_store.durable_file``; RocketMQ's DelayOffsetSerializeWrapper plus our version key)::

    {"version": 1, "offsetTable": {"1": 17, "3": 4}}      level -> next queue offset to deliver

On the wire (GET_ALL_DELAY_OFFSET body) the wrapper is fastjson-style, with bare numeric keys; its parser is
``broker_store.protocol.delay_offset`` (shared with the admin client). A level absent from the table is at
offset 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from broker_store.durable_file import load_metadata_file, write_metadata_file
from broker_store.protocol.delay_offset import parse_offset_table
from broker_store.protocol.errors import StoreError
from broker_store.protocol.route import dumps_rocketmq

FILE_NAME = "delayOffset.json"


class DelayOffsetTable:
    """level -> next SCHEDULE_TOPIC_XXXX queue offset to deliver. Single-threaded (the broker's loop)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._table: dict[int, int] = {}
        self._dirty = False

    def load(self) -> None:
        """Read the file, or its ``.bak`` when it is damaged (``metadata_file.load_metadata_file``)."""
        table = load_metadata_file(self.path, _parse)
        if table is not None:
            self._table = table

    def offset(self, level: int) -> int:
        return self._table.get(level, 0)

    def update(self, level: int, offset: int) -> None:
        if self._table.get(level) != offset:
            self._table[level] = offset
            self._dirty = True

    def clamp(self, max_offset: Callable[[int], int]) -> int:
        """Lower every level's offset past its queue's end (``max_offset(level)``) to it (a controller-mode
        replica cut its log, apache/rocketmq#4771); returns how many moved."""
        moved = 0
        for level, offset in list(self._table.items()):
            end = max_offset(level)
            if offset > end:
                self._table[level] = end
                moved += 1
        if moved:
            self._dirty = True
        return moved

    def snapshot(self) -> dict[int, int]:
        return dict(self._table)

    def replace_all(self, table: Mapping[int, int]) -> bool:
        """A replica's metadata sync: the primary's whole table; True if it differed (persist writes it)."""
        if dict(table) == self._table:
            return False
        self._table = dict(table)
        self._dirty = True
        return True

    @property
    def dirty(self) -> bool:
        return self._dirty

    def persist(self, *, force: bool = False) -> bool:
        """Write the table if it changed since the last write (or ``force``); True if written."""
        if not self._dirty and not force:
            return False
        write_metadata_file(self.path, {"offsetTable": {str(level): offset
                                                        for level, offset in sorted(self._table.items())}})
        self._dirty = False
        return True

    def encode_wrapper(self) -> bytes:
        """DelayOffsetSerializeWrapper JSON for GET_ALL_DELAY_OFFSET (bare numeric level keys)."""
        return dumps_rocketmq({"offsetTable": dict(self._table)})


def _parse(data: dict[str, Any]) -> dict[int, int]:
    try:
        return parse_offset_table(data)
    except (AttributeError, TypeError, ValueError) as exc:
        raise StoreError(f"malformed delay offset table: {exc}") from exc
