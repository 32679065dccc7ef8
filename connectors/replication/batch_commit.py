"""The replication writer's driver side after a batch ran: its commit, as steps (``writer.RocketMQStreamWriter.commit``
calls ``commit_batch``), and its abort (``abort_batch``). Runs on the driver only, once per batch, so it imports
the Delta tables, the checkpoint reader and the group mirror at the top; it shares nothing with the executor's
task modules but their report (``records.ReplicationCommitMessage``). The writer imports this module only when
it commits or aborts, keeping write planning light (see ``writer``).

``commit_batch`` runs, in this order (the order is the contract; see "At-least-once" in ``writer``):

1. the failure policy (``failure_policy``): a failed batch raises ``BatchFailedError`` before anything is
   recorded, so Spark does not commit it and a restart re-runs it;
2. the batch's metrics from the tasks' reports (``batch_metrics``);
3. the batch's end offsets from Spark's offset log, cross-checked against the rows (``end_offsets``);
4. with ``deltaLocation``: the queue placements the tasks decided (``record_placements``, before the offsets:
   a decision outlives the batch that used it), then ``LinkTables.commit_batch`` (offsets, offset map,
   failures, metrics; idempotent per query id and batch id);
5. the source group's mirror gets the end offsets (``source_mirror``, in the background, after the Delta
   commit);
6. logging: one WARNING per target topic of dismissed failures (``warn_dismissed``), one INFO line for the
   batch (``log_batch``).

An aborted batch records nothing, but what its tasks had sent is on the target: ``record_aborted`` keeps that
count per link for the job's summary (``aborted_on_target``), so a job stopped right after a batch reached the
target does not report "0 messages".
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from pyspark.sql.datasource import WriterCommitMessage

from broker_store.client import MessageQueue
from broker_store.clock import SYSTEM_CLOCK, ThreadClock, wall_ms
from connectors.core.delta import shared_table_set
from connectors.core.errors import ReplicatorError
from connectors.core.group_positions import group_floors
from connectors.core.job_stop import abort_level
from connectors.core.offsets import queue_key
from connectors.core.spark_checkpoint import checkpoint_dir, query_id_from_checkpoint, read_offset_log
from connectors.replication.failure_policy import PolicyDecision, apply_failure_policy, load_failure_hook
from connectors.replication.group_mirror import EXIT_FLUSH_TIMEOUT_S, SourceGroupMirror, source_group_mirror
from connectors.replication.placement_planner import log_decision
from connectors.replication.placement_table import EXECUTOR, PlacementTable
from connectors.replication.queue_placement import Placement
from connectors.replication.records import (
    BatchMetrics,
    FailedMessage,
    LatencySummary,
    ReplicationCommitMessage,
    summarise_latencies,
)
from connectors.replication.tables import FAILURES, LinkTables
from connectors.replication.writer_options import SinkOptions

log = logging.getLogger(__name__)


def commit_batch(o: SinkOptions, messages: Sequence[WriterCommitMessage | None], batch_id: int,
                 clock: ThreadClock = SYSTEM_CLOCK) -> None:
    """The driver commit of batch ``batch_id`` (the steps of the module docstring). Raises when a task
    returned no commit message, when the failure policy fails the batch and when rows lie past the batch's
    end offsets; the batch is then not committed."""
    if any(not isinstance(m, ReplicationCommitMessage) for m in messages):
        raise ReplicatorError(f"link {o.label} batch {batch_id}: a write task returned no commit message")
    results = [m for m in messages if isinstance(m, ReplicationCommitMessage)]
    failures = [f for m in results for f in m.failures]
    decision = _failure_decision(o, batch_id, failures)
    metrics = batch_metrics(results, len(failures), wall_ms(clock))
    batch_end, advanced = end_offsets(o, batch_id, results)
    committed = _commit_tables(o, batch_id, results, advanced, decision, metrics, clock)
    mirror = source_mirror(o)
    if mirror is not None:  # after the Delta offsets commit; in the background (no latency per batch)
        mirror.offer(batch_end)
    if failures:
        warn_dismissed(o, batch_id, failures, committed)
    log_batch(o, batch_id, results, metrics, len(advanced), committed)


def abort_batch(o: SinkOptions, messages: Sequence[WriterCommitMessage | None], batch_id: int) -> None:
    """The driver's abort of batch ``batch_id``: a write task failed, or the job's stop cancelled the batch (then
    INFO, not WARNING: ``connectors.core.job_stop.abort_level``). Messages already sent stay on the target (they
    are re-sent when the batch re-runs: at-least-once); nothing is recorded for this batch. The offsets of the
    batches committed before it go out to the source group now."""
    sent = sum(m.delivered for m in messages if isinstance(m, ReplicationCommitMessage))
    if sent and o.link:
        record_aborted(o.link, sent)
    mirror = source_mirror(o)
    if mirror is not None:
        mirror.flush(EXIT_FLUSH_TIMEOUT_S)
    log.log(abort_level(), "link %s batch %d aborted; %d message(s) already on the target will be sent again "
            "when the batch re-runs", o.label, batch_id, sent)


def _failure_decision(o: SinkOptions, batch_id: int, failures: Sequence[FailedMessage]) -> PolicyDecision:
    """The failure policy's decision on the batch's failed messages; raises when it fails the batch."""
    hook = load_failure_hook(o.failure_hook) if (failures and o.failure_hook) else None
    decision = apply_failure_policy(o.failure_policy, failures, hook)
    if decision.batch_failed:
        log.error("link %s batch %d: failure policy %s failed the batch (%d failed message(s)); not "
                  "committing", o.label, batch_id, o.failure_policy.value, len(failures))
    decision.raise_if_failed(link=o.label, batch_id=batch_id)
    return decision


def batch_metrics(results: Sequence[ReplicationCommitMessage], failed: int, now: int) -> BatchMetrics:
    """The batch's metrics row from the tasks' reports at ``now`` (epoch ms): totals, the latency percentiles
    of the pooled samples with the exact maximum, the oldest record's age and the wall time since the first
    task started."""
    summary = summarise_latencies([s for m in results for s in m.latency_samples_ms])
    maxima = [m.latency.max_ms for m in results if m.latency.max_ms is not None]
    if maxima:
        summary = LatencySummary(summary.p50_ms, summary.p99_ms, max(maxima))
    oldest = [m.oldest_store_ms for m in results if m.oldest_store_ms is not None]
    return BatchMetrics(
        messages=sum(m.delivered for m in results), bytes=sum(m.bytes for m in results),
        skipped_loop=sum(m.skipped_loop for m in results), failed=failed, latency=summary,
        duplicates_avoided=sum(m.duplicates_avoided for m in results),
        record_age_ms=now - min(oldest) if oldest else None,
        wall_time_ms=now - min((m.started_ms for m in results), default=now))


def end_offsets(o: SinkOptions, batch_id: int, messages: Sequence[ReplicationCommitMessage]
                ) -> tuple[dict[MessageQueue, int], dict[MessageQueue, int]]:
    """(every queue's end offset of the batch, the queues whose end changed since the previous batch)."""
    row_next: dict[MessageQueue, int] = {}
    for m in messages:
        for q, n in m.source_next.items():
            row_next[q] = max(n, row_next.get(q, 0))
    checkpoint = o.checkpoint_location
    end = read_offset_log(checkpoint, batch_id) if checkpoint else None
    if end is None:
        log.warning("link %s batch %d: no rocketmq offset in the checkpoint's offset log; recording "
                    "offsets only for queues with rows", o.label, batch_id)
        return row_next, row_next
    behind = {queue_key(q): (n, end.get(q)) for q, n in row_next.items()
              if end.get(q) is not None and n > (end.get(q) or 0)}
    if behind:
        raise ReplicatorError(f"link {o.label} batch {batch_id}: rows past the batch's end offset "
                              f"(queue: (row next, log end)) {behind}")
    previous = read_offset_log(checkpoint, batch_id - 1) if checkpoint else None
    return dict(end.queues), {q: n for q, n in end.queues.items() if previous is None or previous.get(q) != n}


def _commit_tables(o: SinkOptions, batch_id: int, results: Sequence[ReplicationCommitMessage],
                   advanced: dict[MessageQueue, int], decision: PolicyDecision, metrics: BatchMetrics,
                   clock: ThreadClock) -> str:
    """Placements, then the batch's rows of the link's Delta tables (``advanced``: the queues whose end offset
    moved); returns what was done, for the log."""
    if not (o.delta_location and o.link and o.checkpoint_location):
        return "no Delta tables (deltaLocation not set)"
    tables = link_tables(str(Path(o.delta_location) / o.link), o, clock)
    query_id = query_id_from_checkpoint(checkpoint_dir(o.checkpoint_location) or Path(o.checkpoint_location))
    commit_started = clock.monotonic()
    record_placements(o, results, clock)  # before the offsets: a decision outlives the batch that used it
    result = tables.commit_batch(query_id, batch_id, advanced, [mp for m in results for mp in m.offset_map],
                                 decision.recorded(), metrics)
    return ("already committed (replayed batch)" if result.duplicate else
            f"committed to Delta in {(clock.monotonic() - commit_started) * 1000:.0f} ms")


def link_tables(location: str, o: SinkOptions, clock: ThreadClock = SYSTEM_CLOCK) -> LinkTables:
    """The driver process's ``LinkTables`` of a link, kept across batches (``shared_table_set``), with the
    link's retention and maintenance running after its commits. The offset map's retention asks the
    checkpoint connector's table for the groups' positions (``connectors.core.group_positions``), so it never
    removes a run a checkpointed group's translation needs."""

    def floors() -> Mapping[MessageQueue, int] | None:
        return group_floors(location, wall_ms(clock), enabled=o.checkpoints_enabled)

    return shared_table_set((location, o.source_cluster or ""), LinkTables,
                            lambda: LinkTables(location, source_cluster=o.source_cluster or "", history=o.history,
                                               map_floors=floors, clock=clock))


def record_placements(o: SinkOptions, results: Sequence[ReplicationCommitMessage],
                      clock: ThreadClock = SYSTEM_CLOCK) -> None:
    """Record the queue placements the tasks decided (the first per source queue and target topic; the
    table's first row stands if an earlier one exists) and log each once."""
    decided: dict[tuple[MessageQueue, str], Placement] = {}
    for m in results:
        for p in m.placements:
            decided.setdefault((p.source, p.target_topic), p)
    if not decided or not (o.delta_location and o.link):
        return
    table = shared_table_set((str(Path(o.delta_location) / o.link), o.source_cluster or ""), PlacementTable,
                             lambda: PlacementTable(Path(o.delta_location or "") / (o.link or ""),
                                                    source_cluster=o.source_cluster or "", clock=clock))
    known = {(p.source, p.target_topic) for p in table.load()}
    new = [p for key, p in decided.items() if key not in known]
    table.record(new, EXECUTOR)
    for p in new:
        log_decision(o.label, p.describe(), "executors")


def source_mirror(o: SinkOptions) -> SourceGroupMirror | None:
    """The background mirror of the link's source group (None when the link mirrors no group)."""
    group = o.mirrored_group
    if group is None or o.source_namesrv is None:
        return None
    return source_group_mirror(o.source_namesrv, group, o.source_credentials, label=o.label, tls=o.source_tls)


_aborted_lock = threading.Lock()
_aborted_on_target: dict[str, int] = {}
"""link -> messages on the target from this driver process's aborted batches (never committed)."""


def record_aborted(link: str, sent: int) -> None:
    """Count ``sent`` messages an aborted batch of ``link`` left on the target (driver; ``writer.abort``)."""
    with _aborted_lock:
        _aborted_on_target[link] = _aborted_on_target.get(link, 0) + sent


def aborted_on_target(link: str) -> int:
    """Messages this driver process's aborted batches of ``link`` left on the target (sent again on resume)."""
    with _aborted_lock:
        return _aborted_on_target.get(link, 0)


def warn_dismissed(o: SinkOptions, batch_id: int, failures: Sequence[FailedMessage], committed: str) -> None:
    """One WARNING per target topic for the batch's dismissed failures: where they are and how to
    replay them (an operator must not have to find the failures table by themselves)."""
    by_topic: dict[tuple[str, str], list[FailedMessage]] = {}
    for f in failures:
        by_topic.setdefault((f.topic, f.target_topic), []).append(f)
    recorded = bool(o.delta_location and o.link and o.checkpoint_location)
    where = (f"recorded in the failures table {Path(o.delta_location or '') / (o.link or '') / FAILURES}"
             if recorded else f"NOT recorded ({committed})")
    replay = (f"replay them with `python -m jobs.replay_failures --config {o.config_path or '<replicator.yaml>'} "
              f"--link {o.link}`" if recorded else "they cannot be replayed")
    for (topic, target), dismissed in by_topic.items():
        sample = ", ".join(f"{f.broker_name}/{f.queue_id}@{f.queue_offset}" for f in dismissed[:5])
        log.warning("link %s batch %d: %d message(s) of topic %s (%s%s) dismissed after failing to reach %s "
                    "on %s (first error: %s); %s; %s", o.label, batch_id, len(dismissed), topic, sample,
                    ", ..." if len(dismissed) > 5 else "", target, o.target_cluster, dismissed[0].error, where,
                    replay)


def log_batch(o: SinkOptions, batch_id: int, results: Sequence[ReplicationCommitMessage], metrics: BatchMetrics,
              advanced: int, committed: str) -> None:
    """The batch's INFO line: what was delivered, skipped, already on the target and dismissed, how many queue
    offsets advanced, the latencies, the slowest task, the outage retries, what the recovery check read, and what
    the Delta commit did."""
    summary = metrics.latency
    checked = ""
    read = sum(m.tail_read for m in results)
    if read or metrics.duplicates_avoided:
        checked = (f" (recovery check: {read} target message(s) read, {sum(m.foreign_in_tail for m in results)} of "
                   f"them foreign, left alone)")
    log.info("link %s batch %d: %d delivered, %d bytes, %d skipped (loop), %d duplicate(s) avoided%s, "
             "%d failed (dismissed), "
             "%d queue offset(s) advanced, latency p50/p99/max %s/%s/%s ms, slowest task %d ms, %d retries "
             "while the target was unavailable, %d while the source was; %s", o.label, batch_id, metrics.messages,
             metrics.bytes, metrics.skipped_loop, metrics.duplicates_avoided, checked, metrics.failed, advanced,
             summary.p50_ms, summary.p99_ms,
             summary.max_ms, max((m.finished_ms - m.started_ms for m in results), default=0),
             sum(m.target_unavailable_retries for m in results),
             sum(m.source_unavailable_retries for m in results), committed)
