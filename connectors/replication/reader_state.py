"""The replication reader's mutable driver-only state (``connectors.replication.reader``): never shipped to the
executors (the reader's ``__getstate__`` drops it)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from broker_store.client import Admin, MessageQueue, PullConsumer
from broker_store.clock import SYSTEM_CLOCK, ThreadClock
from connectors.core.offsets import SourceOffset
from connectors.core.outage import SourceOutage
from connectors.replication.placement_planner import RangesPlacementPlanner
from connectors.replication.pulling import BEHIND_GRACE_MS
from connectors.replication.run_ahead import RunAhead
from connectors.replication.source_behind import BehindWatch
from connectors.replication.source_maxes import SourceMaxRecorder


@dataclass
class DriverState:
    """Mutable driver-only state of a reader; never shipped to executors (``__getstate__`` drops it)."""

    admin: Admin | None = None
    committer: PullConsumer | None = None
    latest: SourceOffset | None = None
    """Max offsets seen by the last ``latestOffset`` (what ``reportLatestOffset`` reports)."""
    available_now_target: SourceOffset | None = None
    committed: dict[MessageQueue, int] = field(default_factory=dict)
    """Offsets mirrored to the source's consumer group (owned by the commit thread)."""
    pending_commit: Mapping[MessageQueue, int] | None = None
    """The newest end offsets ``commit`` was given that the commit thread has not taken yet."""
    commit_thread: ThreadPoolExecutor | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    outage: SourceOutage | None = None
    missing_warned: dict[str, float] = field(default_factory=dict)
    """Explicit topics found missing -> ``clock`` time of their last WARNING."""
    clock: ThreadClock = SYSTEM_CLOCK
    """Rate-limits warnings and times the driver's outage retries (a fake in unit tests)."""
    placer: RangesPlacementPlanner | None = None
    """Queue placement of ``rowFormat=ranges`` batches with config+link (``placement_planner``)."""
    initial: dict[str, Any] | None = None
    """What ``initialOffset`` decided, returned again by its later calls (see there)."""
    source_maxes: SourceMaxRecorder | None = None
    """The durable record of the source's max offsets (with config+link's Delta location; ``source_maxes``)."""
    stopped: bool = False
    """The link's stop marker (``link_stop``) is set: seen (and said) once per stop, cleared when it is lifted."""
    floor: dict[MessageQueue, int] | None = None
    """After a stop was lifted: the link's Delta resume point then (read again at every lift), which batches
    start at where the query's position is behind it (``link_stop.raised_to_floor``)."""
    planned: bool = False
    """``partitions`` ran once (the first batch of a query resumed from its checkpoint may be a replay)."""
    rotation_after: MessageQueue | None = None
    """Where the next batch's turn-taking starts when the read limit makes queues take turns (``admit``)."""
    behind: BehindWatch = field(default_factory=lambda: BehindWatch(grace_s=BEHIND_GRACE_MS / 1000))
    """Queues that end below the link's position (``source_behind``)."""
    discovery: RunAhead[list[MessageQueue]] | None = None
    """The next trigger's queue discovery, run while a batch runs (``run_ahead``)."""
