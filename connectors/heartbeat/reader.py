"""The heartbeat reader: one row per link per heartbeat interval (``readStream.format("rmq_heartbeat")``).

Created by ``connectors.heartbeat.data_source.HeartbeatDataSource.simpleStreamReader``. A Spark
"simple" stream reader: every method runs on the driver (a Python worker of the driver), there are no
partitions. It wraps ``connectors.heartbeat.schedule.HeartbeatSchedule``: ``read(start)`` asks it for
the tick due now, so a batch holds at most one tick (one row per link); Spark's offsets are the
schedule's ``ScheduleState`` (``{"seq": n, "due_ms": t}``), so a restarted query continues the sequence.
Run it with a processing-time trigger shorter than the interval (``jobs/heartbeat.py``: a quarter of it,
at most 1 s): a trigger with no tick due makes no batch.

Rows (``HEARTBEAT_SCHEMA_DDL``): ``link``, ``seq`` and ``due_at`` (when the tick was due).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from pyspark.sql.datasource import SimpleDataSourceStreamReader

from broker_store.clock import SYSTEM_CLOCK, ThreadClock
from connectors.core.driver_log import driver_logging
from connectors.heartbeat.options import HeartbeatOptions
from connectors.heartbeat.schedule import HeartbeatSchedule, ScheduleState, Tick

HEARTBEAT_SCHEMA_DDL = "link STRING, seq BIGINT, due_at TIMESTAMP"


class HeartbeatStreamReader(SimpleDataSourceStreamReader):
    """See the module docstring. ``read`` never blocks; ``readBetweenOffsets`` re-reads a batch exactly."""

    def __init__(self, options: Mapping[str, str], clock: ThreadClock = SYSTEM_CLOCK) -> None:
        self.options = HeartbeatOptions.from_options(options)
        self.schedule = HeartbeatSchedule(self.options.interval_ms, clock)

    def _rows(self, ticks: list[Tick]) -> Iterator[tuple[Any, ...]]:
        # a list's iterator, not a generator: Spark pickles what ``read`` returns
        return iter([(link, tick.seq, datetime.fromtimestamp(tick.due_ms / 1000, UTC))
                     for tick in ticks for link in self.options.link_names])

    def initialOffset(self) -> dict[str, Any]:
        """Driver, once, when the query starts without a Spark checkpoint: the schedule's first state."""
        driver_logging()
        return self.schedule.initial_state().to_offset()

    def read(self, start: dict[str, Any]) -> tuple[Iterator[tuple[Any, ...]], dict[str, Any]]:
        """Driver, each trigger: the tick due after ``start`` (at most one; none before its due time), one row
        per link, and the schedule's next state as the offset."""
        tick, state = self.schedule.next_item(ScheduleState.from_offset(start))
        return self._rows([tick] if tick is not None else []), state.to_offset()

    def readBetweenOffsets(self, start: dict[str, Any], end: dict[str, Any]) -> Iterator[tuple[Any, ...]]:
        """Driver, on recovery: exactly the ticks of a batch planned before a restart (deterministic from the
        two offsets), so a re-run batch sends the same sequence numbers."""
        ticks = self.schedule.ticks_between(ScheduleState.from_offset(start), ScheduleState.from_offset(end))
        return self._rows(ticks)

    def commit(self, end: dict[str, Any]) -> None:
        """Driver, after a batch committed: nothing to acknowledge (the Spark checkpoint holds the schedule)."""
