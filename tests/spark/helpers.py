"""Shared helpers of the Spark end-to-end tests: producing test traffic and running one link."""

from __future__ import annotations

import random
import time
import uuid
from pathlib import Path
from typing import NotRequired, TypedDict

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from broker_store.client import MessageQueue, Producer, SendResult, new_message
from connectors.core.config import load_replicator_config
from jobs.replicate import start_link


class LinkArgs(TypedDict):
    """The keyword arguments of ``run_link`` that name the link's two ends, its topics and where it keeps state
    (a test that runs one link several times keeps them in one of these)."""

    source_namesrv: str
    source_cluster: str
    target_namesrv: str
    target_cluster: str
    topics: str
    work: Path
    link: str
    reader: NotRequired[dict[str, str]]


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def produce_random(producer: Producer, topic: str, queues: list[MessageQueue], count: int, *,
                   seed: int = 7, max_body: int = 2048, batch: int = 32) -> list[SendResult]:
    """``count`` messages with random binary bodies, tags, keys and user properties, spread over
    ``queues`` in batches (so every queue gets consecutive runs)."""
    rng = random.Random(seed)
    results = []
    sent = 0
    while sent < count:
        n = min(batch, count - sent)
        mq = rng.choice(queues)
        msgs = []
        for _ in range(n):
            body = rng.randbytes(rng.randint(1, max_body))
            props = {f"p{j}": f"v{rng.randint(0, 10**6)}" for j in range(rng.randint(0, 4))}
            msgs.append(new_message(topic, body, tags=rng.choice(["TagA", "TagB", "TagC", None]),
                                    keys=[f"k{rng.randint(0, 9999)}", f"o{sent}"], properties=props))
        results.append(producer.send_batch(msgs, mq))
        sent += n
    return results


def run_link(spark: SparkSession, *, source_namesrv: str, source_cluster: str, target_namesrv: str, target_cluster: str,
             topics: str, work: Path, link: str, reader: dict[str, str] | None = None,
             writer: dict[str, str] | None = None, available_now: bool = True, wait: bool = True,
             timeout: int = 120, processing_time: str | None = None) -> StreamingQuery:
    """Run src -> dst for ``topics`` as one streaming query; AvailableNow by default, else every
    ``processing_time`` (None: batches back to back). Returns the query."""
    read = (spark.readStream.format("rocketmq").option("namesrv", source_namesrv).option("topics", topics)
            .option("cluster", source_cluster).option("startingOffsets", "earliest").option("link", link)
            .option("deltaLocation", str(work / "delta")))
    for k, v in (reader or {}).items():
        read = read.option(k, v)
    write = (read.load().writeStream.format("rocketmq").option("namesrv", target_namesrv)
             .option("targetCluster", target_cluster).option("sourceCluster", source_cluster)
             .option("sourceNamesrv", source_namesrv).option("link", link)
             .option("deltaLocation", str(work / "delta")).option("retryBackoffMs", "50")
             .option("checkpointLocation", str(work / "checkpoints" / link)).queryName(link))
    for k, v in (writer or {}).items():
        write = write.option(k, v)
    if available_now:
        write = write.trigger(availableNow=True)
    elif processing_time is not None:
        write = write.trigger(processingTime=processing_time)
    query = write.start()
    if available_now and wait:
        query.awaitTermination(timeout)
    return query


def run_job_links(spark: SparkSession, config: Path, links: list[str], timeout: float = 240) -> None:
    """One available-now run of ``links`` of the replicator ``config`` as the job's own queries
    (``jobs.replicate.start_link``: the same source and sink options, checkpoint and Delta locations as
    ``spark-submit jobs/replicate.py --available-now``) on the test session, without a spark-submit start-up.
    For runs that only have to move data and leave a checkpoint; a run whose console a test reads, or whose
    driver it kills, stays a spark-submit job. Fails when a query fails or has not finished in ``timeout``."""
    loaded = load_replicator_config(config)
    queries = [start_link(spark, str(config), loaded, link, available_now=True) for link in links]
    try:
        deadline = time.monotonic() + timeout
        for link, query in zip(links, queries, strict=True):
            finished = query.awaitTermination(max(1.0, deadline - time.monotonic()))
            assert finished, f"link {link}: the available-now run did not finish in {timeout}s"
            assert query.exception() is None, f"link {link}: {query.exception()}"
    finally:
        for query in queries:
            query.stop()
