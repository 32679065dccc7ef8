"""The ``rocketmq`` Spark data source of the replication connector: a stream reader and a stream writer.

Registered by ``jobs/replicate.py`` (``spark.dataSource.register(RocketMQDataSource)``) and by tests;
``spark.readStream.format("rocketmq")`` reads (``connectors.replication.reader``),
``writeStream.format("rocketmq")`` writes (``connectors.replication.writer``).
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, DataSourceStreamWriter
from pyspark.sql.types import StructType

from connectors.core.rows import spark_schema

# The reader and writer modules are imported where used: Spark starts a Python process (or forks one from a
# fresh daemon) for each data source call of a query's first batch, and each unpickles this class. Data
# source creation needs neither module, the sink's processes no reader and the source's no writer, and each
# import is a measurable part of such a process's start (python -X importtime; benchmarks/MEASUREMENTS.md).

DATA_SOURCE_NAME = "rocketmq"


class RocketMQDataSource(DataSource):
    """``format("rocketmq")``: stream reader and stream writer of the replication connector.

    Instances are pickled to Spark's Python workers; they hold only the options.
    """

    @classmethod
    def name(cls) -> str:
        return DATA_SOURCE_NAME

    def schema(self) -> StructType:
        fmt = next((str(v) for k, v in self.options.items() if str(k).lower() == "rowformat"), "")
        return spark_schema(fmt)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from connectors.replication.reader import RocketMQStreamReader  # start-up cost: see the imports

        return RocketMQStreamReader(self.options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from connectors.replication.writer import RocketMQStreamWriter  # start-up cost: see the imports

        return RocketMQStreamWriter(self.options, schema)
