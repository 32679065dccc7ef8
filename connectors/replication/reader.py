"""The replication reader: a micro-batch stream reader over RocketMQ queues (``readStream.format("rocketmq")``).

Created by ``connectors.replication.data_source.RocketMQDataSource.streamReader``; the writer half is
``connectors.replication.writer``. Its moving parts are modules of their own, each testable without Spark
or a broker: options (``reader_options``), batch planning (``planning``), pulling (``pulling``) and the
per-message Arrow rows (``arrow_rows``); row schemas are ``connectors.core.rows``.

Where code runs (Spark's Python Data Source contract):

* driver, one long-lived Python process per query: ``RocketMQStreamReader`` ``initialOffset``,
  ``latestOffset``, ``partitions``, ``commit``, ``prepareForTriggerAvailableNow``,
  ``reportLatestOffset``, ``stop``. It owns an ``Admin`` (route, min/max offsets, timestamp search; the
  offset look-ups are ``source_offsets``: a trigger's max offsets cost one request per topic and broker group)
  and a ``PullConsumer`` used only to commit the consumer group's offsets on the source. Every admin
  call rides out a source outage (``connectors.core.outage.SourceOutage``, the link's ``retry_*``).
  ``jobs.reset_offsets`` uses the same discovery and offset look-ups outside Spark.
* executors: ``RocketMQStreamReader.read(partition)``, stateless per call; the ``PullConsumer`` is
  shared per executor Python process (``connectors.core.executor.executor_consumer``, keyed by name servers,
  group and credentials).

Row formats. ``arrow`` / ``tuples`` give any Spark query one row per message. ``raw`` and ``ranges`` exist
for the ``rocketmq`` sink when a query only copies (the replicate job): ``raw`` hands each pull's records
to Spark undecoded (one row per pull; the sink forwards them record by record), ``ranges`` hands Spark
only the plan, one row per queue range ``[startOffset, endOffset)``, and the sink's task pulls the range
and sends as it pulls. With ``ranges`` the messages never cross Spark's JVM or a second Python worker, which
cuts the CPU per message of both (``benchmarks/replicator.py``; figures in ``benchmarks/MEASUREMENTS.md``).
Progress then counts ranges as input rows (the per-batch log line of the sink
and the Delta ``metrics`` table count messages). Delivery, offsets and data-loss rules are the same in
every format: the pulls stop exactly at the planned end offsets either way (``pull_results``).

Offsets are ``connectors.core.offsets.SourceOffset`` documents (``{"queues": {"<topic>/<broker>/<qid>": n},
"version": 1}``, n = next offset to read), which is what Spark writes into ``<checkpoint>/offsets/<batch>``.
A queue absent from ``start`` but present in ``end`` is a queue discovered while running: it is read
from its earliest offset (``QueueRange.from_earliest``), never reported as data loss.

Options (case-insensitive): the fields of ``reader_options.SourceOptions`` (the link's ``ReadSettings`` and the
reader's own), listed with their defaults in docs/configuration.md, "Spark options" (generated).
The replicate job sets ``maxPartitions`` to the application's cores.
"""

from __future__ import annotations

import functools
import itertools
import logging
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from broker_store.client import Admin, MessageQueue, PullConsumer
from broker_store.client.route_cache import subscribe_queues
from broker_store.protocol.errors import RocketMQError, TopicNotExistError
from broker_store.protocol.route import TopicRouteData
from connectors.core.driver_log import driver_logging
from connectors.core.errors import TableError
from connectors.core.executor import freeze_worker_heap
from connectors.core.offsets import OffsetSpec, SourceOffset, queue_key
from connectors.core.outage import OutagePolicy, SourceOutage
from connectors.core.rows import (
    COL_BROKER,
    COL_CONFIG_PATH,
    COL_CONSUMER_GROUP,
    COL_END_OFFSET,
    COL_FAIL_ON_DATA_LOSS,
    COL_FROM_EARLIEST,
    COL_PULL_BATCH_SIZE,
    COL_PULL_TIMEOUT_MS,
    COL_QUEUE_ID,
    COL_SOURCE_CLUSTER,
    COL_SOURCE_NAMESRV,
    COL_START_OFFSET,
    COL_TAG_FILTER,
    COL_TOPIC,
    RANGES_ARROW_SCHEMA,
    RAW_ARROW_SCHEMA,
)
from connectors.replication import source_offsets
from connectors.replication.link_stop import is_stopped, raised_to_floor, read_stop, stop_path
from connectors.replication.placement_planner import RangesPlacementPlanner, placement_columns
from connectors.replication.planning import (
    QueueRange,
    QueueRangeGroup,
    admit,
    group_ranges,
    plan_ranges,
    skip_delivered,
)
from connectors.replication.pulling import PullSettings, pull_range, pull_range_raw
from connectors.replication.reader_options import SourceOptions
from connectors.replication.reader_state import DriverState
from connectors.replication.run_ahead import RunAhead
from connectors.replication.source_behind import behind_warning
from connectors.replication.source_maxes import SourceMaxRecorder

if TYPE_CHECKING:
    from connectors.replication.tables import LinkTables

# connectors.replication.tables (deltalake) and .arrow_rows (pyarrow.compute) are imported where used:
# Spark launches a fresh Python worker for most reader calls (the source runner, the read-planning worker,
# each task's worker), every launch imports this module, and those two are a measurable part of each launch
# (python -X importtime; benchmarks/MEASUREMENTS.md) for one driver call and one row format.

log = logging.getLogger(__name__)

MISSING_TOPIC_WARN_INTERVAL_S = 60.0
"""An explicitly named source topic that does not exist is warned about at most this often."""


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader; see the module docstring for options and for what runs where.

    Contract kept with Spark: ``latestOffset(start, limit)`` never returns less than ``start`` for any
    queue and never more than ``limit`` rows in total; with Trigger.AvailableNow it never passes the
    offsets recorded by ``prepareForTriggerAvailableNow`` and eventually returns ``start`` unchanged.
    ``read`` is stateless; partitions are ``QueueRange`` (plain data).
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = SourceOptions.from_options(options)
        o = self.options
        self.settings = PullSettings(namesrv=o.namesrv, group=o.group, cluster=o.cluster, tags=o.tag_filter,
                                     pull_batch_size=o.pull_batch_size, fail_on_data_loss=o.fail_on_data_loss,
                                     pull_timeout_ms=o.pull_timeout_ms, row_format=o.row_format,
                                     credentials=o.credentials, tls=o.tls, link=o.link or "", config_path=o.config,
                                     retry=OutagePolicy(o.retry_timeout_ms, o.retry_backoff_ms,
                                                        o.retry_backoff_max_ms))
        self._state = DriverState(placer=RangesPlacementPlanner.from_options(
            options, create_topics_like_source=o.create_topics_like_source))

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "settings": self.settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.options = state["options"]
        self.settings = state["settings"]
        self._state = DriverState()

    # -- driver helpers ------------------------------------------------------------------------

    @property
    def _admin(self) -> Admin:
        if self._state.admin is None:
            self._state.admin = Admin(self.options.namesrv, credentials=self.options.credentials, tls=self.options.tls)
        return self._state.admin

    @property
    def outage(self) -> SourceOutage:
        """The driver's retries of admin calls while the source is unavailable (``SourceOutage.call``)."""
        if self._state.outage is None:
            o = self.options
            self._state.outage = SourceOutage(
                link=o.link or o.group, cluster=o.cluster, namesrv=o.namesrv, policy=self.settings.retry,
                cluster_has_brokers=lambda: bool(self._admin.cluster_info().broker_addr_table), clock=self._state.clock)
        return self._state.outage

    def _reserved_names(self) -> list[str]:
        info = self.outage.call(self._admin.cluster_info, "listing the brokers")
        return [*info.cluster_addr_table, *info.broker_addr_table]

    def discover_queues(self) -> list[MessageQueue]:
        """Readable queues of the selected topics, now (driver). A topic without a route is skipped; an
        explicitly named one is also reported (``_warn_missing``), since it is probably a typo. Admin
        calls ride out a source outage (``outage``). Across a WAN each admin call is a round trip of every
        trigger, so the topic list and the cluster's names are asked together, and every topic's route at
        once (``source_offsets.parallel``), not one after the other."""
        selection = self.options.selection
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rocketmq-reserved-names") as pool:
            # both are needed whenever the topics are not listed by name (``ReadSelection.select``)
            reserved = pool.submit(self._reserved_names) if not selection.topics else None
            topics = selection.select(lambda: self.outage.call(self._admin.topic_list, "listing the topics"),
                                      reserved.result if reserved is not None else self._reserved_names)
        queues: list[MessageQueue] = []
        explicit = selection.explicit_topics()
        for topic in sorted(explicit.difference(topics)):  # a link's explicit topic absent from the list
            self._warn_missing(topic)

        def route(topic: str) -> TopicRouteData | None:
            try:
                return self.outage.call(functools.partial(self._admin.topic_route, topic),
                                        f"looking up the route of topic {topic}")
            except TopicNotExistError:
                return None

        for topic, found in zip(topics, source_offsets.parallel(route, topics), strict=True):
            if found is None:
                if topic in explicit:
                    self._warn_missing(topic)
                else:
                    log.info("source topic %s has no route on %s (yet); skipped", topic, self.options.namesrv)
                continue
            self._state.missing_warned.pop(topic, None)
            queues.extend(subscribe_queues(topic, found))
        return queues

    def _warn_missing(self, topic: str) -> None:
        """WARNING for an explicitly named source topic the cluster does not have: at the first trigger
        that misses it, then at most once per ``MISSING_TOPIC_WARN_INTERVAL_S`` while it stays missing."""
        now = self._state.clock.monotonic()
        last = self._state.missing_warned.get(topic)
        if last is not None and now - last < MISSING_TOPIC_WARN_INTERVAL_S:
            return
        self._state.missing_warned[topic] = now
        o = self.options
        log.warning("link %s: source topic %r does not exist on cluster %s (namesrv %s), or no broker holding it "
                    "is up; nothing is read from it until it has a route (check the spelling in the link's "
                    "topics)", o.link or o.group, topic, o.cluster, o.namesrv)

    def min_offsets(self, queues: Sequence[MessageQueue]) -> dict[MessageQueue, int]:
        """Each queue's min offset now (driver; ``source_offsets.min_offsets``)."""
        return source_offsets.min_offsets(self._admin, self.outage, queues)

    def max_offsets(self, queues: Sequence[MessageQueue]) -> dict[MessageQueue, int]:
        """Each queue's max offset now (driver): one request per topic and broker group
        (``source_offsets.max_offsets``)."""
        return source_offsets.max_offsets(self._admin, self.outage, queues)

    def resolve(self, spec: OffsetSpec, queues: Sequence[MessageQueue]) -> dict[MessageQueue, int]:
        """The offsets ``spec`` names for ``queues`` (driver): each queue's min / max offset, the first
        offset stored at or after a timestamp, or the given per-queue offsets (a queue they do not
        name: its min offset; queues they name that are not in ``queues`` are kept)."""
        if spec.kind == "earliest":
            return self.min_offsets(queues)
        if spec.kind == "latest":
            return self.max_offsets(queues)
        if spec.kind == "timestamp":
            ts = spec.timestamp_ms
            assert ts is not None
            return source_offsets.per_queue(self.outage, lambda mq: self._admin.search_offset(mq, ts), queues,
                                            f"offset at {ts} ms")
        assert spec.offsets is not None
        given = spec.offsets.queues
        return {**given, **self.min_offsets([q for q in queues if q not in given])}

    # -- Spark API (driver) --------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """Offsets of a new checkpoint: the link's Delta resume point if it has one (queues not in the
        table start at earliest: at-least-once), else ``startingOffsets``.

        Decided once per reader: Spark asks twice for a new query's first batch (when it plans the batch's
        end, ``MicroBatchExecution.constructNextBatch``, and when it runs the batch from its start,
        ``runBatch``; Spark 4.x, both on the source runner's one reader). A second decision would log it
        twice and, with ``latest`` or a timestamp, could start the batch past the offsets its end was planned
        from (messages produced in between never read), so later calls return the first answer."""
        driver_logging()
        if self._state.initial is None:
            self._state.initial = self._decide_initial_offset()
        return self._state.initial

    def _link_tables(self) -> LinkTables | None:
        """The link's Delta tables (``deltaLocation`` + ``link``), or None without them."""
        o = self.options
        if o.delta_location is None or not o.link:
            return None
        from connectors.replication.tables import LinkTables  # start-up cost: see the imports

        return LinkTables(Path(o.delta_location) / o.link, source_cluster=o.cluster)

    def _decide_initial_offset(self) -> dict[str, Any]:
        queues = self.discover_queues()
        o = self.options
        tables = self._link_tables()
        if tables is not None:
            resume = tables.latest_offsets()
            if resume:
                missing = [q for q in queues if q not in resume]
                offsets = {**self.min_offsets(missing), **resume}
                log.info("resuming %d queue(s) from the Delta offsets table of link %s (%d new queue(s) "
                         "from earliest)", len(resume), o.link, len(missing))
                return SourceOffset.of(offsets).to_dict()
        spec = OffsetSpec.parse(o.starting_offsets)
        log.info("link %s: no checkpoint and no Delta resume point; starting %d queue(s) at startingOffsets "
                 "%s", o.link or o.group, len(queues), spec)
        return SourceOffset.of(self.resolve(spec, queues)).to_dict()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_messages_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_messages_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        """Record every selected queue's max offset now; later batches never read past them."""
        driver_logging()
        queues = self.discover_queues()
        self._state.available_now_target = SourceOffset.of(self.max_offsets(queues))
        log.info("Trigger.AvailableNow: reading up to the max offsets of %d queue(s)", len(queues))

    def _link_location(self) -> Path | None:
        o = self.options
        return None if o.delta_location is None or not o.link else Path(o.delta_location) / o.link

    def _stopped(self, location: Path | None) -> bool:
        """The link was stopped by a disaster-recovery operation (``link_stop``): plan nothing (said once per
        stop). When a stop is lifted, the link's Delta resume point then becomes the floor of the next batches
        (``link_stop``): read at every lift, as each releaser may have committed past the previous one."""
        if location is None or not is_stopped(location):
            if self._state.stopped:
                self._state.stopped = False
                if (tables := self._link_tables()) is not None:
                    self._state.floor = tables.latest_offsets()
                    log.info("link %s: the stop is lifted; resuming from its Delta resume point where that is "
                             "ahead (%d queue(s))", self.options.link, len(self._state.floor))
            return False
        if not self._state.stopped:
            self._state.stopped = True
            try:
                stop = read_stop(location)
            except TableError as exc:
                stop = None
                log.warning("link %s: %s", self.options.link, exc)
            log.warning("link %s is stopped by a disaster-recovery operation (%s; %s): nothing is replicated until "
                        "the marker is removed", self.options.link, stop.reason if stop else "reason unknown",
                        stop_path(location))
        return True

    def _record_source(self, location: Path | None, bounds: Mapping[MessageQueue, tuple[int, int]]) -> None:
        if location is None:
            return
        if self._state.source_maxes is None:
            self._state.source_maxes = SourceMaxRecorder(location, self.options.cluster, self._state.clock)
        self._state.source_maxes.observe(bounds)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """Driver, each trigger (not for a batch replayed from the offset log after a restart): the end of the
        next batch from ``start`` (raised to the floor of a lifted stop). Asks the source for every queue's min
        and max offsets (one request per broker group) of the queues found while the previous batch ran
        (``_queue_bounds``), records A's max offsets for the DR audit, admits at most
        ``limit`` messages across queues (``admit``: fair, rotating) and returns ``start`` unchanged while the
        link's stop marker is set. May block on the source; must not touch the target."""
        driver_logging()
        location = self._link_location()
        if self._stopped(location):
            return start
        begin = raised_to_floor(SourceOffset.from_dict(start).queues, self._state.floor)
        queues, bounds = self._queue_bounds()
        target = self._state.available_now_target
        new = [q for q in queues if q not in begin]
        self._record_source(location, bounds)  # at most one small write, only when a max offset changed
        first = {q: bounds[q][0] for q in new}
        maxes = {q: bounds[q][1] for q in queues}
        for short in self._state.behind.check(self._state.clock.monotonic(), begin, maxes):
            log.warning("%s", behind_warning(self.options.link or self.options.group, self.options.cluster, short,
                                             self._state.behind.grace_s, self.options.config))
        self._state.latest = SourceOffset.of({**begin, **maxes})
        if target is not None:
            maxes = {q: min(m, target.queues[q]) for q, m in maxes.items()}
        reading = {**begin, **first}
        backlog = {q: max(0, maxes[q] - reading[q]) for q in queues}
        if isinstance(limit, ReadMaxRows):
            admission = admit(backlog, limit.max_rows, self.options.min_messages_per_queue or
                              self.options.pull_batch_size, self._state.rotation_after)
            self._state.rotation_after = admission.next_after
            take = admission.take
        elif isinstance(limit, ReadMinRows) and sum(backlog.values()) < limit.min_rows and target is None:
            take = {}
        else:
            if not isinstance(limit, ReadAllAvailable | ReadMinRows):
                log.warning("read limit %r is not supported by the rocketmq source; reading all available",
                            limit)
            take = {q: n for q, n in backlog.items() if n > 0}
        end = dict(begin)
        for q, n in take.items():
            end[q] = reading[q] + n  # a new queue joins the offset only once it has rows to read
        return SourceOffset.of(end).to_dict()

    def _queue_bounds(self) -> tuple[list[MessageQueue], dict[MessageQueue, tuple[int, int]]]:
        """The queues to plan (``discover_queues``, as found ahead of this trigger when it could be: ``run_ahead``)
        and their (min, max) offsets now (one request per topic and broker group). A queue list found ahead that
        the offsets request fails on (a topic deleted since) is found again now, once."""
        if self._state.discovery is None:
            self._state.discovery = RunAhead(self.discover_queues, "rocketmq-discovery-ahead")
        ahead = self._state.discovery.take()
        found = None
        if ahead is not None:
            try:
                found = self._bounds_of(ahead)
            except RocketMQError as exc:
                log.debug("offsets of the queues found ahead failed (%s); finding the queues again", exc)
        if found is None:
            found = self._bounds_of(self.discover_queues())
        self._state.discovery.start()  # the next trigger's queues, found while this batch runs
        return found

    def _bounds_of(self, queues: list[MessageQueue]) -> tuple[list[MessageQueue], dict[MessageQueue, tuple[int, int]]]:
        target = self._state.available_now_target
        if target is not None:
            queues = [q for q in queues if q in target.queues]
        return queues, source_offsets.queue_offsets(self._admin, self.outage, queues)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """Driver, after ``latestOffset``: the source's newest offsets for the query's progress (its lag),
        from what ``latestOffset`` just saw; no round trip."""
        if not self.options.report_latest_offset or self._state.latest is None:
            return None
        return self._state.latest.to_dict()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """Driver, once per batch (a new one, or the offset log's last batch replayed on a restart): the
        batch's queue ranges grouped into Spark partitions. The first batch of a resumed query drops what the
        link's Delta tables say was delivered; target queues are placed (and the placement made durable)
        here, before any task runs, so every attempt of a task writes to the same target queue."""
        ranges = plan_ranges(SourceOffset.from_dict(start), SourceOffset.from_dict(end), self.options.min_partitions)
        if self._state.floor:  # after a lifted stop: nothing below the link's resume point then (``link_stop``)
            ranges, _ = skip_delivered(ranges, self._state.floor)
        if not self._state.planned:
            self._state.planned = True
            if self._state.initial is None:  # resumed from the checkpoint: this batch may be a replay
                ranges = self._skip_replayed(ranges)
        if self._state.placer is not None:  # decided and durable before any task runs
            ranges = self._state.placer.place(ranges)
        return group_ranges(ranges, self.options.max_partitions)

    def _skip_replayed(self, ranges: list[QueueRange]) -> list[QueueRange]:
        """The first batch of a query resumed from its checkpoint, without what the link's Delta offsets table
        says was delivered. A job stopped after the sink committed a batch to Delta but before Spark wrote the
        batch's commit to its checkpoint re-runs that batch on its next start (same offsets); its messages are
        on the target already and are not sent again. Anything the table does not cover is sent as planned
        (at-least-once is kept: its batch rows only advance after the target acknowledged; the resume points
        of ``jobs.reset_offsets`` do not count: the checkpoint wins over them)."""
        o = self.options
        tables = self._link_tables()
        if tables is None or not ranges:
            return ranges
        kept, removed = skip_delivered(ranges, tables.delivered_offsets())
        if removed:
            log.info("link %s: the first batch after the restart re-runs one the sink had committed to Delta; "
                     "%d message offset(s) of it were delivered then and are not sent again", o.link, removed)
        return kept

    def commit(self, end: dict[str, Any]) -> None:
        """Spark processed everything below ``end``: mirror it as the consumer group's offsets on the
        source (UPDATE_CONSUMER_OFFSET) so mqadmin-style tools show progress and lag. Advisory only:
        the checkpoint and the Delta offsets table are what the query resumes from, so an error here
        is logged, not raised, and the updates run on a background thread (Spark counts the time of
        ``commit`` in every batch's commitOffsets; the round trips to the source would add ~50-100 ms).
        Ends given while an update runs are coalesced: only the newest is mirrored next. Spark calls
        this lazily (when planning the next batch), so the group trails the query by one batch and the
        last batch of an AvailableNow run is not mirrored."""
        driver_logging()
        if not self.options.commit_offsets_to_source:
            return
        offsets = SourceOffset.from_dict(end).queues
        state = self._state
        with state.lock:
            queued = state.pending_commit is not None
            state.pending_commit = offsets
            if state.commit_thread is None:
                state.commit_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rocketmq-offset-mirror")
        if not queued:
            state.commit_thread.submit(self._mirror_pending_commit)

    def _mirror_pending_commit(self) -> None:
        """The background half of ``commit``: the newest end offsets, the queues whose offset changed."""
        state = self._state
        with state.lock:
            offsets, state.pending_commit = state.pending_commit, None
        if not offsets:
            return
        changed = [(q, n) for q, n in offsets.items() if state.committed.get(q) != n]
        if not changed:
            return
        if state.committer is None:
            state.committer = PullConsumer(self.options.namesrv, self.options.group, heartbeat_interval=None,
                                           credentials=self.options.credentials, tls=self.options.tls)
        committer = state.committer

        def update(item: tuple[MessageQueue, int]) -> tuple[MessageQueue, int, RocketMQError | None]:
            queue, offset = item
            try:
                committer.update_consumer_offset(queue, offset)
            except RocketMQError as exc:
                return queue, offset, exc
            return queue, offset, None

        failed = 0
        for queue, offset, error in source_offsets.parallel(update, changed):
            if error is None:
                state.committed[queue] = offset
            else:
                failed += 1
                log.warning("could not commit offset %d of %s for group %s: %s", offset, queue_key(queue),
                            self.options.group, error)
        log.debug("committed %d queue offset(s) for group %s (%d failed)", len(changed) - failed,
                  self.options.group, failed)

    def stop(self) -> None:
        """Driver, when the query stops (cleanly or failing): the last mirrored source offsets go out, then
        the driver-side clients close. Executors keep nothing of this object."""
        if self._state.discovery is not None:
            self._state.discovery.cancel()
        if self._state.commit_thread is not None:
            self._state.commit_thread.shutdown(wait=True)  # the last mirrored offsets go out first
            self._state.commit_thread = None
        if self._state.placer is not None:
            self._state.placer.close()
        for client in (self._state.admin, self._state.committer):
            if client is not None:
                client.close()
        self._state.admin = self._state.committer = None

    # -- Spark API (executors) -----------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch] | Iterator[tuple[Any, ...]]:
        """Executor: pull the partition's range and yield one Arrow record batch per pull (default), or
        one tuple per message with ``rowFormat=tuples`` (slower: see docs/benchmarks.md)."""
        freeze_worker_heap()
        driver_logging()  # executor tasks log like the job (console line, log file), not via lastResort
        if isinstance(partition, QueueRangeGroup):
            if self.settings.row_format == "ranges":
                return self._read_ranges(partition.ranges)
            return itertools.chain.from_iterable(self._read_range(r) for r in partition.ranges)
        if not isinstance(partition, QueueRange):
            raise TypeError(f"not a partition of this reader: {partition!r}")
        return self._read_range(partition)

    def _read_range(self, partition: QueueRange) -> Iterator[pa.RecordBatch] | Iterator[tuple[Any, ...]]:
        if self.settings.row_format == "tuples":
            return self._read_tuples(partition)
        if self.settings.row_format == "raw":
            return self._read_raw(partition)
        if self.settings.row_format == "ranges":
            return self._read_ranges([partition])
        from connectors.replication.arrow_rows import messages_to_arrow  # start-up cost: see the imports

        return (messages_to_arrow(messages, partition.broker_name, self.settings.cluster)
                for messages in pull_range(self.settings, partition))

    def _read_raw(self, partition: QueueRange) -> Iterator[pa.RecordBatch]:
        topic = pa.array([partition.topic], pa.string())
        broker = pa.array([partition.broker_name], pa.string())
        queue_id = pa.array([partition.queue_id], pa.int32())
        cluster = pa.array([self.settings.cluster], pa.string())
        for raw in pull_range_raw(self.settings, partition):
            yield pa.RecordBatch.from_arrays(
                [topic, broker, queue_id, pa.array([raw.first_offset], pa.int64()),
                 pa.array([raw.last_offset], pa.int64()), pa.array([raw.count], pa.int32()),
                 pa.array([raw.records], pa.binary()), cluster], schema=RAW_ARROW_SCHEMA)

    def _read_ranges(self, ranges: Sequence[QueueRange]) -> Iterator[pa.RecordBatch]:
        """One row per range, pulled by the sink (``rowFormat=ranges``); nothing is read here."""
        s = self.settings
        n = len(ranges)
        yield pa.RecordBatch.from_pydict({
            COL_TOPIC: [r.topic for r in ranges], COL_BROKER: [r.broker_name for r in ranges],
            COL_QUEUE_ID: [r.queue_id for r in ranges], COL_START_OFFSET: [r.start for r in ranges],
            COL_END_OFFSET: [r.end for r in ranges], COL_FROM_EARLIEST: [r.from_earliest for r in ranges],
            COL_SOURCE_CLUSTER: [s.cluster] * n, COL_SOURCE_NAMESRV: [s.namesrv] * n,
            COL_CONSUMER_GROUP: [s.group] * n, COL_TAG_FILTER: [s.tags] * n,
            COL_PULL_BATCH_SIZE: [s.pull_batch_size] * n, COL_PULL_TIMEOUT_MS: [s.pull_timeout_ms] * n,
            COL_FAIL_ON_DATA_LOSS: [s.fail_on_data_loss] * n, COL_CONFIG_PATH: [s.config_path] * n,
            **placement_columns(ranges),
        }, schema=RANGES_ARROW_SCHEMA)

    def _read_tuples(self, partition: QueueRange) -> Iterator[tuple[Any, ...]]:
        cluster = self.settings.cluster
        for messages in pull_range(self.settings, partition):
            for m in messages:
                props = m.properties
                yield (m.topic, partition.broker_name, m.queue_id, m.queue_offset, m.msg_id, m.offset_msg_id,
                       m.body, props.get("TAGS"), props.get("KEYS"), dict(props), m.flag,
                       datetime.fromtimestamp(m.born_timestamp / 1000, UTC),
                       datetime.fromtimestamp(m.store_timestamp / 1000, UTC), m.born_host, m.reconsume_times,
                       cluster)
