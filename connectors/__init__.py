"""The replicator's connector layer: link configuration and the pure logic the Spark data sources use.

Called by the ``rocketmq`` Spark data source / sink (driver and executors) and by the ``jobs/``
entry points. Modules, each testable without Spark or a broker:

* ``config``          typed ``conf/replicator.yaml`` (clusters, links, topic mappings, policies)
* ``topic_mapping``   which source topics a link copies and under which target names
* ``loop_guard``      the ROCKETMQ_REPLICATOR_SOURCE chain that stops replication loops
* ``offsets``         the canonical source-offset JSON Spark checkpoints
* ``records``         immutable records executors hand to the driver (failed messages, offset maps)
* ``failure_policy``  dismiss / custom-hook decision for messages that could not be sent
* ``tables``          the per-link Delta tables (offsets, offset_map, failures, metrics)
* ``errors``          the ``ReplicatorError`` hierarchy
"""
