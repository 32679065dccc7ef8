"""The ``rocketmq`` data source's row schemas (``connectors.core.rows``): the schema Spark is told is derived from
each row format's Arrow schema, so the rows built as Arrow batches and the declared schema cannot drift apart.
Pinned here against the Spark DDL the source declared before (behaviour unchanged)."""

from __future__ import annotations

import pytest
from pyspark.sql.pandas.types import from_arrow_schema

from connectors.core.rows import (
    ARROW_SCHEMA,
    RANGES_ARROW_SCHEMA,
    RAW_ARROW_SCHEMA,
    arrow_schema,
    spark_schema,
)
from connectors.replication.data_source import RocketMQDataSource

DECLARED_BEFORE = {
    "arrow": "topic string, brokerName string, queueId int, queueOffset bigint, msgId string, offsetMsgId string, "
             "body binary, tags string, keys string, properties map<string,string>, flag int, bornTimestamp "
             "timestamp, storeTimestamp timestamp, bornHost string, reconsumeTimes int, sourceCluster string",
    "raw": "topic string, brokerName string, queueId int, firstOffset bigint, lastOffset bigint, messageCount int, "
           "records binary, sourceCluster string",
    "ranges": "topic string, brokerName string, queueId int, startOffset bigint, endOffset bigint, fromEarliest "
              "boolean, sourceCluster string, sourceNamesrv string, consumerGroup string, tagFilter string, "
              "pullBatchSize int, pullTimeoutMs int, failOnDataLoss boolean, configPath string, targetTopic string, "
              "targetBroker string, targetQueueId int",
}
"""The DDL strings (``long`` spelled ``bigint``, as Spark prints it) that stood beside the Arrow schemas."""


def ddl(row_format: str) -> str:
    return ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in spark_schema(row_format).fields)


@pytest.mark.parametrize("row_format", ["arrow", "raw", "ranges"])
def test_the_spark_schema_is_the_arrow_schemas_and_what_was_declared_before(row_format: str) -> None:
    assert ddl(row_format) == DECLARED_BEFORE[row_format]
    assert spark_schema(row_format) == from_arrow_schema(arrow_schema(row_format))
    assert [f.name for f in spark_schema(row_format).fields] == arrow_schema(row_format).names
    assert all(f.nullable for f in spark_schema(row_format).fields)


def test_row_format_values_pick_their_schema_and_anything_else_the_per_message_one() -> None:
    assert arrow_schema(" RAW ") is RAW_ARROW_SCHEMA
    assert arrow_schema("ranges") is RANGES_ARROW_SCHEMA
    assert arrow_schema("tuples") is ARROW_SCHEMA and arrow_schema("") is ARROW_SCHEMA
    assert RocketMQDataSource({"rowFormat": "ranges"}).schema() == spark_schema("ranges")
    assert RocketMQDataSource({}).schema() == spark_schema("arrow")
