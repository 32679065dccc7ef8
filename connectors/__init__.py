"""The replicator's connectors: Python Spark data sources over RocketMQ clusters, and their shared core.

Called by the ``jobs/`` entry points (driver) and by Spark's Python workers (driver and executors).
Data flows one way, ``core`` <- each connector package; connector packages never import each other.

* ``core``         what every connector needs: the typed YAML config, Spark option parsing, executor
                   client caches, driver logging, the idempotent per-(query id, batch id) Delta commit,
                   errors, source offsets, topic mapping, row schemas
* ``replication``  the ``rocketmq`` data source: reader and writer that copy messages between clusters
"""
