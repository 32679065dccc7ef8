"""Where a link's checkpointed consumer groups are: the lowest source offset per queue among their newest
positions, read from the checkpoint connector's ``checkpoints`` table.

Read by the replication writer's offset-map retention (``connectors.replication.retention``: it never folds a
run a group at or above that offset needs) on the driver, once per maintenance round. The checkpoint
connector writes the table (``connectors.checkpoint.tables``, whose schema holds ``POSITION_COLUMNS``); this
module owns the table's name and the columns of a position, so the replication package reads them without
importing the checkpoint package (data flows replication -> checkpoint).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from broker_store.client import MessageQueue

log = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
"""The checkpoint connector's table, beside the link's replication tables (``<delta_location>/<link>/``)."""
POSITION_COLUMNS = ("group", "source_topic", "source_broker", "source_queue_id", "source_offset", "committed_at")
"""A group's next source offset on one source queue at one checkpoint (``source_offset`` -1 / an empty
``source_topic``: a row about the group or a broker as a whole)."""
FLOOR_WINDOW_MS = 15 * 60 * 1000
"""How far back ``group_floors`` looks: a checkpoint query that wrote nothing for this long tells nothing
about the groups (the offset map is then left alone)."""


def floors_from_rows(rows: Sequence[Mapping[str, Any]]) -> dict[MessageQueue, int]:
    """Per source queue, the lowest offset among the groups' newest rows (each group and queue's row with the
    highest ``committed_at``; rows without a source queue or offset are skipped). Pure."""
    newest: dict[tuple[str, MessageQueue], tuple[Any, int]] = {}
    for r in rows:
        if r["source_offset"] is None or r["source_offset"] < 0 or not r["source_topic"]:
            continue
        key = (r["group"], MessageQueue(r["source_topic"], r["source_broker"], r["source_queue_id"]))
        if key not in newest or r["committed_at"] >= newest[key][0]:
            newest[key] = (r["committed_at"], r["source_offset"])
    floors: dict[MessageQueue, int] = {}
    for (_, queue), (_, offset) in newest.items():
        floors[queue] = min(offset, floors.get(queue, offset))
    return floors


def group_floors(location: str | Path, now_ms: int, *, enabled: bool = True,
                 storage_options: Mapping[str, str] | None = None) -> dict[MessageQueue, int] | None:
    """The checkpointed groups' lowest positions per source queue (``floors_from_rows`` over the rows of the
    last ``FLOOR_WINDOW_MS``) of the link whose tables are in ``location``. ``{}`` when the link checkpoints
    no group (``enabled`` false, or no checkpoints table); None when it does but wrote no row in the window,
    or the table cannot be read: the caller must not take that for "no group"."""
    if not enabled:
        return {}
    path = f"{str(location).rstrip('/')}/{CHECKPOINTS}"
    options = dict(storage_options) if storage_options else None
    since = pa.scalar(datetime.fromtimestamp((now_ms - FLOOR_WINDOW_MS) / 1000, tz=UTC), pa.timestamp("us", tz="UTC"))
    try:
        if not DeltaTable.is_deltatable(path, storage_options=options):
            return {}
        rows = DeltaTable(path, storage_options=options).to_pyarrow_dataset().to_table(
            columns=list(POSITION_COLUMNS), filter=ds.field("committed_at") >= since)
    except (DeltaError, OSError, pa.ArrowException) as exc:
        log.info("checkpoints table %s unreadable (%s): group positions unknown", path, exc)
        return None
    if rows.num_rows == 0:
        return None
    return floors_from_rows(rows.to_pylist())
