"""Row schemas and column names of the ``rocketmq`` data source: what a reader hands Spark and a writer
takes from it.

Shared by the replication reader (``connectors.replication.reader`` / ``arrow_rows``), which builds these
rows on executors, and its writer (``connectors.replication.writer``), which reads them back; any Spark
query may write rows with the per-message columns. Four row formats (``ROW_FORMATS``), chosen with the
reader's ``rowFormat`` option:

* ``arrow`` / ``tuples``: one row per message, ``ARROW_SCHEMA`` (handed to Spark as Arrow batches or
  as tuples)
* ``raw``: one row per pull, the stored records undecoded, ``RAW_ARROW_SCHEMA``
* ``ranges``: one row per planned queue range and no message data, ``RANGES_ARROW_SCHEMA``

Each format's Arrow schema is the one owner of its columns and types: the schema Spark is told
(``spark_schema``) is derived from it (``pyspark.sql.pandas.types.from_arrow_schema``), never written again.
"""

from __future__ import annotations

from typing import Literal, get_args

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

COL_TOPIC = "topic"
COL_BROKER = "brokerName"
COL_QUEUE_ID = "queueId"
COL_QUEUE_OFFSET = "queueOffset"
COL_MSG_ID = "msgId"
COL_OFFSET_MSG_ID = "offsetMsgId"
COL_BODY = "body"
COL_TAGS = "tags"
COL_KEYS = "keys"
COL_PROPERTIES = "properties"
COL_FLAG = "flag"
COL_BORN_TS = "bornTimestamp"
COL_STORE_TS = "storeTimestamp"
COL_BORN_HOST = "bornHost"
COL_RECONSUME = "reconsumeTimes"
COL_SOURCE_CLUSTER = "sourceCluster"
COL_TARGET_TOPIC = "targetTopic"
"""Optional column the sink honours: the target topic of each row."""

ARROW_SCHEMA = pa.schema([
    (COL_TOPIC, pa.string()), (COL_BROKER, pa.string()), (COL_QUEUE_ID, pa.int32()),
    (COL_QUEUE_OFFSET, pa.int64()), (COL_MSG_ID, pa.string()), (COL_OFFSET_MSG_ID, pa.string()),
    (COL_BODY, pa.binary()), (COL_TAGS, pa.string()), (COL_KEYS, pa.string()),
    (COL_PROPERTIES, pa.map_(pa.string(), pa.string())), (COL_FLAG, pa.int32()),
    (COL_BORN_TS, pa.timestamp("us", tz="UTC")), (COL_STORE_TS, pa.timestamp("us", tz="UTC")),
    (COL_BORN_HOST, pa.string()), (COL_RECONSUME, pa.int32()), (COL_SOURCE_CLUSTER, pa.string()),
])
"""Row schema of ``rowFormat=arrow`` / ``tuples``: one row per message. Timestamps are Spark ``timestamp``
(UTC instants, exact: RocketMQ's ms * 1000 us); ``msgId`` is the client id (UNIQ_KEY, Java's
``MessageClientExt.getMsgId``) or, without one, the offset id; ``offsetMsgId`` is always the store host +
commit-log offset id; ``flag`` is the user flag; ``properties`` holds every property exactly as stored (user
and system, TAGS/KEYS/UNIQ_KEY included)."""

COL_FIRST_OFFSET = "firstOffset"
COL_LAST_OFFSET = "lastOffset"
COL_MESSAGE_COUNT = "messageCount"
COL_RECORDS = "records"

RAW_ARROW_SCHEMA = pa.schema([
    (COL_TOPIC, pa.string()), (COL_BROKER, pa.string()), (COL_QUEUE_ID, pa.int32()),
    (COL_FIRST_OFFSET, pa.int64()), (COL_LAST_OFFSET, pa.int64()), (COL_MESSAGE_COUNT, pa.int32()),
    (COL_RECORDS, pa.binary()), (COL_SOURCE_CLUSTER, pa.string()),
])
"""Row schema of ``rowFormat=raw``: one row per pull, the stored records undecoded (V1 layout, back to
back, as the broker returned them, trimmed to the partition's range and tag-filtered): queue offsets
``firstOffset..lastOffset`` (``messageCount`` records; gaps only where a tag filter dropped records).
Meant for ``writeStream.format("rocketmq")``, which decodes the records itself; used by the replicate
job because it skips two conversions per message (see benchmarks/replicator.py)."""

COL_START_OFFSET = "startOffset"
COL_END_OFFSET = "endOffset"
COL_FROM_EARLIEST = "fromEarliest"
COL_SOURCE_NAMESRV = "sourceNamesrv"
COL_CONSUMER_GROUP = "consumerGroup"
COL_TAG_FILTER = "tagFilter"
COL_PULL_BATCH_SIZE = "pullBatchSize"
COL_PULL_TIMEOUT_MS = "pullTimeoutMs"
COL_FAIL_ON_DATA_LOSS = "failOnDataLoss"
COL_CONFIG_PATH = "configPath"
"""The link's replicator.yaml (null without one): the data-loss error names it in its reset command."""
COL_TARGET_BROKER = "targetBroker"
COL_TARGET_QUEUE_ID = "targetQueueId"
"""With ``targetTopic``: the target queue the driver placed the range's source queue on
(``connectors.replication.placement_planner``); null when it did not, and the sink places it."""

RANGES_ARROW_SCHEMA = pa.schema([
    (COL_TOPIC, pa.string()), (COL_BROKER, pa.string()), (COL_QUEUE_ID, pa.int32()),
    (COL_START_OFFSET, pa.int64()), (COL_END_OFFSET, pa.int64()), (COL_FROM_EARLIEST, pa.bool_()),
    (COL_SOURCE_CLUSTER, pa.string()), (COL_SOURCE_NAMESRV, pa.string()), (COL_CONSUMER_GROUP, pa.string()),
    (COL_TAG_FILTER, pa.string()), (COL_PULL_BATCH_SIZE, pa.int32()), (COL_PULL_TIMEOUT_MS, pa.int32()),
    (COL_FAIL_ON_DATA_LOSS, pa.bool_()), (COL_CONFIG_PATH, pa.string()), (COL_TARGET_TOPIC, pa.string()),
    (COL_TARGET_BROKER, pa.string()), (COL_TARGET_QUEUE_ID, pa.int32()),
])
"""Row schema of ``rowFormat=ranges``: one row per planned queue range ``[startOffset, endOffset)`` and no
message data, with what pulling it takes (name servers, group, tag filter, pull size and timeout,
failOnDataLoss, the config file a data-loss error names; ``fromEarliest`` as in ``QueueRange``) and the
target queue when the driver placed it (``COL_TARGET_BROKER``). For ``writeStream.format("rocketmq")``,
which pulls each range itself and sends as it pulls, so the messages never pass through Spark: the
replicate job's format (see ``connectors.replication.reader``)."""

RowFormat = Literal["arrow", "tuples", "raw", "ranges"]
"""The reader's ``rowFormat`` values (see the module docstring)."""
ROW_FORMATS: tuple[str, ...] = get_args(RowFormat)

REQUIRED_COLUMNS = (COL_TOPIC, COL_BROKER, COL_QUEUE_ID, COL_QUEUE_OFFSET, COL_BODY)
"""Columns the sink cannot work without; ``properties`` (or at least tags/keys) should be there too."""
RAW_REQUIRED_COLUMNS = (COL_TOPIC, COL_BROKER, COL_QUEUE_ID, COL_RECORDS)
"""The same for the source's ``rowFormat=raw`` rows (records decoded by the sink)."""
RANGES_REQUIRED_COLUMNS = (COL_TOPIC, COL_BROKER, COL_QUEUE_ID, COL_START_OFFSET, COL_END_OFFSET, COL_FROM_EARLIEST,
                           COL_SOURCE_CLUSTER, COL_SOURCE_NAMESRV, COL_CONSUMER_GROUP, COL_TAG_FILTER,
                           COL_PULL_BATCH_SIZE, COL_PULL_TIMEOUT_MS, COL_FAIL_ON_DATA_LOSS)
"""The same for the source's ``rowFormat=ranges`` rows (every column: the sink pulls the ranges itself)."""


def arrow_schema(row_format: str) -> pa.Schema:
    """The Arrow schema of a ``rowFormat`` value (anything else: the per-message schema)."""
    return {"raw": RAW_ARROW_SCHEMA, "ranges": RANGES_ARROW_SCHEMA}.get(row_format.strip().lower(), ARROW_SCHEMA)


def spark_schema(row_format: str) -> StructType:
    """The schema a ``rowFormat`` value's rows have in Spark: its Arrow schema's, converted by PySpark's own
    Arrow-to-Spark type mapping (string, int, bigint, binary, boolean, map<string,string>, timestamp)."""
    schema: StructType = from_arrow_schema(arrow_schema(row_format))
    return schema
