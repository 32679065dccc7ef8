"""The delay offset table as RocketMQ's DelayOffsetSerializeWrapper carries it: delay level -> the next
SCHEDULE_TOPIC_XXXX queue offset the schedule service delivers.

Wire type only (no I/O). Read by ``broker_store.broker.delay_offsets`` (its ``delayOffset.json`` and a
replica's metadata sync of GET_ALL_DELAY_OFFSET) and by the admin client (``Admin.all_delay_offsets``)::

    DelayOffsetSerializeWrapper   {"offsetTable":{1:17,3:4}}     (fastjson: bare numeric keys on the wire,
                                                                  strings in the file; levels start at 1)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker_store.protocol.errors import ProtocolError


def parse_offset_table(wrapper: Mapping[str, Any]) -> dict[int, int]:
    """The ``offsetTable`` of a DelayOffsetSerializeWrapper (file or wire form; absent: empty); ValueError
    (or TypeError / AttributeError on a wrong shape) if malformed."""
    table = wrapper.get("offsetTable") or {}
    if not isinstance(table, Mapping):
        raise ValueError(f"offsetTable is a {type(table).__name__}, not an object")
    out: dict[int, int] = {}
    for level, offset in table.items():
        level_n, offset_n = int(level), int(offset)
        if level_n < 1 or offset_n < 0:
            raise ValueError(f"level {level!r} -> offset {offset!r}: levels start at 1, offsets at 0")
        out[level_n] = offset_n
    return out


def decode_delay_offsets(body: Mapping[str, Any], source: str) -> dict[int, int]:
    """The table of a GET_ALL_DELAY_OFFSET answer from ``source``; ProtocolError naming it if malformed."""
    try:
        return parse_offset_table(body)
    except (AttributeError, TypeError, ValueError) as exc:
        raise ProtocolError(f"GET_ALL_DELAY_OFFSET from {source}: malformed offset table: {exc}") from exc
