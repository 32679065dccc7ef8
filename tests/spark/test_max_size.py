"""Every message the source accepted can be replicated: bodies at the default max_message_size (4 MiB and
4 MiB - 64) between two identically configured clusters arrive byte-exact, and nothing is dismissed.
The unit counterpart (how the sink splits batches) is tests/unit/test_connectors_sink_sizes.py."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from broker_store.client import new_message
from connectors.replication.tables import FAILURES, LinkTables
from tests.spark.conftest import SRC_MAX_MESSAGE_SIZE, Cluster, _start_cluster
from tests.spark.helpers import run_link, unique

pytestmark = pytest.mark.integration

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A target configured like the session's source cluster (max_message_size 4 MiB, the default)."""
    cluster = _start_cluster("twin", tmp_path_factory.mktemp("twin"), SRC_MAX_MESSAGE_SIZE)
    try:
        yield cluster
    finally:
        cluster.producer.close()
        cluster.admin.close()
        cluster.processes.stop()


@pytest.mark.parametrize("row_format", ["ranges", "arrow"])
def test_max_size_bodies_replicate_byte_exact(spark: SparkSession, clusters: tuple[Cluster, Cluster], twin: Cluster,
                                              tmp_path: Path, row_format: str) -> None:
    src, _ = clusters
    assert SRC_MAX_MESSAGE_SIZE == 4 * MIB
    topic = unique("MaxSize")
    src.create_topic(topic, 1)
    twin.create_topic(topic, 1)
    mq = src.queues(topic)[0]
    bodies = [b"small-before", os.urandom(4 * MIB), os.urandom(4 * MIB - 64), b"small-after"]
    for i, body in enumerate(bodies):  # one by one: the source checks each body alone
        src.producer.send(new_message(topic, body, keys=f"k{i}", properties={"n": str(i)}), mq)
    link = f"maxsize-{row_format}"
    query = run_link(spark, source_namesrv=src.namesrv, source_cluster="src", target_namesrv=twin.namesrv,
                     target_cluster="twin", topics=topic, work=tmp_path, link=link,
                     reader={"rowFormat": row_format}, timeout=180)
    assert query.exception() is None
    target = twin.read_all(topic)
    received = [m for messages in target.values() for m in messages]
    assert [m.body for m in received] == bodies
    assert [m.properties.get("n") for m in received] == ["0", "1", "2", "3"]
    tables = LinkTables(tmp_path / "delta" / link, source_cluster="src")
    assert tables.read(FAILURES).num_rows == 0
    assert tables.totals()["messages"] == 4 and tables.totals()["failed"] == 0
