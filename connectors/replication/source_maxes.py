"""The durable record of the source cluster's max offsets as the replication job saw them, so the recovery point
of a link can be audited after the source is gone (``python -m jobs.dr status`` and ``failover``).

Owner: ``SourceMaxRecorder``, called on the driver by the replication reader's ``latestOffset`` with the max
offsets it has just read (one read per trigger, which the reader does anyway). It writes at most once per
trigger, and only when a queue's max offset changed or the record is older than ``REFRESH_S`` (so the
observation time stays honest while the source is idle: "A still held Y at T"). A failed write is logged and
retried on the next trigger; it never stops replication (the record's times say how old it is). Readers:
``read_source_maxes``. The file (``broker_store.durable_file``: versioned, CRC32, a ``.bak``, replaced
atomically), beside the link's Delta tables::

    <delta_location>/<link>/source_max_offsets.json
    {"version": 1, "crc32": <n>,
     "cluster": "<source cluster>",
     "written_at": <s>,                                  # wall clock of the write
     "queues": {"<topic>/<broker>/<queueId>": [<min offset>, <max offset>, <observed at, s>], ...}}

A queue keeps its last observation when a later trigger did not read it (its broker group was down): the
record only ever says what was seen, and when.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from broker_store.client import MessageQueue
from broker_store.clock import ThreadClock
from broker_store.durable_file import read_metadata_file, write_metadata_file
from broker_store.protocol.errors import StoreError
from connectors.core.errors import TableError
from connectors.core.offsets import parse_queue_key, queue_key

log = logging.getLogger(__name__)

RECORD_FILE = "source_max_offsets.json"
REFRESH_S = 60.0
"""An unchanged record is rewritten (fresh observation times) at most this often."""


class ObservedQueue(NamedTuple):
    """One source queue as last seen."""

    min_offset: int
    max_offset: int
    """The next offset the source would write: every offset below it was acknowledged."""
    observed_at: float
    """Wall clock (s since the epoch) of the read."""


@dataclass(frozen=True)
class SourceMaxes:
    """The record: the source's queues as the job last saw them."""

    cluster: str
    written_at: float
    queues: Mapping[MessageQueue, ObservedQueue]

    def to_json(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "written_at": self.written_at,
                "queues": {queue_key(q): list(o) for q, o in sorted(self.queues.items(),
                                                                     key=lambda kv: queue_key(kv[0]))}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SourceMaxes:
        return cls(str(data["cluster"]), float(data["written_at"]),
                   {parse_queue_key(k): ObservedQueue(int(v[0]), int(v[1]), float(v[2]))
                    for k, v in data["queues"].items()})


def next_record(previous: SourceMaxes | None, cluster: str, bounds: Mapping[MessageQueue, tuple[int, int]],
                now: float, refresh_s: float = REFRESH_S) -> SourceMaxes | None:
    """The record to write after reading ``bounds`` (queue -> (min, max)) at ``now``, or None when there is
    nothing to write: no max offset changed and ``previous`` was written less than ``refresh_s`` ago. Queues
    not read now keep their previous observation. Pure."""
    if previous is not None and previous.cluster == cluster and now - previous.written_at < refresh_s and all(
            q in previous.queues and previous.queues[q].max_offset == m for q, (_, m) in bounds.items()):
        return None
    kept = dict(previous.queues) if previous is not None and previous.cluster == cluster else {}
    kept.update({q: ObservedQueue(lo, hi, now) for q, (lo, hi) in bounds.items()})
    return SourceMaxes(cluster, now, kept)


def record_path(tables_location: Path) -> Path:
    return tables_location / RECORD_FILE


def read_source_maxes(tables_location: Path) -> SourceMaxes | None:
    """The link's record (None before the job's first write); ``TableError`` when it cannot be read."""
    path = record_path(tables_location)
    try:
        payload = read_metadata_file(path)
    except StoreError as exc:
        raise TableError(f"the source max offsets record cannot be read: {exc}") from exc
    if payload is None:
        return None
    try:
        return SourceMaxes.from_json(payload)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise TableError(f"the source max offsets record {path} is not one this version reads: {exc!r}") from exc


class SourceMaxRecorder:
    """Writes one link's record (driver only; one per reader)."""

    def __init__(self, tables_location: Path, cluster: str, clock: ThreadClock, refresh_s: float = REFRESH_S) -> None:
        self.path = record_path(tables_location)
        self._tables_location = tables_location
        self._cluster = cluster
        self._clock = clock
        self._refresh_s = refresh_s
        self._last: SourceMaxes | None = None
        self._loaded = False

    def observe(self, bounds: Mapping[MessageQueue, tuple[int, int]]) -> bool:
        """Record ``bounds`` (queue -> (min, max) read now) if they changed or the record is due; True if
        written. Never raises: a failure is logged and the next call tries again."""
        try:
            if not self._loaded:
                self._last = read_source_maxes(self._tables_location)
                self._loaded = True
            record = next_record(self._last, self._cluster, bounds, self._clock.time(), self._refresh_s)
            if record is None:
                return False
            write_metadata_file(self.path, record.to_json())
        except (TableError, StoreError) as exc:
            log.warning("the source's max offsets could not be recorded in %s (tried again next trigger): %s",
                        self.path, exc)
            return False
        self._last = record
        return True
