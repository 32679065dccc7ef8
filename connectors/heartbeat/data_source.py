"""The ``rmq_heartbeat`` Spark data source of the heartbeat connector: a stream reader and a stream writer.

Registered by ``jobs/heartbeat.py`` (``spark.dataSource.register(HeartbeatDataSource)``) and by tests;
``spark.readStream.format("rmq_heartbeat")`` emits the heartbeat rows (``connectors.heartbeat.reader``),
``writeStream.format("rmq_heartbeat")`` produces them on the sources (``connectors.heartbeat.writer``).
Both take the options of ``connectors.heartbeat.options``.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, SimpleDataSourceStreamReader
from pyspark.sql.types import StructType

from connectors.heartbeat.reader import HEARTBEAT_SCHEMA_DDL, HeartbeatStreamReader
from connectors.heartbeat.writer import HeartbeatStreamWriter

DATA_SOURCE_NAME = "rmq_heartbeat"


class HeartbeatDataSource(DataSource):
    """``format("rmq_heartbeat")``. Instances are pickled to Spark's Python workers; they hold only the options."""

    @classmethod
    def name(cls) -> str:
        return DATA_SOURCE_NAME

    def schema(self) -> str:
        return HEARTBEAT_SCHEMA_DDL

    def simpleStreamReader(self, schema: StructType) -> SimpleDataSourceStreamReader:
        return HeartbeatStreamReader(self.options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return HeartbeatStreamWriter(self.options, schema)
