"""A link stopped by a disaster-recovery operation: a marker file beside the link's tables that the replication
reader obeys, so a source that comes back after a failover is not copied on behind the operator's back (what
it acknowledged beyond the replicated point is ``python -m jobs.dr recover``'s, marked as recovered), and a
reverse link B -> A waits while A cannot take its writes (``jobs.dr.reverse_start``: a switchover with
``--reverse`` holds it from its fence until A is the standby).

Written and removed by ``jobs.dr.failover`` (its ``stop`` step; ``abort`` removes it) and
``jobs.dr.reverse_start``; read by the replication reader's ``latestOffset`` on the driver once per trigger (one
``stat``): while the marker exists no new batch is planned (``latestOffset`` answers the start offsets) and the
reader logs a warning once per reader. A batch already planned finishes and commits.

Lifting a stop: whoever removes the marker may first move the link's Delta resume point forward (``recover``
commits what it copied; a switchover with ``--reverse`` commits the reverse link's exact start). A reader that
saw the marker reads the resume point once when it is gone and starts its next batches there, where the
query's own position (its Spark checkpoint) is behind it (``raised_to_floor``): what lies between was dealt
with while the link stood still. A job started after the stop was lifted resumes from the Delta resume point
anyway (no checkpoint) or skips it in its first batch (``planning.skip_delivered``). The file
(``broker_store.durable_file``)::

    <delta_location>/<link>/link_stopped.json
    {"version": 1, "crc32": <n>, "operation": "<jobs.dr operation id>", "reason": "...", "stopped_at": <s>}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from broker_store.client import MessageQueue
from broker_store.durable_file import backup_path, read_metadata_file, write_metadata_file
from broker_store.protocol.errors import StoreError
from connectors.core.errors import TableError

STOP_FILE = "link_stopped.json"


@dataclass(frozen=True)
class LinkStop:
    operation: str
    reason: str
    stopped_at: float


def stop_path(tables_location: Path) -> Path:
    return tables_location / STOP_FILE


def is_stopped(tables_location: Path) -> bool:
    """Cheap: the marker exists (the reader's per-trigger check)."""
    return stop_path(tables_location).exists()


def read_stop(tables_location: Path) -> LinkStop | None:
    try:
        payload = read_metadata_file(stop_path(tables_location))
    except StoreError as exc:
        raise TableError(f"the link's stop marker cannot be read: {exc}") from exc
    if payload is None:
        return None
    return LinkStop(str(payload.get("operation")), str(payload.get("reason")), float(payload.get("stopped_at", 0)))


def stop_link(tables_location: Path, stop: LinkStop) -> None:
    """Write the marker (durable on return); idempotent."""
    try:
        write_metadata_file(stop_path(tables_location),
                            {"operation": stop.operation, "reason": stop.reason, "stopped_at": stop.stopped_at})
    except StoreError as exc:
        raise TableError(f"the link's stop marker cannot be written: {exc}") from exc


def resume_link(tables_location: Path) -> None:
    """Remove the marker (and its backup); idempotent."""
    path = stop_path(tables_location)
    for p in (backup_path(path), path):  # the backup first: a crash between leaves the link stopped, not half
        p.unlink(missing_ok=True)


def raised_to_floor(position: Mapping[MessageQueue, int],
                    floor: Mapping[MessageQueue, int] | None) -> dict[MessageQueue, int]:
    """A query's position with every queue raised to ``floor`` where that is ahead (a queue only in ``floor``
    joins at it); never lowered. Pure; ``floor`` None: ``position`` as it is."""
    out = dict(position)
    for q, offset in (floor or {}).items():
        if offset > out.get(q, -1):
            out[q] = offset
    return out
