"""The ``placements`` Delta table of a replication link: every queue placement decision
(``connectors.replication.queue_placement``) the link ever made, so a source queue's target queue never
changes while the link lives, across restarts too. Retention (``connectors.replication.retention``, run by
the link's maintenance rounds) deletes only the decisions of source queues idle for ``placements_retention``.

Written on the driver by ``connectors.replication.placement_planner`` (``rowFormat=ranges``: decided
before any message uses them) and by the writer's ``commit`` (decisions executors made for the other row
formats, before the batch's offsets commit); read by both and by executors (``placement.QueuePlacement``).

Layout: ``<delta_location>/<link>/placements/``, beside the tables of ``connectors.replication.tables``,
format version ``connectors.core.delta.TABLE_FORMAT_VERSION`` (in the table's description). Append-only,
one row per decision::

    source_cluster   string     source cluster name (rows of another source cluster are ignored)
    source_topic     string  }
    source_broker    string  }  the source queue
    source_queue_id  int32   }
    target_topic     string     target topic after the link's mapping
    target_broker    string  }  the target queue every message of the source queue goes to
    target_queue_id  int32   }
    reason           string     "preserved" | "least-loaded" (queue_placement.PRESERVED / LEAST_LOADED)
    decided_by       string     "driver" | "executor"
    decided_at       timestamp[us, UTC]

The first row per (source queue, target topic), in table order, stands: a decision re-made after a crash
(before the batch that made it committed) appends a duplicate that readers ignore.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa

from broker_store.client import MessageQueue
from broker_store.clock import SYSTEM_CLOCK, ThreadClock
from connectors.core.delta import DeltaTableSet, timestamp
from connectors.replication.queue_placement import Placement, TargetQueue

PLACEMENTS = "placements"
DRIVER = "driver"
EXECUTOR = "executor"

PLACEMENTS_SCHEMA = pa.schema([
    ("source_cluster", pa.string()),
    ("source_topic", pa.string()),
    ("source_broker", pa.string()),
    ("source_queue_id", pa.int32()),
    ("target_topic", pa.string()),
    ("target_broker", pa.string()),
    ("target_queue_id", pa.int32()),
    ("reason", pa.string()),
    ("decided_by", pa.string()),
    ("decided_at", pa.timestamp("us", tz="UTC")),
])


class PlacementTable(DeltaTableSet):
    """The placements table of one link (see the module docstring). Not thread-safe."""

    def __init__(self, location: str | Path, *, source_cluster: str,
                 clock: ThreadClock = SYSTEM_CLOCK) -> None:
        """``location``: the link's directory (``<delta_location>/<link>``); the table is created lazily."""
        super().__init__(location, {PLACEMENTS: PLACEMENTS_SCHEMA}, (PLACEMENTS,), clock=clock)
        self.source_cluster = source_cluster

    def load(self) -> list[Placement]:
        """Every decision of this source cluster, in the order they were made (duplicates included: the
        first stands, ``QueuePlacement`` ignores the later ones)."""
        rows = self.read(PLACEMENTS).sort_by([("decided_at", "ascending")])
        return [Placement(MessageQueue(r["source_topic"], r["source_broker"], r["source_queue_id"]), r["target_topic"],
                          TargetQueue(r["target_broker"], r["target_queue_id"]), r["reason"])
                for r in rows.to_pylist() if r["source_cluster"] == self.source_cluster]

    def record(self, placements: Iterable[Placement], decided_by: str) -> None:
        """Append decisions (one Delta commit); durable when this returns."""
        now = timestamp(self.now_ms())
        rows: list[dict[str, Any]] = [
            {"source_cluster": self.source_cluster, "source_topic": p.source.topic,
             "source_broker": p.source.broker_name, "source_queue_id": p.source.queue_id,
             "target_topic": p.target_topic, "target_broker": p.target.broker_name,
             "target_queue_id": p.target.queue_id, "reason": p.reason, "decided_by": decided_by, "decided_at": now}
            for p in placements]
        self.append(PLACEMENTS, rows)
