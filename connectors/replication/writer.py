"""The replication writer: batch-sends the reader's rows to the target cluster, then commits the batch
to the link's Delta tables (``writeStream.format("rocketmq")``).

Created by ``connectors.replication.data_source.RocketMQDataSource.streamWriter``. Its moving parts are
modules of their own: options (``writer_options``), rows -> sends (``partition_writer``), batching and
retries (``sending``), target queue placement (``placement``), outage waits (``outage``), record
forwarding (``forwarding``), the loop guard, the failure policy and the link tables. What runs where:

* driver, at query start: ``RocketMQStreamWriter.__init__`` validates the options and the input
  schema and loads the failure hook once (a bad hook fails the query before any data moves).
* executors, one call per partition and batch: ``write(batches)`` places each message on a target queue,
  sends consecutive messages of one target queue as SEND_BATCH_MESSAGE (bounded count and encoded bytes), keeps
  at most ``maxInFlight`` sends outstanding, retries with exponential backoff, and returns a
  ``ReplicationCommitMessage`` (plain picklable data). It never raises for a message the target
  refuses: the message becomes a ``FailedMessage`` (the whole message) in the commit message.
  Input rows: the source's per-message rows (arrow / tuples, or any query's rows with those columns);
  ``rowFormat=raw`` rows (a pull's stored records, forwarded record by record by ``forwarding``
  without decoding them); or ``rowFormat=ranges`` rows, where the task pulls each queue range itself
  (concurrently, one pull in flight per range; the rows carry what pulling takes, ``sourceAccessKeyEnv``
  / ``sourceSecretKeyEnv`` sign the pulls) and sends as it pulls.

Target unavailable vs. message refused. The failure policy is about messages the target *refuses*
(too big, no permission, topic missing while the cluster is up): those get ``maxRetries`` and are then
recorded. A target that is *down* (connection refused / lost, timeouts, SYSTEM_BUSY,
SERVICE_NOT_AVAILABLE, SYSTEM_ERROR, flush timeouts, or name servers that are unreachable or list no
broker) refuses nothing: the task blocks and retries with doubling backoff capped at
``retryBackoffMaxMs`` for up to ``retryTimeoutMs`` (default 10 minutes), as Kafka Connect / MirrorMaker 2
sinks do. If the outage outlasts that budget the task raises ``TargetUnavailableError``: the batch is
not committed, nothing is recorded as failed, and a restart re-runs it (at-least-once).
* driver, once per batch: ``commit(messages, batchId)`` runs ``batch_commit.commit_batch``'s steps: it
  applies the failure policy (``failure_policy``); a failed batch raises ``BatchFailedError`` so Spark does
  not commit it (the query stops; a restart re-runs the batch: at-least-once). Otherwise it records the
  queue placements the tasks decided (``placement_table``), then writes the offsets, offset map, failures
  and metrics with ``LinkTables.commit_batch``, idempotent per (query id, batch id), then mirrors the
  source group.

At-least-once: a row reaches ``commit`` only after the target acknowledged it (SendResult: stored) or
it was recorded as failed; Spark advances the checkpoint's source offsets only after ``commit``
returned.

The source consumer group. After the Delta commit, ``commit`` hands the batch's end offsets (every
queue, from the offset log) to a background mirror (``connectors.replication.group_mirror``) that writes
them as the replicator's group on the source (``sourceGroup``, default ``CID_RMQ_SYS_REPLICATOR_<link>``),
so its lag is 0 once everything is replicated: after an AvailableNow run, when idle, after a stop. The
reader's own mirror in ``commit(end)`` trails by a batch (Spark calls it when planning the next one); a
query whose sink mirrors sets the reader's ``commitOffsetsToSource=false`` so the two never race.

End offsets of a batch. The Delta offsets table needs every source queue's *next* offset after the
batch, including queues whose rows were all filtered (tags) or skipped, which no row can carry. The
driver commit therefore reads the batch's end offset from Spark's own write-ahead offset log,
``<checkpointLocation>/offsets/<batchId>`` (written before the batch ran; its source line is the
reader's ``SourceOffset`` JSON), and records the queues whose offset changed since ``offsets/<batchId-1>``.
Rows carry a cross-check: each task reports max(queueOffset)+1 per source queue it saw
(``source_next``); an offset log entry below that is an inconsistency and fails the commit. When the
offset log cannot be read (a non-local checkpoint, or a source other than ``rocketmq``), the row-derived
offsets are used, so only queues with rows advance in the table (resuming from it re-reads the rest:
duplicates, never loss).

Options (case-insensitive; ``config`` + ``link`` fill every one from replicator.yaml, explicit options win):
the fields of ``writer_options.SinkOptions`` (the link's ``WriteSettings`` and the writer's own), listed with
their defaults in docs/configuration.md, "Spark options" (generated). Queue placement
(``preserveQueues``): ``rowFormat=ranges`` rows carry the target queue the driver decided
(``placement_planner``); for the other formats the task decides with the same rule and table and the commit
records it.

Property handling (``target_properties``): every user and system property is copied, except those a
broker or client generates for the cluster it is on, or that would make the target act on the message
again (``DROPPED_PROPERTIES``). UNIQ_KEY is kept, so the client msgId survives (a message without one
gets its source msgId as UNIQ_KEY, so re-sends of the same source message carry the same id), and
ROCKETMQ_REPLICATOR_SOURCE gets the source cluster appended (``loop_guard.stamp``). Body bytes and the
user flag are sent unchanged. Born timestamp and born host are the replicator's (the
target broker stamps them); the source values stay in the source and in the failures table.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from connectors.core.driver_log import driver_logging
from connectors.core.errors import ReplicatorConfigError
from connectors.core.rows import (
    COL_RECORDS,
    COL_START_OFFSET,
    RANGES_REQUIRED_COLUMNS,
    RAW_REQUIRED_COLUMNS,
    REQUIRED_COLUMNS,
)
from connectors.core.spark_checkpoint import batches_sent_before
from connectors.replication.failure_policy import load_failure_hook
from connectors.replication.writer_options import SinkOptions

# Driver code and executor code live apart: a task's is ``partition_writer.write_partition`` (with sending,
# placement, pulling, forwarding), the driver's after a batch is ``batch_commit`` (Delta tables, checkpoint, group
# mirror); they share only their records (``records``). This module imports neither side at its top because every
# process that runs any part of the sink unpickles this one class (pyspark's API): write planning, a fresh Python
# worker on the first batch's critical path, only builds and pickles it, and would otherwise import both sides
# (python -X importtime: about a third more than this module's own); the commit's worker needs no task module
# and a task no Delta table. Hence one import per side, where that side starts. The task daemon
# (connectors.replication.worker_daemon) imports the task modules before it forks. The layering test
# (tests/unit/test_connectors_layout.py) keeps the sides apart and this module's imports light.

log = logging.getLogger(__name__)


class RocketMQStreamWriter(DataSourceStreamArrowWriter):
    """Stream writer of ``format("rocketmq")``; see the module docstring for what runs where.

    Contract: ``write`` returns only after every row of its partition was either stored by the target
    or recorded as a ``FailedMessage`` (never dropped); ``commit`` raises when the failure policy fails
    the batch (the batch is then not committed and is re-run after a restart).
    """

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = SinkOptions.from_options(options)
        names = schema.fieldNames()
        required = (RANGES_REQUIRED_COLUMNS if COL_START_OFFSET in names
                    else RAW_REQUIRED_COLUMNS if COL_RECORDS in names else REQUIRED_COLUMNS)
        missing = [c for c in required if c not in names]
        if missing:
            raise ReplicatorConfigError(f"the rows lack column(s) {missing}; write the rocketmq source's rows "
                                        f"(columns {list(REQUIRED_COLUMNS)} at least, {list(RAW_REQUIRED_COLUMNS)} "
                                        f"with rowFormat=raw, or the {list(RANGES_REQUIRED_COLUMNS)} of "
                                        f"rowFormat=ranges)", field="schema")
        if self.options.failure_hook:
            load_failure_hook(self.options.failure_hook)  # fail the query now, not at the first failure
        tables = Path(self.options.delta_location) / self.options.link if (
            self.options.delta_location and self.options.link) else None
        self.sent_before = batches_sent_before(self.options.checkpoint_location,
                                               tables is not None and (tables / "current_offsets").exists())
        """Batch ids an earlier run of the query may have sent (Spark builds this writer when it plans each batch's
        write; ``batches_sent_before`` marks the batch as planned): their tasks check the target for copies first
        (``connectors.replication.resend_check``)."""

    # -- executors -------------------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """Executor: send this partition's rows; see ``partition_writer.write_partition``."""
        from connectors.replication.partition_writer import write_partition  # the task side: see the imports

        driver_logging()  # executor tasks log like the job (console line, log file), not via lastResort
        return write_partition(self.options, iterator, self.sent_before)

    # -- driver ----------------------------------------------------------------------------------

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver: failure policy, then the Delta tables (idempotent per query id and batch id); the steps are
        ``batch_commit.commit_batch``'s."""
        from connectors.replication import batch_commit  # the driver side: see the imports

        driver_logging()
        batch_commit.commit_batch(self.options, messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Driver: a write task failed, or the job's stop cancelled the batch; see ``batch_commit.abort_batch``.
        Messages already sent stay on the target; nothing is recorded for this batch."""
        from connectors.replication import batch_commit  # the driver side: see the imports

        driver_logging()
        batch_commit.abort_batch(self.options, messages, batchId)
