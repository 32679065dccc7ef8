"""The ``rocketmq_checkpoint`` Spark data source: a thin reader / writer pair around ``GroupOffsetPoller``
(source snapshot) and ``CheckpointCommitter`` (translate, commit on the target, record).

Registered by ``jobs/checkpoint.py`` and tests; ``spark.readStream.format("rocketmq_checkpoint")`` reads one
snapshot per trigger, ``writeStream.format("rocketmq_checkpoint")`` applies it. Options of both: ``config``
(the replicator YAML), ``link`` (its name), ``deltaLocation`` (optional absolute override of the link's
``delta_location``: Spark's Python workers do not run in the job's directory); the writer also needs
``checkpointLocation`` (its query id keys the idempotent Delta commit).

What runs where: the reader is a ``SimpleDataSourceStreamReader``: ``read`` runs on the driver, takes one
snapshot and returns its rows with the next tick as the end offset (the offset is only a tick counter: a
snapshot is whole, there is nothing to resume from; ``readBetweenOffsets``, Spark's replay after a failure,
takes a fresh snapshot, which is as good). The writer's ``write`` runs on executors and only hands the rows
back; ``commit`` runs on the driver and does the work, so every target request and Delta commit is made
once per batch, by one process.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamWriter,
    SimpleDataSourceStreamReader,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from broker_store.clock import SYSTEM_CLOCK, ThreadClock, wall_ms
from broker_store.protocol.errors import RocketMQError
from connectors.checkpoint.committer import CheckpointCommitter
from connectors.checkpoint.link_state import LinkProgressReader
from connectors.checkpoint.snapshot import (
    SNAPSHOT_SCHEMA_DDL,
    Condition,
    ConditionKind,
    GroupOffsetPoller,
    GroupOffsetSnapshot,
    snapshot_from_rows,
    snapshot_rows,
)
from connectors.checkpoint.tables import CheckpointTables
from connectors.core.delta import shared_table_set
from connectors.core.driver_log import driver_logging
from connectors.core.errors import ReplicatorConfigError, ReplicatorError
from connectors.core.executor import executor_admin, executor_producer
from connectors.core.link_options import LinkOptions
from connectors.core.spark_checkpoint import checkpoint_dir, query_id_from_checkpoint
from connectors.core.topic_mapping import TopicMapper
from connectors.replication.tables import LinkTables

log = logging.getLogger(__name__)

DATA_SOURCE_NAME = "rocketmq_checkpoint"
SEND_TIMEOUT_MS = 3000


class CheckpointDataSource(DataSource):
    """``format("rocketmq_checkpoint")``. Pickled to Spark's Python workers; holds only the options."""

    @classmethod
    def name(cls) -> str:
        return DATA_SOURCE_NAME

    def schema(self) -> str:
        return SNAPSHOT_SCHEMA_DDL

    def simpleStreamReader(self, schema: StructType) -> SimpleDataSourceStreamReader:
        return CheckpointStreamReader(self.options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return CheckpointStreamWriter(self.options)


class CheckpointStreamReader(SimpleDataSourceStreamReader):
    """One snapshot of the link's source groups per trigger (driver). Offsets: ``{"tick": n}``."""

    clock: ThreadClock = SYSTEM_CLOCK
    """Stamps the snapshots (a test sets its own on the instance)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self._raw = dict(options)
        self._poller: GroupOffsetPoller | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"_raw": self._raw, "_poller": None}  # the poller's client stays in its process

    def _snapshot_rows(self) -> list[tuple[str, str, str, str, int, int, int, str]]:
        driver_logging()
        if self._poller is None:
            o = LinkOptions.from_options(self._raw)
            source = o.config.cluster(o.link.source)
            admin = executor_admin(";".join(source.namesrv), source.credentials(), source.tls)
            try:
                reserved = [source.name, *admin.cluster_info().broker_addr_table]
            except RocketMQError as exc:  # reported with this trigger's snapshot; retried next trigger
                down = Condition(ConditionKind.SOURCE_UNREACHABLE, source.name, f"cannot list brokers: {exc}")
                return list(snapshot_rows(GroupOffsetSnapshot(wall_ms(self.clock), (), (down,))))
            self._poller = GroupOffsetPoller(admin, source.name, TopicMapper(o.link.topics, reserved_names=reserved),
                                             o.link.checkpoints.groups, interval=o.link.checkpoints.interval,
                                             clock=self.clock)
        return list(snapshot_rows(self._poller.next_item()))

    def initialOffset(self) -> dict[str, Any]:
        """Driver, once, when the query starts without a Spark checkpoint: tick 0."""
        return {"tick": 0}

    def read(self, start: dict[str, Any]) -> tuple[Iterator[tuple[Any, ...]], dict[str, Any]]:
        """Driver, each trigger (a simple reader runs on the driver): one snapshot of the selected groups'
        committed offsets on the source (the poller waits out its interval); the next tick as the offset."""
        return iter(self._snapshot_rows()), {"tick": int(start.get("tick", 0)) + 1}

    def readBetweenOffsets(self, start: dict[str, Any], end: dict[str, Any]) -> Iterator[tuple[Any, ...]]:
        """Driver, on recovery of a batch planned but not committed before a restart: a fresh snapshot (group
        offsets are live state; a newer one translates at least as far), committed once per batch id."""
        return iter(self._snapshot_rows())

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to acknowledge on the source: a snapshot only reads."""


@dataclass(frozen=True)
class SnapshotRows(WriterCommitMessage):
    """A write task's rows, handed to the driver's ``commit``."""

    rows: tuple[tuple[Any, ...], ...]


_committers_lock = threading.Lock()
_committers: dict[tuple[str, str, str], CheckpointCommitter] = {}


class CheckpointStreamWriter(DataSourceStreamWriter):
    """Applies each batch's snapshot on the driver (``commit``); see the module docstring."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self._raw = dict(options)
        LinkOptions.from_options(options)  # a bad config fails the query at start

    def write(self, iterator: Iterator[Any]) -> SnapshotRows:
        """Executor: pass the rows on."""
        return SnapshotRows(tuple(tuple(row) for row in iterator))

    def _committer(self, o: LinkOptions) -> tuple[CheckpointCommitter, CheckpointTables]:
        key = (o.tables_location, o.link.name, o.link.target)
        target = o.config.cluster(o.link.target)
        namesrv = ";".join(target.namesrv)
        link_tables = shared_table_set((o.tables_location, o.link.source), LinkTables,
                                       lambda: LinkTables(o.tables_location, source_cluster=o.link.source))
        tables = shared_table_set((o.tables_location,), CheckpointTables,
                                  lambda: CheckpointTables(o.tables_location, history=o.link.history))
        with _committers_lock:
            committer = _committers.get(key)
            if committer is None:
                credentials = target.credentials()
                producer = (executor_producer(namesrv, f"PID_RMQ_SYS_CHECKPOINT_{o.link.name}",
                                              send_timeout_ms=SEND_TIMEOUT_MS, auto_create_topic=False,
                                              credentials=credentials, tls=target.tls)
                            if o.link.checkpoints.produce_topic else None)
                committer = _committers[key] = CheckpointCommitter(
                    link=o.link.name, source_cluster=o.link.source, target_cluster=o.link.target,
                    target_admin=executor_admin(namesrv, credentials, target.tls), target_producer=producer,
                    progress=LinkProgressReader(link_tables).read,
                    max_runs_per_queue=o.link.checkpoints.max_runs_per_queue)
        return committer, tables

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver: translate, commit on the target, record (``CheckpointCommitter``)."""
        driver_logging()
        o = LinkOptions.from_options(self._raw)
        if any(not isinstance(m, SnapshotRows) for m in messages):
            raise ReplicatorError(f"link {o.link.name} checkpoint {batchId}: a write task returned no rows")
        if not o.checkpoint_location:
            raise ReplicatorConfigError("the checkpoint writer needs option 'checkpointLocation'",
                                        field="checkpointLocation")
        rows = [r for m in messages if isinstance(m, SnapshotRows) for r in m.rows]
        committer, tables = self._committer(o)
        report = committer.apply(snapshot_from_rows(rows))
        query_id = query_id_from_checkpoint(checkpoint_dir(o.checkpoint_location) or Path(o.checkpoint_location))
        tables.commit_checkpoint(query_id, batchId, report.rows)
        level, text = report.log_line()  # a problem is a WARNING when it starts, not every trigger
        log.log(level, "link %s checkpoint %d: %s", o.link.name, batchId, text)
        if log.isEnabledFor(logging.DEBUG) and report.problems():
            log.debug("link %s checkpoint %d problems: %s", o.link.name, batchId, "; ".join(report.problems()))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver: nothing was applied (``commit`` does all the work)."""
