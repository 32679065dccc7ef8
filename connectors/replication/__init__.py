"""The replication connector: the ``rocketmq`` Spark data source that copies messages from a source
cluster to a target cluster (``data_source.RocketMQDataSource``), driven by ``jobs/replicate.py``.

Reader side (driver plans, executors pull): ``reader`` over ``reader_options``, ``planning``, ``pulling``
and ``arrow_rows``. Writer side (executors send, driver commits): ``writer`` over ``writer_options``,
``partition_writer`` (rows -> sends), ``sending`` (batching, in-flight sends, retries), ``placement``
(source queue -> target queue), ``outage`` (waiting out an unavailable target), ``forwarding`` (+ its C
loop ``_forward.c``: stored records -> batch entries), ``loop_guard``, ``failure_policy``, ``records``
and the link's Delta tables (``tables``).
"""
