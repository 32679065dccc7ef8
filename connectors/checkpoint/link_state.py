"""What the replication link has done so far, as the checkpoint translation needs it: the offset-map runs
(source offsets -> target offsets) and the committed next source offset per queue.

Read on the Spark driver by ``connectors.checkpoint.committer`` once per checkpoint, from the link's Delta
tables that the replication writer commits (``connectors.replication.tables`` owns their format: this module
only reads ``offset_map`` and ``offsets`` through ``LinkTables``). The checkpoint package depends on the
replication package's tables and nothing else of it; data flows one way (replication -> checkpoint).

Order matters: ``OffsetTranslator.add`` takes runs oldest first (a re-replicated range: the newest run wins).
Rows are ordered by ``committed_at`` (the driver's clock at the batch commit), then batch id, then source
offset: the order the writer committed them.

The offset map is read whole on every call and the translator rebuilt; a long-running link with millions
of runs would want an incremental read (Delta versions after the last one read) — see the README's
follow-ups.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from deltalake.exceptions import DeltaError

from connectors.checkpoint.translation import OffsetTranslator, Run, TargetQueueKey
from connectors.core.errors import TableError
from connectors.core.offsets import QueueKey
from connectors.replication.tables import OFFSET_MAP, LinkTables

_MAP_COLUMNS = ["source_topic", "source_broker", "source_queue_id", "source_first_offset", "source_last_offset",
                "target_topic", "target_broker", "target_queue_id", "target_first_offset", "target_last_offset",
                "messages", "batch_id", "committed_at"]


@dataclass(frozen=True)
class LinkProgress:
    """The link's replication progress at one moment."""

    translator: OffsetTranslator
    replicated_next: dict[QueueKey, int]
    """Committed next source offset per source queue (``LinkTables.latest_offsets``)."""
    runs: int
    """Offset-map rows read."""


def read_link_progress(tables: LinkTables) -> LinkProgress:
    """The link's offset map and committed offsets. Offsets are read *first*: the offset map committed
    before them (``COMMIT_ORDER``) then covers at least what they claim, so "replication has passed S" is
    never believed before the run that shows where S landed is read."""
    replicated = tables.latest_offsets()
    dt = tables.open(OFFSET_MAP)
    translator = OffsetTranslator()
    if dt is None:
        return LinkProgress(translator, replicated, 0)
    try:
        rows = dt.to_pyarrow_table(columns=_MAP_COLUMNS)
    except (DeltaError, OSError, pa.ArrowException) as exc:
        raise TableError(f"cannot read Delta table {tables.path(OFFSET_MAP)}: {exc}") from exc
    rows = rows.sort_by([("committed_at", "ascending"), ("batch_id", "ascending"),
                         ("source_first_offset", "ascending")])
    for r in rows.to_pylist():
        source = QueueKey(r["source_topic"], r["source_broker"], r["source_queue_id"])
        target = TargetQueueKey(r["target_topic"], r["target_broker"], r["target_queue_id"])
        if r["messages"] <= 0 or r["source_last_offset"] < r["source_first_offset"]:
            continue  # nothing delivered: no run
        translator.add(source, Run(r["source_first_offset"], r["source_last_offset"], target,
                                   r["target_first_offset"], r["target_last_offset"], r["messages"]))
    return LinkProgress(translator, replicated, rows.num_rows)
