"""The ``rocketmq`` Spark data source of the replication connector: a stream reader and a stream writer.

Registered by ``jobs/replicate.py`` (``spark.dataSource.register(RocketMQDataSource)``) and by tests;
``spark.readStream.format("rocketmq")`` reads (``connectors.replication.reader``),
``writeStream.format("rocketmq")`` writes (``connectors.replication.writer``).
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, DataSourceStreamWriter
from pyspark.sql.types import StructType

from connectors.core.rows import schema_ddl
from connectors.replication.reader import RocketMQStreamReader
from connectors.replication.writer import RocketMQStreamWriter

DATA_SOURCE_NAME = "rocketmq"


class RocketMQDataSource(DataSource):
    """``format("rocketmq")``: stream reader and stream writer of the replication connector.

    Instances are pickled to Spark's Python workers; they hold only the options.
    """

    @classmethod
    def name(cls) -> str:
        return DATA_SOURCE_NAME

    def schema(self) -> str:
        fmt = next((str(v) for k, v in self.options.items() if str(k).lower() == "rowformat"), "")
        return schema_ddl(fmt)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RocketMQStreamReader(self.options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return RocketMQStreamWriter(self.options, schema)
