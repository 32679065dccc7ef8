"""A link's Delta ``heartbeats`` table: one row per heartbeat that arrived on the link's target.

Written on the job's driver by ``connectors.heartbeat.monitor_loop`` (one commit per poll that saw
arrivals, through ``connectors.core.delta``); read by anyone with a Delta reader (docs/replicator.md,
"History, retention and maintenance"). Layout::

    <delta_location>/<link>/heartbeats/    beside the replication tables of the link

Columns: ``link``, ``seq``, ``source_cluster``, ``target_cluster``; ``born_at`` (the producer's clock
just before the send), ``arrived_at`` (the target broker's store time), ``lag_ms`` (arrived - born),
``seen_at`` (the monitor's clock when it read the heartbeat: "last seen"), ``target_queue``
(``topic/broker/queue id``) and ``target_offset``. Commits carry the txn (monitor run id, poll number):
a run's polls are never recorded twice; a new run reads from the topic's end, so it cannot repeat the
rows of an earlier one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from connectors.core.config import LinkConfig
from connectors.core.delta import CommitResult, DeltaTableSet, timestamp
from connectors.heartbeat.records import Observed

HEARTBEATS = "heartbeats"
_TS = pa.timestamp("us", tz="UTC")
HEARTBEATS_SCHEMA = pa.schema([
    ("link", pa.string()),
    ("seq", pa.int64()),
    ("source_cluster", pa.string()),
    ("target_cluster", pa.string()),
    ("born_at", _TS),
    ("arrived_at", _TS),
    ("lag_ms", pa.int64()),
    ("seen_at", _TS),
    ("target_queue", pa.string()),
    ("target_offset", pa.int64()),
])


class HeartbeatTables(DeltaTableSet):
    """The ``heartbeats`` table of one link (driver only, one writer)."""

    def __init__(self, location: str | Path, **kwargs: Any) -> None:
        super().__init__(location, {HEARTBEATS: HEARTBEATS_SCHEMA}, (HEARTBEATS,), **kwargs)

    @classmethod
    def for_link(cls, link: LinkConfig, **kwargs: Any) -> HeartbeatTables:
        return cls(Path(link.delta_location).resolve() / link.name, **kwargs)

    def record(self, run_id: str, poll: int, arrivals: Sequence[Observed], seen_ms: int) -> CommitResult:
        """Append one poll's arrivals (idempotent per (run id, poll number))."""

        def rows(_table: DeltaTable | None) -> list[dict[str, Any]]:
            return [{
                "link": o.heartbeat.link, "seq": o.heartbeat.seq, "source_cluster": o.heartbeat.source,
                "target_cluster": o.heartbeat.target, "born_at": timestamp(o.heartbeat.born_ms),
                "arrived_at": timestamp(o.store_ms), "lag_ms": o.lag_ms, "seen_at": timestamp(seen_ms),
                "target_queue": o.queue, "target_offset": o.offset,
            } for o in arrivals]

        return self.commit_tables(run_id, poll, {HEARTBEATS: rows}, seen_ms)
