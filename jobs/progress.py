"""The replicate job's progress lines: one per micro-batch, counting source offsets, not Spark rows.

The job's source hands Spark one row per queue *range* (``rowFormat=ranges``), so Spark's own
``numInputRows`` says "4 rows" for a batch of 40,000 messages. What a batch read is the distance its
source offsets moved, which the query progress carries as the source's start and end offset documents
(``connectors.core.offsets.SourceOffset``); ``batch_messages`` sums that. The line says "source offsets
+N", not "N messages": the distance includes a lost range that ``fail_on_data_loss: false`` skipped, and
a queue the batch read for the first time is not in it (its start point, earliest or a reset point, is not
in the progress). What reached the target is the sink's own line (``link L batch N: X delivered ...``,
from its driver commit). Used by ``jobs/replicate.py`` on the driver.

The progress event itself holds three offset documents with one entry per queue (start, end, latest: ~60 KB
a batch at 512 queues), so it is summarised, never printed at INFO: the line names how many queues moved
of how many and the backlog left (latest - end); the whole JSON goes to the log at DEBUG only. Spark's own
copy of it in spark.log is off (``conf/log4j2.properties``, logger ``ProgressReporter``).
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

from connectors.core.errors import OffsetFormatError
from connectors.core.offsets import SourceOffset

log = logging.getLogger("jobs.progress")


_NO_OFFSET = ("None", "null")
"""How the progress spells a missing offset (pyspark turns the JVM's null into ``str(None)``)."""


class BatchMessages(NamedTuple):
    """Messages a batch read, from its source offsets."""

    messages: int
    """Sum over the queues present before and after the batch of (end - start)."""
    new_queues: int
    """Queues the batch read for the first time, from their start point (not counted above)."""
    moved_queues: int = 0
    """Queues whose offset moved (counted in ``messages``)."""
    queues: int = 0
    """Queues in the end offsets."""
    backlog: int | None = None
    """Sum over the end's queues of (latest - end): what the source held past the batch when it was planned;
    None without the latest offsets (``reportLatestOffset`` off)."""


def _offsets(document: str | None) -> dict[Any, int] | None:
    if not document or document in _NO_OFFSET:
        return None
    return dict(SourceOffset.from_json(document).queues)


def batch_messages(start_json: str | None, end_json: str | None,
                   latest_json: str | None = None) -> BatchMessages | None:
    """What a batch read, from the source's start and end offset documents (JSON strings as the query
    progress has them; ``start_json`` None for the first batch: everything is new) and, when given, the
    latest offsets the source reported. None when the end document is missing or not a ``SourceOffset``
    (another source)."""
    try:
        end = _offsets(end_json)
        if end is None:
            return None
        start = _offsets(start_json) or {}
        latest = _offsets(latest_json)
    except (OffsetFormatError, ValueError):
        return None
    steps = [offset - start[q] for q, offset in end.items() if q in start]
    backlog = None if latest is None else sum(max(0, latest.get(q, n) - n) for q, n in end.items())
    return BatchMessages(sum(max(0, n) for n in steps), sum(1 for q in end if q not in start),
                         sum(1 for n in steps if n > 0), len(end), backlog)


def describe_progress(p: Any) -> str:
    """One line for a ``StreamingQueryProgress``: how far the source offsets moved, rate, backlog, the batch's time
    and its parts. A replication query (its source offsets are ``SourceOffset``s) is named ``link <name>`` as the
    sink's line names it; another query (heartbeat, checkpoint, config sync) ``query <name>``."""
    source = p.sources[0] if p.sources else None
    counted = None
    if source is not None:
        counted = batch_messages(source.startOffset, source.endOffset, getattr(source, "latestOffset", None))
    durations = dict(p.durationMs)
    total_ms = durations.get("triggerExecution", 0)
    if counted is None:
        what = f"{p.numInputRows} rows"
    else:
        what = f"source offsets +{counted.messages} on {counted.moved_queues} of {counted.queues} queue(s)"
        if counted.new_queues:
            what += f" (+ {counted.new_queues} queue(s) read for the first time from their start point, not counted)"
        if total_ms:
            what += f", {counted.messages * 1000 / total_ms:.0f}/s"
        if counted.backlog is not None:
            what += f", backlog {counted.backlog}"
    parts = ", ".join(f"{k} {v}" for k, v in sorted(durations.items()) if k != "triggerExecution" and v)
    kind = "query" if counted is None else "link"
    return f"{kind} {p.name} batch {p.batchId}: {what} in {total_ms} ms ({parts})"


def make_progress_listener() -> Any:
    """A StreamingQueryListener that logs one line per batch (and query start / end; the progress JSON at DEBUG).
    A query's failure is reported by the job's main loop (one line), so termination with an error is logged
    here only at DEBUG."""
    from pyspark.sql.streaming.listener import StreamingQueryListener

    class ProgressLogger(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:  # Spark's API
            log.info("query %s started (id %s, run %s)", event.name, event.id, event.runId)

        def onQueryProgress(self, event: Any) -> None:
            log.info("%s", describe_progress(event.progress))
            if log.isEnabledFor(logging.DEBUG):  # the JSON is ~60 KB a batch at 512 queues
                log.debug("query progress: %s", event.progress.json)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            if event.exception:
                log.debug("query %s terminated with an error: %s", event.id, event.exception)
            else:
                log.info("query %s terminated", event.id)

    return ProgressLogger()
