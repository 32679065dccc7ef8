"""What every connector shares; imports nothing from the connector packages. Modules, each testable
without Spark or a broker unless noted:

* ``config``            typed ``conf/replicator.yaml`` (clusters, links, topic mappings, policies)
* ``options``           Spark data source options (case-insensitive strings) read into typed values
* ``errors``            the ``ReplicatorError`` hierarchy
* ``disk_full``         whether a failure was a full disk (ENOSPC in any of its Python, Rust or Java texts)
* ``offsets``           the canonical source-offset JSON Spark checkpoints
* ``topic_mapping``     which source topics a link copies and under which target names
* ``rows``              row schemas and column names the readers produce and the writers take
* ``executor``          per executor Python worker: cached RocketMQ clients, the heap freeze
* ``driver_log``        the logging set-up of the driver-side Python workers
* ``spark_checkpoint``  the query id and offset log a writer reads from its checkpoint
* ``delta``             idempotent per-(query id, batch id) commits to a set of Delta tables (deltalake)
* ``monitoring``        heartbeat and metrics settings; the heartbeat topic's name and queue count
* ``settings_base``     the base of every settings model and the validators they share (durations, patterns)
* ``sync_settings``     the checkpoint and config-sync settings of a link
* ``link_options``      the config + link options of the polling connectors (checkpoint, config sync)
"""
