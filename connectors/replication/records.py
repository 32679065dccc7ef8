"""Immutable records the sink's executors hand to the driver, and the driver to the Delta tables.

Executors build ``FailedMessage`` and ``OffsetMapping`` while sending and put them in the commit
message of their partition (``ReplicationCommitMessage``; records are plain frozen dataclasses: picklable, no
handles). The one module both sides of the sink share: the executor's task modules (``partition_writer``,
``sending``) and the driver's commit (``batch_commit``) import each other's records from here, never each other; the
driver's commit applies the failure policy (``connectors.replication.failure_policy``) and writes everything with
``LinkTables.commit_batch`` together with one ``BatchMetrics``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from pyspark.sql.datasource import WriterCommitMessage

from broker_store.client import MessageQueue
from connectors.replication.queue_placement import Placement


class FailureOutcome(StrEnum):
    """What the failure policy decided for a failed message (stored in the failures table)."""

    DISMISSED = "DISMISSED"
    """Recorded in the failures table; the batch commits and the source offset moves past it."""
    FAILED_BATCH = "FAILED_BATCH"
    """The batch fails; offsets do not advance and Spark re-runs the batch after a restart."""


@dataclass(frozen=True)
class FailedMessage:
    """A source message that could not be written to the target after all retries: the whole message,
    so it can be replayed from the failures table alone."""

    topic: str
    """Source topic."""
    broker_name: str
    """Source broker group."""
    queue_id: int
    """Source queue id."""
    queue_offset: int
    """Offset of the message in its source queue."""
    msg_id: str
    """Source offset message id (store host + commit-log offset)."""
    target_topic: str
    """Target topic the mapping chose when the send failed."""
    body: bytes
    properties: Mapping[str, str]
    """Source properties as read (loop-guard chain not yet stamped); copied, never mutated."""
    error: str
    """Last send error, as text (exception class and message)."""
    attempts: int
    """Send attempts made (1 + retries)."""
    tags: str | None = None
    keys: str | None = None
    born_timestamp: int = 0
    """Producer's born time, ms since the epoch."""
    store_timestamp: int = 0
    """Source broker's store time, ms since the epoch."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "properties", dict(self.properties))

    @property
    def queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)


@dataclass(frozen=True)
class RecordedFailure:
    """A failed message with the policy applied to it: one row of the failures table."""

    message: FailedMessage
    policy: str
    """The link's ``failure_policy`` value (``dismiss`` / ``custom``)."""
    outcome: FailureOutcome


@dataclass(frozen=True)
class OffsetMapping:
    """Source queue offsets ``source_first..source_last`` landed at target ``target_first..target_last``.

    One row per run of messages from one source queue sent to one target queue with no source offset
    skipped in between: source offset ``source_first + i`` landed at ``target_first + i``, and ``messages``
    equals both spans. A message skipped (loop guard, tag filter) or failed ends a run. (Rows written before
    this rule may span skipped offsets with ``messages`` below the source span; offset translation treats
    those as inexact.)
    """

    source_topic: str
    source_broker: str
    source_queue_id: int
    source_first_offset: int
    source_last_offset: int
    target_topic: str
    target_broker: str
    target_queue_id: int
    target_first_offset: int
    target_last_offset: int
    messages: int
    """Messages delivered in this run (= target span)."""


class LatencySummary(NamedTuple):
    """Nearest-rank percentiles of a batch's replication latencies, ms; ``None`` for an empty batch."""

    p50_ms: int | None
    p99_ms: int | None
    max_ms: int | None


def summarise_latencies(samples_ms: Iterable[int]) -> LatencySummary:
    """p50 / p99 / max of per-message latencies (target store time - source born time)."""
    ordered = sorted(samples_ms)
    if not ordered:
        return LatencySummary(None, None, None)

    def rank(p: float) -> int:
        return ordered[max(0, math.ceil(p * len(ordered)) - 1)]

    return LatencySummary(rank(0.50), rank(0.99), ordered[-1])


@dataclass(frozen=True)
class BatchMetrics:
    """One micro-batch of a link, summed over its partitions: one row of the metrics table."""

    messages: int
    """Messages written to the target."""
    bytes: int
    """Body bytes written to the target."""
    skipped_loop: int = 0
    """Messages not written because the target was already in their loop-guard chain."""
    failed: int = 0
    """Messages that failed after retries (all of them are in the failures table)."""
    latency: LatencySummary = field(default_factory=lambda: LatencySummary(None, None, None))
    """Replication latency: target store time - source born time."""
    record_age_ms: int | None = None
    """Age of the oldest message of the batch at commit (commit time - its source store time)."""
    wall_time_ms: int = 0
    """Wall time of the batch, from planning to the driver's commit."""
    duplicates_avoided: int = 0
    """Messages not sent again because the target already held them (an earlier attempt stored them)."""


@dataclass(frozen=True)
class ReplicationCommitMessage(WriterCommitMessage):
    """What one write task reports to the driver's commit. Plain data; picklable."""

    delivered: int
    """Messages the target stored."""
    bytes: int
    """Body bytes the target stored."""
    skipped_loop: int
    """Messages not sent because the target cluster was already in their chain."""
    failures: tuple[FailedMessage, ...]
    """Messages still refused after retries (whole messages, source properties)."""
    offset_map: tuple[OffsetMapping, ...]
    """Source offset runs -> target offset runs, from the SendResults."""
    source_next: Mapping[MessageQueue, int]
    """max(queueOffset) + 1 per source queue seen by this task (cross-check of the end offsets)."""
    latency_samples_ms: tuple[int, ...]
    """Up to LATENCY_SAMPLES_PER_TASK samples of (ack time - source born time)."""
    latency: LatencySummary
    """Exact p50 / p99 / max over all of this task's messages."""
    oldest_store_ms: int | None
    started_ms: int
    finished_ms: int
    target_unavailable_retries: int = 0
    """Attempts this task repeated because the target was unavailable (logged by the driver commit)."""
    source_unavailable_retries: int = 0
    """Pulls this task repeated because the source was unavailable (``rowFormat=ranges``; logged likewise)."""
    placements: tuple[Placement, ...] = ()
    """Queue placements this task decided (``placement.QueuePlacement``); the driver commit records them."""
    duplicates_avoided: int = 0
    """Messages not sent because the target already held them (an earlier attempt stored them; ``resend_check``)."""
    foreign_in_tail: int = 0
    """Messages of other writers (no position of this link) in the target tails this task read, left alone."""
    tail_read: int = 0
    """Messages this task read from target tails before sends that may have repeated earlier ones."""
