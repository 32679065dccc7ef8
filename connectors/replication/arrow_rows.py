"""Pulled messages as Spark rows of the per-message schema (``connectors.core.rows.ARROW_SCHEMA``).

Executor only: the reader's ``read`` with ``rowFormat=arrow`` (the default) and ``tuples``.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from broker_store.client import StoredMessage
from broker_store.protocol.message import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY
from connectors.core.rows import ARROW_SCHEMA

_TIMESTAMP_US = pa.timestamp("us", tz="UTC")
_MS = pa.scalar(1000, pa.int64())


def _ms_to_us(values: list[int]) -> pa.Array:
    return pc.multiply(pa.array(values, pa.int64()), _MS).cast(_TIMESTAMP_US)


def messages_to_arrow(messages: Sequence[StoredMessage], broker_name: str, cluster: str) -> pa.RecordBatch:
    """One RecordBatch in ``ARROW_SCHEMA`` for messages of one queue (executor).

    The hot path of the reader: one pass over the messages fills plain lists (the properties map as
    flat key / value lists plus offsets) and each column is built from its list in one call.
    Equivalent to the per-message ``StoredMessage`` accessors (``msg_id``, ``offset_msg_id``, ``tags``)."""
    n = len(messages)
    topics: list[str] = []
    queue_ids: list[int] = []
    queue_offsets: list[int] = []
    msg_ids: list[str] = []
    offset_ids: list[str] = []
    bodies: list[bytes] = []
    tags: list[str | None] = []
    keys: list[str | None] = []
    map_offsets = [0]
    map_keys: list[str] = []
    map_values: list[str] = []
    flags: list[int] = []
    born: list[int] = []
    stored: list[int] = []
    born_hosts: list[str] = []
    reconsume: list[int] = []
    for m in messages:
        props = m.properties
        offset_id = m.offset_msg_id
        topics.append(m.topic)
        queue_ids.append(m.queue_id)
        queue_offsets.append(m.queue_offset)
        msg_ids.append(props.get(PROPERTY_UNIQ_KEY) or offset_id)
        offset_ids.append(offset_id)
        bodies.append(m.body)
        tags.append(props.get(PROPERTY_TAGS))
        keys.append(props.get(PROPERTY_KEYS))
        map_keys.extend(props)
        map_values.extend(props.values())
        map_offsets.append(len(map_keys))
        flags.append(m.flag)
        born.append(m.born_timestamp)
        stored.append(m.store_timestamp)
        born_hosts.append(m.born_host)
        reconsume.append(m.reconsume_times)
    columns = [
        pa.array(topics, pa.string()),
        pa.array([broker_name] * n, pa.string()),
        pa.array(queue_ids, pa.int32()),
        pa.array(queue_offsets, pa.int64()),
        pa.array(msg_ids, pa.string()),
        pa.array(offset_ids, pa.string()),
        pa.array(bodies, pa.binary()),
        pa.array(tags, pa.string()),
        pa.array(keys, pa.string()),
        pa.MapArray.from_arrays(pa.array(map_offsets, pa.int32()), pa.array(map_keys, pa.string()),
                                pa.array(map_values, pa.string())),
        pa.array(flags, pa.int32()),
        _ms_to_us(born),
        _ms_to_us(stored),
        pa.array(born_hosts, pa.string()),
        pa.array(reconsume, pa.int32()),
        pa.array([cluster] * n, pa.string()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
